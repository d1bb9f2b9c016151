//! # ingest-pipeline
//!
//! Documents in, searchable knowledge out: PDF pages rendered to images ([`render`]), large
//! pages cut into overlapping tiles ([`tiling`]), read by a [`vision::VisionReader`] (an
//! OpenAI-compatible vision model, or Tesseract on the CPU), stored in SQLite with full-text,
//! vector and late-interaction (MaxSim) search ([`store`], [`maxsim`]), text cut into
//! overlapping token windows for embedding ([`chunk`]).
//!
//! Where things live: the reading of PDF pages is horos-pdf's (`render`, `text_layer`, `tiling`,
//! `orientation`, `vision`, `fallback` are its modules, re-exported here under their old paths);
//! the in-memory retrieval over page vectors is horos-retrieval's (`maxsim`, `maxsim_int8`,
//! `quant`, `visual_index` likewise re-exported; [`hybrid::fuse`] and the store's text-vector
//! index build on its `fusion` and `ivf`). This crate keeps what needs the queue, the database or
//! HTTP: the stages, the store and its SQL search, the indexes' loading and syncing
//! ([`store::TextVectorIndex`], [`store::VisualIndexCache`]), the embedders' clients
//! ([`embed`], [`pooling`]).
//!
//! A deployment builds its pipeline from [`configured::PipelineSettings`], accepts documents
//! only from its [`inbox::Inbox`], shows the pipeline to a gateway through the seams of
//! `horos-server-control` ([`gateway`]: search, admin routes, status section), and lends its
//! waiting work to an allocator as demand ([`backlog::StageBacklog`]).

pub mod backlog;
pub mod chunk;
pub mod configured;
pub mod embed;
pub use horos_pdf::fallback;
pub mod gateway;
pub mod hybrid;
pub mod inbox;
pub use horos_retrieval::maxsim;
pub use horos_retrieval::maxsim_int8;
pub mod openai;
pub use horos_pdf::orientation;
pub mod pipeline;
pub mod pooling;
pub use horos_pdf::render;
pub use horos_retrieval::quant;
pub mod store;
pub use horos_pdf::text_layer;
pub use horos_pdf::tiling;
pub use horos_pdf::vision;
pub use horos_retrieval::visual_index;
pub mod visual_search;
pub use horos_pdf::worker;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
