//! What reading a page image gives: a [`Reading`] (its text, its [`Word`]s with their boxes,
//! what produced it: [`ReadBy`]) or a [`VisionError`]. The vocabulary shared by the readers
//! ([`vision`](crate::vision)), the text layer ([`text_layer`](crate::text_layer)), the tile
//! joins ([`tiling`](crate::tiling)) and the page turns ([`orientation`](crate::orientation));
//! it imports nothing from them (only the [`layout`](crate::layout) a text layer gives), and
//! each re-exports what it uses from its old place.

use serde::{Deserialize, Serialize};

use crate::layout::PageLayout;

/// A recognised word with its box, in the coordinates of the image it was read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Word {
    /// The word.
    pub text: String,
    /// Left edge in pixels.
    pub x: u32,
    /// Top edge in pixels.
    pub y: u32,
    /// Width in pixels.
    pub w: u32,
    /// Height in pixels.
    pub h: u32,
}

/// What a reader got out of one image.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// The image's text in reading order.
    pub text: String,
    /// Words with boxes (in the image's pixels) when the reader provides them; they let tiles
    /// be joined exactly ([`crate::tiling::merge_tile_words`]).
    pub words: Option<Vec<Word>>,
    /// Tables as structured data (one JSON value per table, e.g. `{"header":[..],"rows":[[..]]}`).
    pub tables: Vec<serde_json::Value>,
    /// Descriptions of figures and charts.
    pub figures: Vec<String>,
    /// Seconds spent in the model (or OCR engine).
    pub inference_seconds: f64,
    /// What produced it, when the reader says (a reader that fell back to another says so
    /// here); the pipeline fills in [`VisionReader::read_by`](crate::vision::VisionReader::read_by)
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_by: Option<ReadBy>,
    /// Degrees (0, 90, 180, 270) the image was turned clockwise before it was read, when the
    /// reader found it sideways or upside down; word boxes are in the turned image's pixels.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rotation: u16,
    /// The page laid out (lines with their fonts' sizes and styles, ruling lines), when the
    /// text layer read it: what [`structure`](crate::structure) makes headings, lists, code and
    /// tables of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<PageLayout>,
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

/// What produced a page's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadBy {
    /// The PDF's own text layer (no OCR).
    TextLayer,
    /// Tesseract OCR.
    Tesseract,
    /// A vision-language model.
    VisionModel,
}

impl ReadBy {
    /// The name stored and shown: `text_layer`, `tesseract` or `vision_model`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadBy::TextLayer => "text_layer",
            ReadBy::Tesseract => "tesseract",
            ReadBy::VisionModel => "vision_model",
        }
    }

    /// The value of [`ReadBy::as_str`], or `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        [ReadBy::TextLayer, ReadBy::Tesseract, ReadBy::VisionModel]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// Why an image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VisionError {
    /// The `tesseract` program is not installed (Debian: `apt-get install tesseract-ocr
    /// tesseract-ocr-eng`).
    #[error("tesseract not found ({0}); install tesseract-ocr and tesseract-ocr-eng")]
    TesseractMissing(String),
    /// Tesseract ran longer than its timeout and was killed.
    #[error("tesseract timed out after {0:?}")]
    TesseractTimeout(std::time::Duration),
    /// Tesseract ran and failed.
    #[error("tesseract failed with {status}: {stderr}")]
    TesseractFailed {
        /// Exit status.
        status: String,
        /// Its standard error.
        stderr: String,
    },
    /// Tesseract passed one of its ceilings: it answered more than the output budget, or was
    /// stopped by its CPU-time limit (`what` says which). Trying the same image again would
    /// pass it again.
    #[error("tesseract passed its {what} limit")]
    TesseractLimit {
        /// Which limit: `output`, `cpu`.
        what: &'static str,
    },
    /// The model server failed; `retryable` tells whether trying again later may succeed.
    #[error("vision model request failed: {message}")]
    Model {
        /// Description.
        message: String,
        /// Whether a retry may succeed.
        retryable: bool,
    },
    /// The model server is down: the connection was refused or cut, or it answered 5xx. A
    /// [`FallbackReader`](crate::fallback::FallbackReader) reads the image with its fallback.
    #[error("vision model unavailable: {0}")]
    Unavailable(String),
    /// The image could not be decoded or encoded (to turn it upright).
    #[error("image: {0}")]
    Image(String),
    /// I/O error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A blocking task was cancelled.
    #[error("reader task failed: {0}")]
    Task(String),
}

impl VisionError {
    /// Whether trying the same image again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            VisionError::Model { retryable, .. } => *retryable,
            VisionError::Unavailable(_) => true,
            VisionError::Io(_) | VisionError::Task(_) => true,
            VisionError::TesseractTimeout(_) => true,
            VisionError::TesseractMissing(_)
            | VisionError::TesseractFailed { .. }
            | VisionError::TesseractLimit { .. }
            | VisionError::Image(_) => false,
        }
    }
}
