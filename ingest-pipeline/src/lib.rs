//! # ingest-pipeline
//!
//! Documents in, searchable knowledge out: PDF pages rendered to images ([`render`]), large
//! pages cut into overlapping tiles ([`tiling`]), read by a [`vision::VisionReader`] (an
//! OpenAI-compatible vision model, or Tesseract on the CPU), stored in SQLite with full-text,
//! vector and late-interaction (MaxSim) search ([`store`], [`maxsim`]), text cut into
//! overlapping token windows for embedding ([`chunk`]).

pub mod chunk;
pub mod embed;
pub mod fallback;
pub mod hybrid;
pub mod maxsim;
pub mod maxsim_int8;
pub mod openai;
pub mod orientation;
pub mod pipeline;
pub mod pooling;
pub mod quant;
mod reading;
pub mod render;
pub mod store;
pub mod text_layer;
pub mod tiling;
pub mod vision;
pub mod visual_search;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
