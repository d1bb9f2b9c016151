//! A pipeline as a configuration file describes it: [`PipelineSettings`] (which servers read and
//! embed, where its files live, its tuning), and [`open`], which builds the
//! [`ConfiguredPipeline`] they name. A binary translates its own configuration format into these
//! settings; the choice of reader and embedder is dispatched at run time by [`Reader`] and
//! [`Visual`], so that one pipeline type serves every configuration. [`IngestSettings`] is the
//! `[ingest]` section of a configuration file that describes these settings.

mod dispatch;
mod settings;

pub use dispatch::{Reader, TextEmbeddings, Visual};
pub use settings::{IngestSettings, ReaderKind, VisualKind};

use std::path::PathBuf;

use crate::embed::EmbedError;
use crate::pipeline::{Pipeline, PipelineConfig, PipelineError, PipelineTuning, Stage};
use crate::vision::{TesseractReader, VisionError};

/// The pipeline type [`open`] builds, whatever the settings.
pub type ConfiguredPipeline = Pipeline<Reader, TextEmbeddings, Visual>;

/// Which reader reads the page images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaderSettings {
    /// Tesseract on the CPU.
    Tesseract,
    /// An OpenAI-compatible vision model.
    VisionModel {
        /// Its server (`/v1/chat/completions` below it).
        url: String,
        /// The model name.
        model: String,
        /// Whether the pages it cannot read while its server is down (refused, 5xx) are read by
        /// Tesseract instead; each page records which read it. Off where a stopped server is
        /// not down but waiting for demand (a lane an allocator switches).
        tesseract_fallback: bool,
    },
}

/// Which embedder embeds the page images (MaxSim search).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisualSettings {
    /// A late-interaction model (ColPali, ColQwen) behind vLLM's `/pooling`: pages and text
    /// questions share its vector space.
    Pooling {
        /// The server (no `/v1`).
        url: String,
        /// The model name.
        model: String,
    },
    /// Offline pixel patches, no model: finds re-renderings of a page, never answers a text
    /// question.
    PixelPatchFallback,
}

/// The text embeddings server and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingsSettings {
    /// The server (`/v1/embeddings` below it).
    pub url: String,
    /// The model name.
    pub model: String,
}

/// Everything [`open`] needs: the servers that read and embed, the pipeline's directory or
/// database, and its tuning.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSettings {
    /// The pipeline's SQLite file and page images (`ingest.db`, `pages/` below it).
    pub dir: PathBuf,
    /// A PostgreSQL database shared with other machines, instead of the SQLite file.
    pub database_url: Option<String>,
    /// The page reader.
    pub reader: ReaderSettings,
    /// Whether each page to be read has its orientation detected by Tesseract (`--psm 0`) when
    /// it is rendered, so that a sideways or upside-down scan goes upright to the reader and to
    /// the visual embedder.
    pub detect_rotation: bool,
    /// The text embeddings server and model; `None`: the pages are read and stored but never
    /// embedded, neither their text nor their image (`visual` is then unused): a pipeline that
    /// only reads, as [`PipelineSettings::reading_only`] makes.
    pub embeddings: Option<EmbeddingsSettings>,
    /// The visual embedder.
    pub visual: VisualSettings,
    /// The pipeline's tuning (rendering, chunks, retries, workers).
    pub tuning: PipelineTuning,
}

impl PipelineSettings {
    /// A pipeline that only reads, in `dir`'s own SQLite file: Tesseract reads the pages that
    /// have no usable text layer (turned upright first), nothing is embedded, and the tuning is
    /// the default's.
    pub fn reading_only(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            database_url: None,
            reader: ReaderSettings::Tesseract,
            detect_rotation: true,
            embeddings: None,
            visual: VisualSettings::PixelPatchFallback,
            tuning: PipelineTuning::default(),
        }
    }

    /// The low-level [`PipelineConfig`]: the files under `dir` (or the PostgreSQL database), the
    /// tuning applied, orientation detection when `detect_rotation` is on, and embedding when
    /// `embeddings` are set.
    pub fn pipeline_config(&self) -> PipelineConfig {
        let mut cfg = PipelineConfig::new(&self.dir);
        cfg.database_url.clone_from(&self.database_url);
        self.tuning.apply(&mut cfg);
        cfg.orientation = self.detect_rotation.then(TesseractReader::default);
        cfg.embed = self.embeddings.is_some();
        cfg
    }

    /// The vision model that reads the pages, if a model reads them (not Tesseract).
    pub fn vision_model(&self) -> Option<&str> {
        match &self.reader {
            ReaderSettings::VisionModel { model, .. } => Some(model),
            ReaderSettings::Tesseract => None,
        }
    }

    /// The stages whose waiting work a server of `model` does: reading pages
    /// ([`Stage::ImageToOcr`]) when it is the vision model, embedding chunks
    /// ([`Stage::EmbedText`]) when it is the embeddings model. Their backlog is that server's
    /// demand ([`StageBacklog`](crate::backlog::StageBacklog)).
    pub fn stages_served_by(&self, model: &str) -> Vec<Stage> {
        let mut stages = Vec::new();
        if self.vision_model() == Some(model) {
            stages.push(Stage::ImageToOcr);
        }
        if self.embeddings.as_ref().is_some_and(|e| e.model == model) {
            stages.push(Stage::EmbedText);
        }
        stages
    }
}

