//! # horos-pdf
//!
//! Reading PDF pages, for an ingest pipeline or on its own:
//!
//! - [`render`]: pages rendered to PNG at a chosen resolution (hayro, pure Rust), a broken page
//!   failing alone with a typed [`render::RenderError`];
//! - [`text_layer`]: a page's own text read from its content stream with each word's box, so a
//!   born-digital page needs no OCR;
//! - [`tiling`]: a large page cut into overlapping tiles for a reader with a small input, and the
//!   tiles' words joined back without duplicates;
//! - [`orientation`]: a page turned by 90, 180 or 270 degrees detected and set upright;
//! - [`vision`]: the reader seam ([`vision::VisionReader`]) with a CPU implementation running
//!   Tesseract, and the prompt and answer parsing a vision model's reader uses;
//! - [`fallback`]: a reader that falls back to another while its primary is down;
//! - [`reading`]: the vocabulary they share ([`reading::Reading`], [`reading::Word`],
//!   [`reading::ReadBy`], [`reading::VisionError`]), a leaf module that imports none of them.
//!
//! No queue, database or HTTP server here: `ingest-pipeline` runs these as the stages of its
//! queues.
//!
//! Architecture Invariant: the modules form no cycle; `reading` imports nothing from the
//! others, and `render` is the only one that reads PDF syntax besides `text_layer`.

pub mod fallback;
pub mod orientation;
pub mod reading;
pub mod render;
pub mod text_layer;
pub mod tiling;
pub mod vision;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
