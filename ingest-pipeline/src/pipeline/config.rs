//! The stages and the pipeline's settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::chunk::ChunkConfig;
use crate::render::RenderConfig;
use crate::store::CostModel;
use crate::text_layer::TextLayerMode;
use crate::tiling::TileConfig;
use crate::vision::TesseractReader;
use crate::worker::{PoolConfig, WorkerCommand, WorkerLimits};

/// A pipeline stage; each has its own queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// The SQLite file holding queues and store (unless `database_url` is set).
    pub db_path: PathBuf,
    /// A PostgreSQL database holding queues and store instead (`postgres://...`; needs this
    /// crate's `postgres` feature), shared by pipelines on several machines: each claims any
    /// stage's jobs, so `work_dir` must be the same shared directory on all of them (the page
    /// images one machine renders are read by another). Default `None`.
    pub database_url: Option<String>,
    /// Where page images are written.
    pub work_dir: PathBuf,
    /// Rendering (dpi, page-size guard).
    pub render: RenderConfig,
    /// Tiling of large pages.
    pub tiles: TileConfig,
    /// Orientation detection, once per page that will be read (not one that keeps its text
    /// layer), when it is rendered: this Tesseract's `--psm 0` says how far a page scanned
    /// sideways or upside down must turn, and the page image is written upright, so that the
    /// reader (whichever it is, and each tile), and the visual embedder get it upright; the page
    /// records the turn ([`PageSummary::rotation`](crate::store::PageSummary::rotation)).
    /// Needs `tesseract` with its `osd` data: a missing program fails the document with the
    /// reason. `None` (the default): pages are written as rendered. A [`TesseractReader`]
    /// reading for this pipeline need not detect again
    /// ([`with_orientation(false)`](TesseractReader::with_orientation)).
    pub orientation: Option<TesseractReader>,
    /// The PDF workers: when set, documents are opened, rendered and their text layers read in
    /// child processes of this pool ([`crate::worker`]), each under its OS limits, and a worker
    /// that breaks (`resource_limit`, `timeout`, `crashed`) fails its document alone. `None`
    /// (the default): in this process.
    pub pdf_workers: Option<PoolConfig>,
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
    /// Rendered pages waiting to be written, per rendering job, and pages made ready at once
    /// (turned upright, encoded, written) while the oldest is recorded (memory bound). Default 2.
    pub page_buffer: usize,
    /// After a claim that took fewer jobs than the stage had free workers, wait this long before
    /// claiming again; and when a worker frees while others are busy, wait up to this long for
    /// them before claiming: so that busy stages claim several jobs per transaction. Zero turns
    /// both off. Default 2 ms.
    pub claim_linger: Duration,
    /// Texts per embedding request. Default 32.
    pub embed_batch: usize,
    /// Whether a stored page is embedded (stages `embed_text` and `embed_visual`). Default
    /// true. False: a page is done once its text, tables and chunks are stored, no embedder is
    /// called, a page kept by its text layer is not rasterized (no image:
    /// [`RenderConfig::raster_text_pages`] is set to this), and a done document's page images
    /// are removed (a pipeline that only reads, as converting PDFs to Markdown does).
    pub embed: bool,
    /// How often the workers look for documents a dead letter stopped without its worker
    /// saying so ([`Pipeline::reconcile_dead_letters`](super::Pipeline::reconcile_dead_letters)).
    /// Default 5 s.
    pub sweep_interval: Duration,
    /// Cost assumptions of the report.
    pub cost: CostModel,
    /// Queue settings. Default: squeueha's (the jobs' transactions share commits through
    /// `AsyncQueue::transaction` whatever `group_commit` says).
    pub queue: squeueha::Config,
    /// A page's visual vectors are pooled by this factor before they are stored
    /// ([`crate::visual_index::pool_tokens`]; 1: kept as the model gives them, the default).
    pub visual_pool_factor: usize,
    /// How visual search indexes each model's pages (the int8 scan up to
    /// `scan_max_pages`, the centroid index above).
    pub visual_index: crate::store::VisualIndexSettings,
    /// Largest image question accepted, in pixels (width × height as its header declares
    /// them): a larger one is refused by [`Pipeline::search_image`](super::Pipeline::search_image)
    /// with [`EmbedError::ImageTooLarge`](crate::embed::EmbedError::ImageTooLarge) before it is
    /// decoded or sent to a model. Default 40,000,000.
    pub max_image_pixels: u64,
}

