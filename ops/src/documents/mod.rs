//! Documents: PDFs from an inbox through the ingest pipeline (rendered, read, embedded, made
//! searchable), and what the pipeline knows of them. One file per operation:
//! [`ingest`](Documents::ingest) (a file or a directory of the inbox),
//! [`retry`](Documents::retry) (a failed document from scratch), [`follow`](Documents::follow)
//! (documents being ingested, until each is done or failed), [`list`](Documents::list),
//! [`pages`](Documents::pages), [`report`](Documents::report), [`export`](Documents::export)
//! (Markdown) and [`export_all`](Documents::export_all) (every document into files),
//! [`convert`](Documents::convert) (PDFs into Markdown or JSON Lines files, the pipeline run in
//! this process), [`delete`](Documents::delete), [`search`](Documents::search) and the look-alike
//! searches [`similar`](Documents::similar) and [`search_image`](Documents::search_image).

mod convert;
mod delete;
mod export;
mod follow;
mod ingest;
mod list;
mod output;
mod pages;
mod report;
mod retry;
mod search;
mod similar;

pub use convert::{
    ConvertArgs, ConvertStatus, Converted, ConvertedFile, Failure, FailureKind, STATE_DIR,
    ocr_unavailable,
};
pub use delete::Deleted;
pub use export::{ExportAllArgs, Exported, ExportedAll, ExportedDocument};
pub use follow::{DEFAULT_EVERY_MS, FailedDocument, FollowArgs, Followed, Progress, STALLED_AFTER};
pub use ingest::{IngestArgs, Ingested, Submission, SubmissionStatus, Submitted};
pub use ingest_pipeline::store::ExportFormat;
pub use list::ListArgs;
pub use retry::RetryArgs;
pub use search::{DEFAULT_K, Hit, SearchArgs};
pub use similar::SimilarArgs;

use ingest_pipeline::configured::ConfiguredPipeline;
use ingest_pipeline::inbox::Inbox;
use ingest_pipeline::store::Reads;
use serde::Deserialize;

use crate::error::OpsError;

/// One document, by id (the argument of [`pages`](Documents::pages),
/// [`report`](Documents::report), [`export`](Documents::export) and
/// [`delete`](Documents::delete)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"id": 3}))]
pub struct DocumentArgs {
    /// The document's id (from [`Documents::ingest`]).
    #[schemars(description = "The document's id (from ingest).")]
    pub id: i64,
}

/// The documents of one pipeline, submitted from one inbox: the operations on them are its
/// methods. Cheap to clone (the pipeline is a handle).
#[derive(Clone)]
pub struct Documents {
    pipeline: ConfiguredPipeline,
    inbox: Inbox,
}

impl std::fmt::Debug for Documents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Documents")
            .field("inbox", &self.inbox)
            .finish_non_exhaustive()
    }
}

impl Documents {
    /// The documents of `pipeline`; files are accepted from `inbox` only.
    pub fn new(pipeline: ConfiguredPipeline, inbox: Inbox) -> Self {
        Self { pipeline, inbox }
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &ConfiguredPipeline {
        &self.pipeline
    }

    /// The inbox.
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// Runs `f` on a read handle of the pipeline's store, on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Reads) -> Result<T, OpsError> + Send + 'static,
    ) -> Result<T, OpsError> {
        let mut reads = self.pipeline.reads();
        tokio::task::spawn_blocking(move || f(&mut reads)).await?
    }
}

#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used)]
    //! A pipeline in a temporary directory (Tesseract reads, nothing embeds: no worker runs in
    //! these tests), its inbox beside it, and documents written into its store as the workers
    //! would.

    use std::path::{Path, PathBuf};

    use ingest_pipeline::configured::{
        self, EmbeddingsSettings, PipelineSettings, ReaderSettings, VisualSettings,
    };
    use ingest_pipeline::pipeline::PipelineTuning;
    use ingest_pipeline::store::{self, PageImage};

    use super::*;

    /// The pipeline's directory (`pipeline/`), its inbox (`inbox/`) and the documents.
    pub async fn documents() -> (tempfile::TempDir, Documents) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("inbox")).unwrap();
        let settings = PipelineSettings {
            dir: dir.path().join("pipeline"),
            database_url: None,
            reader: ReaderSettings::Tesseract,
            detect_rotation: false,
            embeddings: Some(EmbeddingsSettings {
                url: "http://127.0.0.1:9".into(),
                model: "m".into(),
            }),
            visual: VisualSettings::PixelPatchFallback,
            tuning: PipelineTuning::default(),
        };
        let pipeline = configured::open(&settings).await.unwrap();
        let inbox = Inbox::new(dir.path().join("inbox"));
        (dir, Documents::new(pipeline, inbox))
    }

    /// Writes a PDF-looking file (its bytes differ by `body`) at `rel` under the inbox.
    pub fn pdf(dir: &Path, rel: &str, body: &str) -> PathBuf {
        let path = dir.join("inbox").join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("%PDF-1.4 {body}")).unwrap();
        path
    }

    /// Writes `<name>.pdf` (its bytes differ by `name`) into the inbox and ingests it; its id.
    pub async fn ingested(dir: &Path, docs: &Documents, name: &str) -> i64 {
        pdf(dir, &format!("{name}.pdf"), name);
        docs.ingest(crate::documents::IngestArgs::new(format!("{name}.pdf")))
            .await
            .unwrap()
            .documents()[0]
            .document
    }

    /// Stores page `page_no` of document `doc` with `text`, as the reading stage would.
    pub fn read_page(docs: &Documents, doc: i64, page_no: u32, text: &str) {
        docs.pipeline()
            .queue()
            .transaction(|tx| -> Result<(), store::StoreError> {
                store::insert_page(
                    tx,
                    &PageImage {
                        doc_id: doc,
                        page_no,
                        width: 10,
                        height: 10,
                        image_bytes: 0,
                        image_path: "page.png",
                        tiles: 1,
                    },
                )?;
                let reading = ingest_pipeline::vision::Reading {
                    text: text.into(),
                    ..Default::default()
                };
                store::store_page_text(tx, doc, page_no, &reading, "test", &[])?;
                Ok(())
            })
            .unwrap();
    }

    /// Marks document `doc` failed, as a worker does when a stage gives up.
    pub fn fail(docs: &Documents, doc: i64, why: &str) {
        docs.pipeline()
            .queue()
            .transaction(|tx| store::fail_document(tx, doc, why))
            .unwrap();
    }
}
