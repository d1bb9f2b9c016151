//! # horos-pdf
//!
//! Reading PDF pages, for an ingest pipeline or on its own:
//!
//! - [`render`]: pages rendered to PNG at a chosen resolution (hayro, pure Rust), a broken
//!   document failing with a typed [`render::RenderError`], a page whose streams decode past the
//!   ceiling failing alone ([`render::PageFailure`]);
//! - [`ceiling`]: what a page's streams decode to, counted against a limit before hayro decodes
//!   them;
//! - [`text_layer`]: a page's own text read from its content stream with each word's box, so a
//!   born-digital page needs no OCR, and laid out ([`layout`]: lines, fonts' sizes and styles,
//!   ruling lines);
//! - [`structure`]: a document's layouts read as headings, paragraphs (de-hyphenated), lists,
//!   code, tables and footnotes, running headers and page numbers dropped, written as Markdown;
//! - [`tiling`]: a large page cut into overlapping tiles for a reader with a small input, and the
//!   tiles' words joined back without duplicates;
//! - [`orientation`]: a page turned by 90, 180 or 270 degrees detected and set upright;
//! - [`vision`]: the reader seam ([`vision::VisionReader`]) with a CPU implementation running
//!   Tesseract, and the prompt and answer parsing a vision model's reader uses;
//! - [`fallback`]: a reader that falls back to another while its primary is down;
//! - [`worker`]: the same reading in child processes under OS limits ([`limits`]), spoken to
//!   over a small versioned protocol, in a fixed pool;
//! - [`reading`]: the vocabulary they share ([`reading::Reading`], [`reading::Word`],
//!   [`reading::ReadBy`], [`reading::VisionError`]), a leaf module that imports none of them.
//!
//! No queue, database or HTTP server here: `ingest-pipeline` runs these as the stages of its
//! queues.
//!
//! Architecture Invariant: the modules form no cycle; `layout` imports nothing from the
//! others and `reading` only `layout`; `structure` reads layouts (and opens a PDF through
//! `render` for [`structure::read_pdf`]), and `render` is the only one that reads PDF syntax besides `text_layer` and
//! `ceiling` (which imports none of the others).

pub mod ceiling;
pub mod fallback;
pub mod layout;
pub mod limits;
pub mod orientation;
pub mod reading;
pub mod render;
pub mod structure;
pub mod text_layer;
pub mod tiling;
pub mod vision;
pub mod worker;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