impl PipelineConfig {
    /// Defaults with the database and work directory under `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self {
            db_path: dir.join("ingest.db"),
            database_url: None,
            work_dir: dir.join("pages"),
            render: RenderConfig::default(),
            tiles: TileConfig::default(),
            orientation: None,
            pdf_workers: None,
            chunks: ChunkConfig::default(),
            retry_delay: Duration::from_secs(30),
            max_attempts: 3,
            visibility: Duration::from_secs(600),
            workers: Stage::ALL.map(Stage::default_workers),
            page_buffer: 2,
            embed_batch: 32,
            embed: true,
            sweep_interval: Duration::from_secs(5),
            claim_linger: Duration::from_millis(2),
            cost: CostModel::default(),
            queue: squeueha::Config::default(),
            visual_pool_factor: 1,
            visual_index: crate::store::VisualIndexSettings::default(),
            max_image_pixels: 40_000_000,
        }
    }
}

/// The pipeline's tuning as a configuration file writes it (every key optional, unknown keys
/// refused, durations in the unit their key names): `dpi` (150), `chunk_tokens` (512),
/// `chunk_overlap` (120), `retry_delay_s` (30), `max_attempts` (3), `visibility_s` (600),
/// `embed_batch` (32), `page_buffer` (2), `max_pages` (10,000: a document with more pages fails
/// with the reason), `text_layer` (`"auto"`: a page with a usable text layer keeps it and is not
/// read; `"ignore"`: every page is read), `tile_threshold_bytes` (4 MiB: a page PNG above it is
/// cut into tiles; 0 tiles every read page), `max_decoded_mb` (256: what one stream of a page,
/// and a page's streams together, may decode to; a page past it fails alone with the reason
/// `too_large` and the document goes on), `max_image_pixels` (40,000,000: the largest image
/// question, refused from its header), and `[workers]` per stage (`pdf_to_images` 2,
/// `image_to_ocr` 8, `ocr_to_database` 4, `embed_text` 2, `embed_visual` 2), and
/// `[pdf_workers]` ([`PdfWorkersTuning`]: the processes documents are read in).
/// [`apply`](Self::apply) writes them into a [`PipelineConfig`] after [`validate`](Self::validate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineTuning {
    /// Rendering resolution (10 to 1200).
    pub dpi: f32,
    /// Tokens per text chunk (512 for BGE-M3; 128 for MiniLM).
    pub chunk_tokens: usize,
    /// Tokens shared by consecutive chunks (below `chunk_tokens`).
    pub chunk_overlap: usize,
    /// Delay before a failed job is tried again, seconds.
    pub retry_delay_s: u64,
    /// Attempts per job before its dead letter.
    pub max_attempts: u32,
    /// How long a claimed job stays invisible to other workers, seconds.
    pub visibility_s: u64,
    /// Texts per embedding request.
    pub embed_batch: usize,
    /// Rendered pages waiting to be written, per rendering job.
    pub page_buffer: usize,
    /// Most pages a document may have; a longer one fails before any page is rendered.
    pub max_pages: u32,
    /// Whether pages keep their text layer (`auto`) or are all read (`ignore`).
    pub text_layer: TextLayerMode,
    /// A page PNG larger than this many bytes is cut into tiles before it is read.
    pub tile_threshold_bytes: u64,
    /// Workers per stage, by the stage's queue name (unset: the stage's default).
    pub workers: std::collections::BTreeMap<Stage, usize>,
    /// A page's visual vectors pooled by this factor before they are stored (1 to 16; 1 keeps
    /// them as the model gives them).
    pub visual_pool_factor: usize,
    /// Up to this many pages of a visual model, search scans all their int8 codes; above, the
    /// centroid index finds the candidates (0: always the centroid index).
    pub visual_scan_max_pages: usize,
    /// Candidates of the centroid index rescored by exact MaxSim (1 to 10,000).
    pub visual_rerank_candidates: usize,
    /// Most mebibytes one stream of a page, and a page's streams together, may decode to; a
    /// page past it fails alone (`too_large`) and the document goes on (at least 1).
    pub max_decoded_mb: u64,
    /// Largest image question, in pixels, read from its header (at least 1).
    pub max_image_pixels: u64,
    /// The PDF workers (`[ingest.pdf_workers]`).
    pub pdf_workers: PdfWorkersTuning,
}

