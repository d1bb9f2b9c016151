//! Ingest: a PDF of the inbox, or every PDF under one of its directories, submitted to the
//! pipeline (a file whose bytes are known is not processed twice).

use std::path::{Path, PathBuf};

use horos_server_control::Collection;
use ingest_pipeline::pipeline;
use serde::{Deserialize, Serialize};

use super::Documents;
use crate::error::OpsError;

/// What to ingest, and into which collection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"path": "reports/2024.pdf"}))]
#[schemars(example = serde_json::json!({"path": "contracts", "collection": "legal"}))]
pub struct IngestArgs {
    /// A PDF, or a directory of PDFs (searched recursively), inside the inbox; a relative path
    /// is taken from the inbox.
    pub path: PathBuf,
    /// The collection its documents belong to (who may read them: the data-plane keys that
    /// name it); `None`: `"default"`. A name is 1 to 64 bytes of `[A-Za-z0-9._-]`.
    #[serde(default)]
    #[schemars(with = "Option<String>", regex(pattern = r"^[A-Za-z0-9._-]{1,64}$"))]
    pub collection: Option<Collection>,
}

impl IngestArgs {
    /// `path` into the `"default"` collection.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            collection: None,
        }
    }
}

/// Whether a submission started an ingestion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionStatus {
    /// A new document: its ingestion was queued.
    Queued,
    /// The same bytes were submitted before: nothing was done.
    Known,
}

impl SubmissionStatus {
    /// Its name: `queued` or `known`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Known => "known",
        }
    }
}

/// One document submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The document's id.
    pub document: i64,
    /// Whether its ingestion was queued.
    pub status: SubmissionStatus,
    /// Its title (from the file name).
    pub title: String,
    /// The file, shown lossily (a file name need not be UTF-8; the pipeline keeps its exact
    /// bytes).
    pub path: String,
    /// The collection the document belongs to (for known bytes, the one they were first
    /// submitted to, whatever was asked now).
    pub collection: Collection,
    /// The failed document this one replaces ([`Documents::retry`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<i64>,
}

impl Submitted {
    pub(super) fn new(submission: pipeline::Submission, path: String) -> Self {
        let (doc, status) = match submission {
            pipeline::Submission::Queued(doc) => (doc, SubmissionStatus::Queued),
            pipeline::Submission::Known(doc) => (doc, SubmissionStatus::Known),
        };
        Self {
            document: doc.id,
            status,
            title: doc.title,
            path,
            collection: doc.collection,
            retried: None,
        }
    }
}

/// One file of a directory: submitted, or refused with its reason (the others still go).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Submission {
    /// Submitted.
    Submitted(Submitted),
    /// Refused (outside the inbox through a link, unreadable, ...).
    Refused {
        /// Why.
        refused: String,
    },
}

/// What [`Documents::ingest`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Ingested {
    /// One file.
    File(Submitted),
    /// Every PDF under a directory, sorted by path.
    Directory {
        /// Each file's outcome.
        submitted: Vec<Submission>,
    },
}

impl Ingested {
    /// The documents submitted (queued or known), in order.
    pub fn documents(&self) -> Vec<&Submitted> {
        match self {
            Self::File(s) => vec![s],
            Self::Directory { submitted } => submitted
                .iter()
                .filter_map(|s| match s {
                    Submission::Submitted(s) => Some(s),
                    Submission::Refused { .. } => None,
                })
                .collect(),
        }
    }

    /// How many documents were submitted with `status`.
    pub fn count(&self, status: SubmissionStatus) -> usize {
        self.documents()
            .iter()
            .filter(|s| s.status == status)
            .count()
    }

    /// Why files were refused, in order.
    pub fn refused(&self) -> Vec<&str> {
        match self {
            Self::File(_) => Vec::new(),
            Self::Directory { submitted } => submitted
                .iter()
                .filter_map(|s| match s {
                    Submission::Refused { refused } => Some(refused.as_str()),
                    Submission::Submitted(_) => None,
                })
                .collect(),
        }
    }
}

impl Documents {
    /// Submits `args.path` to `args.collection` (`"default"` without one), confined to the
    /// inbox (symbolic links and `..` resolved first; [`OpsError::Inbox`] when it leads out): a
    /// file is submitted, a directory's PDFs each ([`OpsError::NoPdf`] when it holds none).
    pub async fn ingest(&self, args: IngestArgs) -> Result<Ingested, OpsError> {
        let target = self.inbox.confine(&args.path)?;
        let collection = args.collection.unwrap_or_default();
        if !target.is_dir() {
            let file = self.inbox.file(&args.path)?;
            return Ok(Ingested::File(self.submit_file(&file, &collection).await?));
        }
        let files = self.inbox.pdfs_under(&target)?;
        if files.is_empty() {
            return Err(OpsError::NoPdf { dir: target });
        }
        let mut submitted = Vec::with_capacity(files.len());
        for file in files {
            submitted.push(match file {
                Ok(file) => match self.submit_file(&file, &collection).await {
                    Ok(s) => Submission::Submitted(s),
                    Err(e) => Submission::Refused {
                        refused: format!("{}: {e}", file.display()),
                    },
                },
                Err(e) => Submission::Refused {
                    refused: e.to_string(),
                },
            });
        }
        Ok(Ingested::Directory { submitted })
    }