/// Why a pipeline could not be built from its settings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The vision reader's client could not be made (a malformed URL, say).
    #[error("the vision reader: {0}")]
    Reader(#[source] VisionError),
    /// The text embeddings client could not be made.
    #[error("the embeddings model: {0}")]
    Embeddings(#[source] EmbedError),
    /// The visual embedder's client could not be made.
    #[error("the visual embedder: {0}")]
    Visual(#[source] EmbedError),
    /// The pipeline's database could not be opened or its tables created.
    #[error("{0}")]
    Open(#[from] PipelineError),
    /// The blocking task that opens the database failed.
    #[error("opening the pipeline: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Opens the pipeline `settings` describe (creating its tables), without starting workers: on
/// the PostgreSQL database when `database_url` is set (shared with other machines), else in
/// `dir`'s own SQLite file. The database is opened on a blocking thread.
pub async fn open(settings: &PipelineSettings) -> Result<ConfiguredPipeline, SetupError> {
    let reader = Reader::from_settings(&settings.reader).map_err(SetupError::Reader)?;
    let embedder = TextEmbeddings::from_settings(settings.embeddings.as_ref())
        .map_err(SetupError::Embeddings)?;
    let visual = Visual::from_settings(&settings.visual).map_err(SetupError::Visual)?;
    let cfg = settings.pipeline_config();
    if cfg.database_url.is_some() && cfg.db_path.exists() {
        tracing::warn!(
            file = %cfg.db_path.display(),
            "the pipeline uses the PostgreSQL database: the documents of this earlier SQLite \
             file are not read (submit them again to share them)"
        );
    }
    let pipeline =
        tokio::task::spawn_blocking(move || Pipeline::open(cfg, reader, embedder, visual))
            .await??;
    Ok(pipeline)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    use crate::embed::TextEmbedder;

    fn settings(dir: &std::path::Path, reader: ReaderSettings) -> PipelineSettings {
        PipelineSettings {
            dir: dir.to_path_buf(),
            database_url: None,
            reader,
            detect_rotation: true,
            embeddings: Some(EmbeddingsSettings {
                url: "http://127.0.0.1:1".into(),
                model: "BAAI/bge-m3".into(),
            }),
            visual: VisualSettings::PixelPatchFallback,
            tuning: PipelineTuning::default(),
        }
    }

    fn vision() -> ReaderSettings {
        ReaderSettings::VisionModel {
            url: "http://127.0.0.1:1".into(),
            model: "Qwen/Qwen2-VL-7B-Instruct".into(),
            tesseract_fallback: true,
        }
    }

    #[test]
    fn a_model_serves_the_stages_it_reads_or_embeds_for() {
        let dir = std::path::Path::new("x");
        let s = settings(dir, vision());
        assert_eq!(
            s.stages_served_by("Qwen/Qwen2-VL-7B-Instruct"),
            vec![Stage::ImageToOcr]
        );
        assert_eq!(s.stages_served_by("BAAI/bge-m3"), vec![Stage::EmbedText]);
        assert!(s.stages_served_by("other").is_empty());
        // Tesseract reads: no model's server reads pages, whatever its name.
        let t = settings(dir, ReaderSettings::Tesseract);
        assert_eq!(t.vision_model(), None);
        assert!(t.stages_served_by("Qwen/Qwen2-VL-7B-Instruct").is_empty());
    }

    #[test]
    fn the_pipeline_config_follows_the_settings() {
        let mut s = settings(std::path::Path::new("d"), ReaderSettings::Tesseract);
        s.tuning.dpi = 200.0;
        let cfg = s.pipeline_config();
        assert_eq!(cfg.db_path, std::path::Path::new("d").join("ingest.db"));
        assert_eq!(cfg.render.dpi, 200.0);
        assert!(cfg.orientation.is_some() && cfg.database_url.is_none() && cfg.embed);
        s.detect_rotation = false;
        s.database_url = Some("postgres://x".into());
        let cfg = s.pipeline_config();
        assert!(cfg.orientation.is_none());
        assert_eq!(cfg.database_url.as_deref(), Some("postgres://x"));
        // Reading only: nothing embeds, and no model serves the embedding stage.
        let r = PipelineSettings::reading_only("out/.horos");
        assert!(!r.pipeline_config().embed);
        assert_eq!(
            r.pipeline_config().db_path,
            Path::new("out/.horos/ingest.db")
        );
        assert!(r.stages_served_by("BAAI/bge-m3").is_empty());
    }

    #[tokio::test]
    async fn open_builds_the_pipeline_the_settings_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(&settings(dir.path(), vision())).await.unwrap();
        assert_eq!(p.text_embedder().name(), "BAAI/bge-m3");
        assert!(matches!(p.visual(), Visual::PixelPatchFallback(_)));
        assert!(dir.path().join("ingest.db").exists());
        let mut bad = settings(dir.path(), ReaderSettings::Tesseract);
        bad.embeddings = Some(EmbeddingsSettings {
            url: "not a url".into(),
            model: "m".into(),
        });
        let e = open(&bad).await.err().unwrap();
        assert!(matches!(e, SetupError::Embeddings(_)), "{e:?}");
    }
}