/// `[pdf_workers]`: the child processes documents are opened, rendered and their text layers
/// read in ([`crate::worker`]), each under OS limits, so that a document that breaks a reader
/// costs that document and never the process that serves. Keys: `count` (2: the most workers
/// at once, each serving one document; 0: documents are read in this process), `memory_mb`
/// (1024: each worker's address space, `RLIMIT_AS`), `cpu_s` (3600: its CPU seconds,
/// `RLIMIT_CPU`, for the one document it reads), `page_timeout_s` (60: the wall-clock time of
/// opening the document and of each page, past which the worker is killed), `network` (false:
/// a worker runs in a network namespace of its own where the kernel allows an unprivileged
/// one), `command` (the program and arguments of a worker, a binary that serves
/// [`crate::worker::serve`] on its standard input and output; a binary sets its own, e.g.
/// `horos-ref worker pdf`; without one, documents are read in this process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PdfWorkersTuning {
    /// The most workers at once (0: documents are read in this process; at most 256).
    pub count: usize,
    /// Each worker's address space, MiB (at least 64).
    pub memory_mb: u64,
    /// Each worker's CPU seconds, for its one document (at least 1).
    pub cpu_s: u64,
    /// The wall-clock seconds of opening a document and of each page (at least 1).
    pub page_timeout_s: u64,
    /// Whether workers keep the network (default false).
    pub network: bool,
    /// The worker's program and arguments (`None`: the binary's own, or none).
    pub command: Option<Vec<String>>,
}

impl Default for PdfWorkersTuning {
    fn default() -> Self {
        let limits = WorkerLimits::default();
        Self {
            count: 2,
            memory_mb: limits.memory_bytes.unwrap_or(1 << 30) >> 20,
            cpu_s: limits.cpu_seconds,
            page_timeout_s: limits.page_timeout.as_secs(),
            network: !limits.no_network,
            command: None,
        }
    }
}

impl PdfWorkersTuning {
    /// The pool these settings describe for pages of at most `max_page_pixels` pixels: `None`
    /// with `count = 0` or without a command.
    pub fn pool(&self, max_page_pixels: u64) -> Option<PoolConfig> {
        let (program, args) = self.command.as_ref()?.split_first()?;
        if self.count == 0 {
            return None;
        }
        let mut command = WorkerCommand::new(program);
        for a in args {
            command = command.arg(a);
        }
        Some(PoolConfig {
            count: self.count,
            command,
            limits: WorkerLimits {
                memory_bytes: Some(self.memory_mb.saturating_mul(1 << 20)),
                cpu_seconds: self.cpu_s,
                page_timeout: Duration::from_secs(self.page_timeout_s),
                no_network: !self.network,
                max_reply_bytes: WorkerLimits::reply_ceiling(max_page_pixels),
            },
        })
    }
}

impl Default for PipelineTuning {
    fn default() -> Self {
        let c = PipelineConfig::new("");
        PipelineTuning {
            dpi: c.render.dpi,
            chunk_tokens: c.chunks.size,
            chunk_overlap: c.chunks.overlap,
            retry_delay_s: c.retry_delay.as_secs(),
            max_attempts: c.max_attempts,
            visibility_s: c.visibility.as_secs(),
            embed_batch: c.embed_batch,
            page_buffer: c.page_buffer,
            max_pages: c.render.max_pages,
            text_layer: c.render.text_layer,
            tile_threshold_bytes: c.tiles.threshold_bytes,
            workers: std::collections::BTreeMap::new(),
            visual_pool_factor: c.visual_pool_factor,
            visual_scan_max_pages: c.visual_index.scan_max_pages,
            visual_rerank_candidates: c.visual_index.centroids.candidates,
            max_decoded_mb: c.render.max_decoded_bytes >> 20,
            max_image_pixels: c.max_image_pixels,
            pdf_workers: PdfWorkersTuning::default(),
        }
    }
}

/// A [`PipelineTuning`] value out of its range, named by its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct InvalidTuning {
    /// The key, e.g. `dpi`.
    pub key: String,
    /// Its value as written.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

