//! `[ingest]`: the TOML section, translated into ingest-pipeline's
//! [`PipelineSettings`] (the inbox stays the binary's: it confines the paths its commands and
//! tools are given).

use std::path::PathBuf;

use ingest_pipeline::configured::{PipelineSettings, ReaderSettings, VisualSettings};
use serde::Deserialize;

use super::{from_table, take_keys};

/// How `[ingest]` reads page images.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReaderKind {
    /// Tesseract on the CPU.
    Tesseract,
    /// An OpenAI-compatible vision model at `vision_url`.
    Openai,
}

/// Which visual embedder `[ingest]` uses for the page images (MaxSim search).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisualKind {
    /// A late-interaction model (ColPali, ColQwen) behind vLLM's `/pooling` at `visual_url`:
    /// pages and text questions share its vector space (`search --mode visual`).
    Pooling {
        /// The server (no `/v1`).
        url: String,
        /// The model name.
        model: String,
    },
    /// `visual = "pixel-patch-fallback"`, the default without `visual_url`: offline pixel
    /// patches, no model; it finds re-renderings of a page, never answers a text question.
    PixelPatchFallback,
}

/// `[ingest]`: PDFs from the inbox into searchable text, tables and embeddings. The binary's
/// keys say where documents come from and which servers read and embed them; every other key is
/// ingest-pipeline's [`PipelineTuning`](ingest_pipeline::pipeline::PipelineTuning) (`dpi`,
/// `chunk_tokens`, `chunk_overlap`, `retry_delay_s`, `max_attempts`, `[ingest.workers]`, ...).
#[derive(Debug, Clone)]
pub struct IngestSection {
    /// The only directory documents are accepted from (relative: to the configuration file).
    pub inbox: PathBuf,
    /// The pipeline's database and page images (relative: to the configuration file).
    pub dir: PathBuf,
    /// `tesseract` or `openai`.
    pub reader: ReaderKind,
    /// The vision server (reader = "openai").
    pub vision_url: Option<String>,
    /// The vision model name.
    pub vision_model: String,
    /// Whether pages the vision model cannot read while its server is down (refused, 5xx) are
    /// read by Tesseract instead (default true); each page records which read it. `run` turns
    /// it off when `[allocator]` switches the model's lane: a parked lane is not down.
    pub vision_fallback: bool,
    /// Whether each page to be read (not one that keeps its text layer) has its orientation
    /// detected by Tesseract (`--psm 0`, package `tesseract-ocr-osd`) when it is rendered, so
    /// that a sideways or upside-down scan goes upright to the reader, Tesseract or the vision
    /// model, and to the visual embedder (default true; each page records its turn).
    pub detect_rotation: bool,
    /// The embeddings server (`/v1/embeddings`), e.g. the coordinator.
    pub embeddings_url: String,
    /// The embeddings model name.
    pub embeddings_model: String,
    /// The visual embedder (`visual_url` + `visual_model`, or the pixel-patch fallback).
    pub visual: VisualKind,
    /// The pipeline's own settings.
    pub tuning: ingest_pipeline::pipeline::PipelineTuning,
}

/// The keys of `[ingest]` that are the binary's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IngestBinaryKeys {
    inbox: PathBuf,
    #[serde(default = "default_ingest_dir")]
    dir: PathBuf,
    #[serde(default = "default_reader")]
    reader: ReaderKind,
    #[serde(default)]
    vision_url: Option<String>,
    #[serde(default = "default_vision_model")]
    vision_model: String,
    #[serde(default = "default_true")]
    vision_fallback: bool,
    #[serde(default = "default_true")]
    detect_rotation: bool,
    embeddings_url: String,
    embeddings_model: String,
    #[serde(default)]
    visual: Option<String>,
    #[serde(default)]
    visual_url: Option<String>,
    #[serde(default = "default_visual_model")]
    visual_model: String,
}

const BINARY_KEYS: [&str; 12] = [
    "inbox",
    "dir",
    "reader",
    "vision_url",
    "vision_model",
    "vision_fallback",
    "detect_rotation",
    "embeddings_url",
    "embeddings_model",
    "visual",
    "visual_url",
    "visual_model",
];

