//! `[ingest]`.

use std::path::PathBuf;

use serde::Deserialize;

/// How `[ingest]` reads page images.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReaderKind {
    /// Tesseract on the CPU.
    Tesseract,
    /// An OpenAI-compatible vision model at `vision_url`.
    Openai,
}

/// `[ingest]`: PDFs from the inbox into searchable text, tables and embeddings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSection {
    /// The only directory documents are accepted from (relative: to the configuration file).
    pub inbox: PathBuf,
    /// The pipeline's database and page images (relative: to the configuration file).
    #[serde(default = "default_ingest_dir")]
    pub dir: PathBuf,
    /// `tesseract` or `openai`.
    #[serde(default = "default_reader")]
    pub reader: ReaderKind,
    /// The vision server (reader = "openai").
    #[serde(default)]
    pub vision_url: Option<String>,
    /// The vision model name.
    #[serde(default = "default_vision_model")]
    pub vision_model: String,
    /// The embeddings server (`/v1/embeddings`), e.g. the coordinator.
    pub embeddings_url: String,
    /// The embeddings model name.
    pub embeddings_model: String,
    /// Rendering resolution.
    #[serde(default = "default_dpi")]
    pub dpi: f32,
    /// Tokens per text chunk (512 for BGE-M3; 128 for MiniLM).
    #[serde(default = "default_chunk")]
    pub chunk_tokens: usize,
    /// Overlap of consecutive chunks, tokens.
    #[serde(default = "default_overlap")]
    pub chunk_overlap: usize,
    /// Delay before a failed job is tried again, seconds.
    #[serde(default = "default_retry")]
    pub retry_delay_s: u64,
}

fn default_ingest_dir() -> PathBuf {
    PathBuf::from("ingest")
}
fn default_reader() -> ReaderKind {
    ReaderKind::Tesseract
}
fn default_vision_model() -> String {
    "Qwen/Qwen2-VL-7B-Instruct".to_owned()
}
fn default_dpi() -> f32 {
    150.0
}
fn default_chunk() -> usize {
    512
}
fn default_overlap() -> usize {
    120
}
fn default_retry() -> u64 {
    30
}

impl IngestSection {
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(self.dpi.is_finite() && (10.0..=1200.0).contains(&self.dpi)) {
            return Err(format!(
                "ingest.dpi = {} is not between 10 and 1200",
                self.dpi
            ));
        }
        if self.chunk_tokens == 0 || self.chunk_overlap >= self.chunk_tokens {
            return Err(format!(
                "ingest.chunk_overlap = {} must be below ingest.chunk_tokens = {} (> 0)",
                self.chunk_overlap, self.chunk_tokens
            ));
        }
        if self.reader == ReaderKind::Openai && self.vision_url.is_none() {
            return Err("ingest.vision_url is needed with ingest.reader = \"openai\"".into());
        }
        Ok(())
    }
}