impl PipelineTuning {
    /// Checks every value's range; the error names the first key out of range.
    pub fn validate(&self) -> Result<(), InvalidTuning> {
        let bad = |key: &str, value: String, expected| {
            Err(InvalidTuning {
                key: key.to_owned(),
                value,
                expected,
            })
        };
        if !(self.dpi.is_finite() && (10.0..=1200.0).contains(&self.dpi)) {
            return bad("dpi", self.dpi.to_string(), "between 10 and 1200");
        }
        if self.chunk_tokens == 0 || self.chunk_overlap >= self.chunk_tokens {
            return bad(
                "chunk_overlap",
                format!(
                    "{} (chunk_tokens = {})",
                    self.chunk_overlap, self.chunk_tokens
                ),
                "below chunk_tokens, which must be above 0",
            );
        }
        for (key, v) in [
            ("max_attempts", u64::from(self.max_attempts)),
            ("visibility_s", self.visibility_s),
            ("embed_batch", self.embed_batch as u64),
            ("page_buffer", self.page_buffer as u64),
            ("max_pages", u64::from(self.max_pages)),
            ("max_decoded_mb", self.max_decoded_mb),
            ("max_image_pixels", self.max_image_pixels),
            ("pdf_workers.cpu_s", self.pdf_workers.cpu_s),
            (
                "pdf_workers.page_timeout_s",
                self.pdf_workers.page_timeout_s,
            ),
        ] {
            if v == 0 {
                return bad(key, "0".into(), "at least 1");
            }
        }
        if !(1..=16).contains(&self.visual_pool_factor) {
            return bad(
                "visual_pool_factor",
                self.visual_pool_factor.to_string(),
                "between 1 and 16",
            );
        }
        if !(1..=10_000).contains(&self.visual_rerank_candidates) {
            return bad(
                "visual_rerank_candidates",
                self.visual_rerank_candidates.to_string(),
                "between 1 and 10000",
            );
        }
        if self.pdf_workers.memory_mb < 64 {
            return bad(
                "pdf_workers.memory_mb",
                self.pdf_workers.memory_mb.to_string(),
                "at least 64",
            );
        }
        if self.pdf_workers.count > 256 {
            return bad(
                "pdf_workers.count",
                self.pdf_workers.count.to_string(),
                "between 0 and 256",
            );
        }
        if self.pdf_workers.command.as_ref().is_some_and(Vec::is_empty) {
            return bad(
                "pdf_workers.command",
                "[]".into(),
                "a program and its arguments",
            );
        }
        if let Some((stage, n)) = self.workers.iter().find(|(_, n)| !(1..=256).contains(*n)) {
            return bad(
                &format!("workers.{}", stage.queue()),
                n.to_string(),
                "between 1 and 256",
            );
        }
        Ok(())
    }

    /// Writes these values into `config`.
    pub fn apply(&self, config: &mut PipelineConfig) {
        config.render.dpi = self.dpi;
        config.chunks.size = self.chunk_tokens;
        config.chunks.overlap = self.chunk_overlap;
        config.retry_delay = Duration::from_secs(self.retry_delay_s);
        config.max_attempts = self.max_attempts;
        config.visibility = Duration::from_secs(self.visibility_s);
        config.embed_batch = self.embed_batch;
        config.page_buffer = self.page_buffer;
        config.render.max_pages = self.max_pages;
        config.render.text_layer = self.text_layer;
        config.tiles.threshold_bytes = self.tile_threshold_bytes;
        for (stage, n) in &self.workers {
            config.workers[stage.index()] = *n;
        }
        config.visual_pool_factor = self.visual_pool_factor;
        config.visual_index.scan_max_pages = self.visual_scan_max_pages;
        config.visual_index.centroids.candidates = self.visual_rerank_candidates;
        config.render.max_decoded_bytes = self.max_decoded_mb.saturating_mul(1 << 20);
        config.max_image_pixels = self.max_image_pixels;
        config.pdf_workers = self.pdf_workers.pool(config.render.max_page_pixels);
    }
}