/// Why `reader = "openai"` alone is refused.
const NO_VISION_URL: &str = "ingest.vision_url is needed with ingest.reader = \"openai\"";

/// `visual = ...` naming the offline fallback.
const PIXEL_PATCH_FALLBACK: &str = "pixel-patch-fallback";

impl<'de> Deserialize<'de> for IngestSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let b: IngestBinaryKeys = from_table(take_keys(&mut table, &BINARY_KEYS))?;
        let visual = match (b.visual.as_deref(), b.visual_url) {
            (None | Some("pooling"), Some(url)) => VisualKind::Pooling {
                url,
                model: b.visual_model,
            },
            (None | Some(PIXEL_PATCH_FALLBACK), None) => VisualKind::PixelPatchFallback,
            (Some("pooling"), None) => {
                return Err(serde::de::Error::custom(
                    "ingest.visual = \"pooling\" needs ingest.visual_url",
                ));
            }
            (Some(PIXEL_PATCH_FALLBACK), Some(_)) => {
                return Err(serde::de::Error::custom(
                    "ingest.visual_url is set but ingest.visual = \"pixel-patch-fallback\"",
                ));
            }
            (Some(other), _) => {
                return Err(serde::de::Error::custom(format!(
                    "ingest.visual = \"{other}\" (expected \"pooling\" or \"{PIXEL_PATCH_FALLBACK}\")"
                )));
            }
        };
        Ok(IngestSection {
            inbox: b.inbox,
            dir: b.dir,
            reader: b.reader,
            vision_url: b.vision_url,
            vision_model: b.vision_model,
            vision_fallback: b.vision_fallback,
            detect_rotation: b.detect_rotation,
            embeddings_url: b.embeddings_url,
            embeddings_model: b.embeddings_model,
            visual,
            tuning: from_table(table)?,
        })
    }
}

fn default_ingest_dir() -> PathBuf {
    PathBuf::from("ingest")
}
fn default_reader() -> ReaderKind {
    ReaderKind::Tesseract
}
fn default_visual_model() -> String {
    "vidore/colpali-v1.3-hf".to_owned()
}
fn default_true() -> bool {
    true
}
fn default_vision_model() -> String {
    "Qwen/Qwen2-VL-7B-Instruct".to_owned()
}

impl IngestSection {
    /// The pipeline's settings this section describes, on the PostgreSQL `database_url` when
    /// given (the configuration's shared database), else in `dir`'s own SQLite file.
    pub fn settings(&self, database_url: Option<&str>) -> Result<PipelineSettings, String> {
        let reader = match self.reader {
            ReaderKind::Tesseract => ReaderSettings::Tesseract,
            ReaderKind::Openai => ReaderSettings::VisionModel {
                url: self.vision_url.clone().ok_or(NO_VISION_URL)?,
                model: self.vision_model.clone(),
                tesseract_fallback: self.vision_fallback,
            },
        };
        let visual = match &self.visual {
            VisualKind::Pooling { url, model } => VisualSettings::Pooling {
                url: url.clone(),
                model: model.clone(),
            },
            VisualKind::PixelPatchFallback => VisualSettings::PixelPatchFallback,
        };
        Ok(PipelineSettings {
            dir: self.dir.clone(),
            database_url: database_url.map(str::to_owned),
            reader,
            detect_rotation: self.detect_rotation,
            embeddings_url: self.embeddings_url.clone(),
            embeddings_model: self.embeddings_model.clone(),
            visual,
            tuning: self.tuning.clone(),
        })
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        self.tuning.validate().map_err(|e| format!("ingest.{e}"))?;
        if self.reader == ReaderKind::Openai && self.vision_url.is_none() {
            return Err(NO_VISION_URL.into());
        }
        if let VisualKind::Pooling { url, model } = &self.visual
            && (url.trim().is_empty() || model.trim().is_empty())
        {
            return Err("ingest.visual_url and ingest.visual_model must not be empty".into());
        }
        Ok(())
    }
}