    /// Submits one file already confined to the inbox to `collection`.
    async fn submit_file(
        &self,
        file: &Path,
        collection: &Collection,
    ) -> Result<Submitted, OpsError> {
        let submission = self.pipeline.submit_to(file, collection.clone()).await?;
        Ok(Submitted::new(
            submission,
            file.to_string_lossy().into_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::testing::{documents, pdf};

    #[tokio::test]
    async fn a_file_is_queued_once_and_known_after() {
        let (dir, docs) = documents().await;
        pdf(dir.path(), "report.pdf", "a");
        let first = docs.ingest(IngestArgs::new("report.pdf")).await.unwrap();
        let Ingested::File(s) = &first else {
            panic!("{first:?}");
        };
        assert_eq!(
            (s.status, s.title.as_str()),
            (SubmissionStatus::Queued, "report")
        );
        let v = serde_json::to_value(&first).unwrap();
        assert_eq!(v["status"], "queued");
        assert!(v.get("retried").is_none(), "{v}");
        // The same file by its absolute path: known, the same document.
        let again = docs
            .ingest(IngestArgs::new(dir.path().join("inbox/report.pdf")))
            .await
            .unwrap();
        assert_eq!(again.documents()[0].status, SubmissionStatus::Known);
        assert_eq!(again.documents()[0].document, s.document);
    }

    #[tokio::test]
    async fn a_document_belongs_to_the_collection_it_was_first_submitted_to() {
        let (dir, docs) = documents().await;
        pdf(dir.path(), "batch/a.pdf", "a");
        pdf(dir.path(), "batch/b.pdf", "b");
        let alpha = Collection::new("alpha").unwrap();
        let done = docs
            .ingest(IngestArgs {
                path: "batch".into(),
                collection: Some(alpha.clone()),
            })
            .await
            .unwrap();
        assert!(
            done.documents().iter().all(|s| s.collection == alpha),
            "{done:?}"
        );
        // The same bytes again, asked into another collection: known, and still alpha's.
        let again = docs
            .ingest(IngestArgs {
                path: "batch/a.pdf".into(),
                collection: Some(Collection::new("beta").unwrap()),
            })
            .await
            .unwrap();
        let Ingested::File(s) = &again else {
            panic!("{again:?}");
        };
        assert_eq!((s.status, &s.collection), (SubmissionStatus::Known, &alpha));
        assert_eq!(serde_json::to_value(s).unwrap()["collection"], "alpha");
        // Without one: the default collection, as the list shows.
        pdf(dir.path(), "c.pdf", "c");
        docs.ingest(IngestArgs::new("c.pdf")).await.unwrap();
        let listed = docs.list(crate::documents::ListArgs {}).await.unwrap();
        let names: Vec<&str> = listed.iter().map(|d| d.collection.as_str()).collect();
        assert_eq!(names, ["alpha", "alpha", "default"]);
        // A name that is not one is refused where the arguments are read.
        let bad = serde_json::from_value::<IngestArgs>(
            serde_json::json!({"path": "c.pdf", "collection": "../etc"}),
        );
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("not a collection name")
        );
    }

    #[tokio::test]
    async fn a_path_out_of_the_inbox_is_refused() {
        let (dir, docs) = documents().await;
        std::fs::write(dir.path().join("secret.pdf"), "%PDF-1.4 secret").unwrap();
        let e = docs
            .ingest(IngestArgs::new("../secret.pdf"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("outside the inbox"), "{e}");
        assert_eq!(e.param(), Some("path"));
        std::os::unix::fs::symlink(
            dir.path().join("secret.pdf"),
            dir.path().join("inbox/link.pdf"),
        )
        .unwrap();
        let e = docs.ingest(IngestArgs::new("link.pdf")).await.unwrap_err();
        assert!(matches!(e, OpsError::Inbox(_)), "{e:?}");
    }

    #[tokio::test]
    async fn a_directorys_pdfs_are_each_submitted_or_refused() {
        let (dir, docs) = documents().await;
        pdf(dir.path(), "batch/a.pdf", "a");
        pdf(dir.path(), "batch/sub/b.pdf", "b");
        std::fs::write(dir.path().join("outside.pdf"), "%PDF-1.4 out").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("outside.pdf"),
            dir.path().join("inbox/batch/c.pdf"),
        )
        .unwrap();
        let done = docs.ingest(IngestArgs::new("batch")).await.unwrap();
        assert_eq!(done.documents().len(), 2, "{done:?}");
        assert_eq!(done.refused().len(), 1, "{done:?}");
        assert_eq!(done.count(SubmissionStatus::Queued), 2, "{done:?}");
        assert_eq!(done.count(SubmissionStatus::Known), 0, "{done:?}");
        assert!(done.refused()[0].contains("outside the inbox"), "{done:?}");
        let v = serde_json::to_value(&done).unwrap();
        assert_eq!(v["submitted"].as_array().unwrap().len(), 3, "{v}");
        // An empty directory is said to be one.
        std::fs::create_dir(dir.path().join("inbox/empty")).unwrap();
        let e = docs.ingest(IngestArgs::new("empty")).await.unwrap_err();
        assert!(matches!(e, OpsError::NoPdf { .. }), "{e:?}");
    }
}
