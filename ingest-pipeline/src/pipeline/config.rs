//! The stages and the pipeline's settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::chunk::ChunkConfig;
use crate::render::RenderConfig;
use crate::store::CostModel;
use crate::tiling::TileConfig;

/// A pipeline stage; each has its own queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Render pages to images.
    PdfToImages,
    /// Read images (OCR or vision model).
    ImageToOcr,
    /// Store text, tables and chunks.
    OcrToDatabase,
    /// Embed text chunks.
    EmbedText,
    /// Embed page images.
    EmbedVisual,
}

impl Stage {
    /// Every stage in pipeline order.
    pub const ALL: [Stage; 5] = [
        Stage::PdfToImages,
        Stage::ImageToOcr,
        Stage::OcrToDatabase,
        Stage::EmbedText,
        Stage::EmbedVisual,
    ];

    /// The queue name.
    pub fn queue(self) -> &'static str {
        match self {
            Stage::PdfToImages => "pdf_to_images",
            Stage::ImageToOcr => "image_to_ocr",
            Stage::OcrToDatabase => "ocr_to_database",
            Stage::EmbedText => "embed_text",
            Stage::EmbedVisual => "embed_visual",
        }
    }

    /// Default number of workers (2, 8, 4, 2, 2).
    pub fn default_workers(self) -> usize {
        match self {
            Stage::PdfToImages => 2,
            Stage::ImageToOcr => 8,
            Stage::OcrToDatabase => 4,
            Stage::EmbedText | Stage::EmbedVisual => 2,
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Stage::PdfToImages => 0,
            Stage::ImageToOcr => 1,
            Stage::OcrToDatabase => 2,
            Stage::EmbedText => 3,
            Stage::EmbedVisual => 4,
        }
    }
}

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// The SQLite file holding queues and store.
    pub db_path: PathBuf,
    /// Where page images are written.
    pub work_dir: PathBuf,
    /// Rendering (dpi, page-size guard).
    pub render: RenderConfig,
    /// Tiling of large pages.
    pub tiles: TileConfig,
    /// Chunking for text embeddings.
    pub chunks: ChunkConfig,
    /// Delay before a failed job is tried again. Default 30 s.
    pub retry_delay: Duration,
    /// Attempts per job before its dead letter. Default 3.
    pub max_attempts: u32,
    /// How long a claimed job stays invisible to other workers. Default 10 min.
    pub visibility: Duration,
    /// Workers per stage at start, in [`Stage::ALL`] order.
    pub workers: [usize; 5],
    /// Rendered pages waiting to be written, per rendering job (memory bound). Default 2.
    pub page_buffer: usize,
    /// After a claim that took fewer jobs than the stage had free workers, wait this long before
    /// claiming again; and when a worker frees while others are busy, wait up to this long for
    /// them before claiming: so that busy stages claim several jobs per transaction. Zero turns
    /// both off. Default 2 ms.
    pub claim_linger: Duration,
    /// Texts per embedding request. Default 32.
    pub embed_batch: usize,
    /// Cost assumptions of the report.
    pub cost: CostModel,
    /// Queue settings. Default: squeueha's, with group commit on (every job ends with one write
    /// transaction; concurrent jobs share its commit).
    pub queue: squeueha::Config,
}

impl PipelineConfig {
    /// Defaults with the database and work directory under `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self {
            db_path: dir.join("ingest.db"),
            work_dir: dir.join("pages"),
            render: RenderConfig::default(),
            tiles: TileConfig::default(),
            chunks: ChunkConfig::default(),
            retry_delay: Duration::from_secs(30),
            max_attempts: 3,
            visibility: Duration::from_secs(600),
            workers: Stage::ALL.map(Stage::default_workers),
            page_buffer: 2,
            embed_batch: 32,
            claim_linger: Duration::from_millis(2),
            cost: CostModel::default(),
            queue: squeueha::Config {
                group_commit: true,
                ..squeueha::Config::default()
            },
        }
    }
}