#[cfg(test)]
mod tuning_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_are_the_pipelines_and_apply_writes_every_key() {
        let mut c = PipelineConfig::new("x");
        let before = format!("{c:?}");
        PipelineTuning::default().apply(&mut c);
        assert_eq!(format!("{c:?}"), before);
        let t: PipelineTuning = serde_json::from_value(serde_json::json!({
            "dpi": 200, "chunk_tokens": 128, "chunk_overlap": 16, "max_attempts": 5,
            "max_pages": 40, "workers": {"image_to_ocr": 3}, "text_layer": "ignore",
            "tile_threshold_bytes": 1000, "visual_pool_factor": 3, "visual_scan_max_pages": 0,
            "visual_rerank_candidates": 200, "max_decoded_mb": 8, "max_image_pixels": 1000
        }))
        .unwrap();
        t.validate().unwrap();
        t.apply(&mut c);
        assert_eq!(
            (
                c.render.dpi,
                c.chunks.size,
                c.max_attempts,
                c.render.max_pages
            ),
            (200.0, 128, 5, 40)
        );
        assert_eq!(c.workers[Stage::ImageToOcr.index()], 3);
        assert_eq!(c.render.text_layer, TextLayerMode::Ignore);
        assert_eq!(c.tiles.threshold_bytes, 1000);
        assert_eq!(c.visual_pool_factor, 3);
        assert_eq!(c.visual_index.scan_max_pages, 0);
        assert_eq!(c.visual_index.centroids.candidates, 200);
        assert_eq!(c.render.max_decoded_bytes, 8 << 20);
        assert_eq!(c.max_image_pixels, 1000);
        assert_eq!(c.workers[Stage::PdfToImages.index()], 2);
    }

    #[test]
    fn pdf_workers_make_a_pool_only_with_a_command() {
        let mut c = PipelineConfig::new("x");
        let mut t = PipelineTuning::default();
        t.apply(&mut c);
        assert!(c.pdf_workers.is_none(), "no command: in this process");
        t = serde_json::from_value(serde_json::json!({"pdf_workers": {
            "count": 3, "memory_mb": 512, "cpu_s": 20, "page_timeout_s": 7,
            "command": ["/bin/horos-ref", "worker", "pdf"]
        }}))
        .unwrap();
        t.validate().unwrap();
        t.apply(&mut c);
        let pool = c.pdf_workers.clone().unwrap();
        assert_eq!(pool.count, 3);
        assert_eq!(pool.command.program, std::path::Path::new("/bin/horos-ref"));
        assert_eq!(pool.command.args, ["worker", "pdf"]);
        assert_eq!(pool.limits.memory_bytes, Some(512 << 20));
        assert_eq!(pool.limits.cpu_seconds, 20);
        assert_eq!(pool.limits.page_timeout, Duration::from_secs(7));
        assert!(pool.limits.no_network);
        assert_eq!(
            pool.limits.max_reply_bytes,
            WorkerLimits::reply_ceiling(c.render.max_page_pixels)
        );
        t.pdf_workers.count = 0;
        t.apply(&mut c);
        assert!(c.pdf_workers.is_none(), "count = 0: in this process");
    }

    #[test]
    fn bad_values_and_unknown_keys_are_named() {
        for (json, key) in [
            (serde_json::json!({"dpi": 5}), "dpi"),
            (serde_json::json!({"max_pages": 0}), "max_pages"),
            (serde_json::json!({"max_decoded_mb": 0}), "max_decoded_mb"),
            (
                serde_json::json!({"max_image_pixels": 0}),
                "max_image_pixels",
            ),
            (serde_json::json!({"chunk_overlap": 600}), "chunk_overlap"),
            (
                serde_json::json!({"visual_pool_factor": 0}),
                "visual_pool_factor",
            ),
            (
                serde_json::json!({"visual_rerank_candidates": 0}),
                "visual_rerank_candidates",
            ),
            (
                serde_json::json!({"workers": {"embed_text": 0}}),
                "workers.embed_text",
            ),
            (
                serde_json::json!({"pdf_workers": {"memory_mb": 16}}),
                "pdf_workers.memory_mb",
            ),
            (
                serde_json::json!({"pdf_workers": {"page_timeout_s": 0}}),
                "pdf_workers.page_timeout_s",
            ),
            (
                serde_json::json!({"pdf_workers": {"command": []}}),
                "pdf_workers.command",
            ),
        ] {
            let t: PipelineTuning = serde_json::from_value(json).unwrap();
            assert_eq!(t.validate().unwrap_err().key, key);
        }
        let e = serde_json::from_value::<PipelineTuning>(serde_json::json!({"dpii": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("dpii"), "{e}");
        let e =
            serde_json::from_value::<PipelineTuning>(serde_json::json!({"workers": {"ocr": 1}}))
                .unwrap_err()
                .to_string();
        assert!(e.contains("ocr"), "{e}");
        let e = serde_json::from_value::<PipelineTuning>(serde_json::json!({"text_layer": "on"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto"), "{e}");
    }
}
