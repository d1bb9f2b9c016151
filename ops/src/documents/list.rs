//! List: every document of the pipeline, newest last.

use ingest_pipeline::store::{self, Document};
use serde::Deserialize;

use super::Documents;
use crate::error::OpsError;

/// No arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

impl Documents {
    /// Every document: its status, pages and why it failed.
    pub async fn list(&self, _args: ListArgs) -> Result<Vec<Document>, OpsError> {
        self.read(|reads| Ok(store::documents(reads)?)).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ingest_pipeline::store::DocStatus;

    use super::*;
    use crate::documents::IngestArgs;
    use crate::documents::testing::{documents, fail, pdf};

    #[tokio::test]
    async fn documents_are_listed_with_their_status_and_error() {
        let (dir, docs) = documents().await;
        assert!(docs.list(ListArgs {}).await.unwrap().is_empty());
        pdf(dir.path(), "a.pdf", "a");
        pdf(dir.path(), "b.pdf", "b");
        for path in ["a.pdf", "b.pdf"] {
            docs.ingest(IngestArgs::new(path)).await.unwrap();
        }
        let listed = docs.list(ListArgs {}).await.unwrap();
        fail(&docs, listed[1].id, "broken");
        let listed = docs.list(ListArgs {}).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].status, DocStatus::Pending);
        assert_eq!(
            (listed[1].status, listed[1].error.as_deref()),
            (DocStatus::Failed, Some("broken"))
        );
    }
}
