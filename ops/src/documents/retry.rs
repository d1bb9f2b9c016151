//! Retry: a failed document ingested again from scratch, named by its id or by the file it was
//! submitted from.

use std::ffi::OsStr;
use std::path::PathBuf;

use ingest_pipeline::store::{self, DocStatus};
use serde::Deserialize;

use super::{Documents, Submitted};
use crate::error::OpsError;

/// Which failed document: `{"document": ID}` or `{"path": PATH}` (a file of the inbox, confined
/// like a new one; its latest failed document).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RetryArgs {
    /// The document's id.
    Document(i64),
    /// The file it was submitted from.
    Path(PathBuf),
}

impl RetryArgs {
    /// What a person typed to name a failed document: its id when it is a number, else the
    /// file it was submitted from (any name, UTF-8 or not).
    pub fn from_target(target: &OsStr) -> Self {
        match target.to_str().and_then(|s| s.parse::<i64>().ok()) {
            Some(id) => Self::Document(id),
            None => Self::Path(PathBuf::from(target)),
        }
    }
}

impl Documents {
    /// Ingests a failed document again from scratch: it is deleted with everything derived from
    /// it, and its file submitted again (a new document id; [`Submitted::retried`] is the old
    /// one). Refused with [`OpsError::NotFailed`] for a document that did not fail, and with
    /// [`OpsError::NeverSubmitted`] or [`OpsError::NoFailedDocument`] for a path.
    pub async fn retry(&self, args: RetryArgs) -> Result<Submitted, OpsError> {
        let id = match args {
            RetryArgs::Document(id) => id,
            RetryArgs::Path(path) => {
                let file = self.inbox.file(&path)?;
                self.failed_document_at(file).await?
            }
        };
        let submission = self.pipeline.retry(id).await?;
        let path = submission.document().path.clone();
        let mut out = Submitted::new(submission, path);
        out.retried = Some(id);
        Ok(out)
    }

    /// The failed document submitted from `file` (its exact path), the latest if several were.
    async fn failed_document_at(&self, file: PathBuf) -> Result<i64, OpsError> {
        self.read(move |reads| {
            let docs = store::documents(reads)?;
            let from_file: Vec<_> = docs.iter().filter(|d| d.source_path() == file).collect();
            if from_file.is_empty() {
                return Err(OpsError::NeverSubmitted { path: file });
            }
            from_file
                .iter()
                .filter(|d| d.status == DocStatus::Failed)
                .map(|d| d.id)
                .next_back()
                .ok_or(OpsError::NoFailedDocument { path: file })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::documents::testing::{documents, fail, pdf};
    use crate::documents::{IngestArgs, SubmissionStatus};

    #[tokio::test]
    async fn a_failed_document_is_replaced_by_a_new_one_by_id_or_path() {
        let (dir, docs) = documents().await;
        let file = pdf(dir.path(), "a.pdf", "a");
        let first = docs
            .ingest(IngestArgs::new("a.pdf"))
            .await
            .unwrap()
            .documents()[0]
            .document;
        // Pending: not retried.
        let e = docs.retry(RetryArgs::Document(first)).await.unwrap_err();
        assert!(matches!(e, OpsError::NotFailed { .. }), "{e:?}");
        fail(&docs, first, "image_to_ocr: no reader");
        let by_id = docs.retry(RetryArgs::Document(first)).await.unwrap();
        assert_eq!(by_id.retried, Some(first));
        assert_eq!(by_id.status, SubmissionStatus::Queued);
        assert_ne!(by_id.document, first);
        assert_eq!(
            std::fs::canonicalize(&by_id.path).unwrap(),
            std::fs::canonicalize(&file).unwrap()
        );
        // By its path: the latest failed document from that file.
        fail(&docs, by_id.document, "again");
        let args: RetryArgs = serde_json::from_value(json!({"path": "a.pdf"})).unwrap();
        let by_path = docs.retry(args).await.unwrap();
        assert_eq!(by_path.retried, Some(by_id.document));
        // Nothing failed from it now; a file never submitted is said to be one.
        let e = docs
            .retry(RetryArgs::Path("a.pdf".into()))
            .await
            .unwrap_err();
        assert!(matches!(e, OpsError::NoFailedDocument { .. }), "{e:?}");
        pdf(dir.path(), "b.pdf", "b");
        let e = docs
            .retry(RetryArgs::Path("b.pdf".into()))
            .await
            .unwrap_err();
        assert!(matches!(e, OpsError::NeverSubmitted { .. }), "{e:?}");
        let e = docs.retry(RetryArgs::Document(999)).await.unwrap_err();
        assert_eq!(e.to_string(), "no document 999");
    }

    #[test]
    fn the_target_is_an_id_or_a_path_and_nothing_else() {
        assert_eq!(
            serde_json::from_value::<RetryArgs>(json!({"document": 4})).unwrap(),
            RetryArgs::Document(4)
        );
        assert!(serde_json::from_value::<RetryArgs>(json!({"doc": 4})).is_err());
        assert_eq!(
            RetryArgs::from_target(OsStr::new("12")),
            RetryArgs::Document(12)
        );
        assert_eq!(
            RetryArgs::from_target(OsStr::new("12.pdf")),
            RetryArgs::Path("12.pdf".into())
        );
    }
}
