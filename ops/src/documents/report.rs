//! Report: one document's pages, tiles, chunks, tables, time and model time per stage, and
//! estimated cost, with its status and why it failed.

use ingest_pipeline::pipeline::PipelineError;
use ingest_pipeline::store::{Report, StoreError};

use super::{DocumentArgs, Documents};
use crate::error::OpsError;

impl Documents {
    /// The report of document `args.id` ([`OpsError::NoDocument`] when there is no such
    /// document).
    pub async fn report(&self, args: DocumentArgs) -> Result<Report, OpsError> {
        let id = args.id;
        let pipeline = self.pipeline.clone();
        tokio::task::spawn_blocking(move || pipeline.report(id))
            .await?
            .map_err(|e| match e {
                PipelineError::Store(StoreError::NotFound(_)) => OpsError::NoDocument(id),
                other => other.into(),
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ingest_pipeline::store::DocStatus;

    use super::*;
    use crate::documents::testing::{documents, ingested, read_page};

    #[tokio::test]
    async fn a_pending_documents_report_counts_what_was_read_so_far() {
        let (dir, docs) = documents().await;
        let id = ingested(dir.path(), &docs, "a").await;
        read_page(&docs, id, 1, "some text");
        let report = docs.report(DocumentArgs { id }).await.unwrap();
        assert_eq!(report.document.status, DocStatus::Pending);
        assert_eq!(report.pages, 1);
        let e = docs.report(DocumentArgs { id: 7 }).await.unwrap_err();
        assert!(matches!(e, OpsError::NoDocument(7)), "{e:?}");
        assert!(e.to_string().contains("document 7"));
    }
}
