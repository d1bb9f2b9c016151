//! # horos-retrieval
//!
//! Retrieval over page vectors, in memory, for an ingest pipeline or on its own:
//!
//! - [`maxsim`]: late interaction (ColBERT, ColPali, ColQwen2): a page is many vectors, its score
//!   for a question `Σ_q max_d ⟨q, d⟩` ([`maxsim::maxsim`]); [`maxsim::MultiVectorIndex`] holds
//!   pages' vectors in one buffer and scans them on several threads;
//! - [`maxsim_int8`]: the same over int8 codes ([`maxsim_int8::Int8Index`]): a quarter of the
//!   memory, VNNI where the CPU has it, an exact rerank of the best pages;
//! - [`visual_index`]: a first stage that scales past a full scan ([`visual_index::CentroidIndex`]:
//!   a codebook of centroids, pages listed under the centroids their vectors fall in, candidates
//!   reranked by exact MaxSim from vectors the caller reads), and token pooling at index time;
//! - [`ivf`]: single vectors (a chunk's text embedding) by cosine, scanned exactly while few and
//!   through inverted lists (spherical k-means, about √n lists) from a size on
//!   ([`ivf::IvfLists`]);
//! - [`fusion`]: rankings fused by reciprocal rank (a hybrid search's full-text, vector and
//!   visual rankings);
//! - [`quant`]: the encodings the vectors are stored in (half floats, int8 with a scale a row);
//! - [`normalized`]: a vector scaled to unit length (what cosine over dot products needs).
//!
//! No queue, database or HTTP here: `ingest-pipeline` keeps the vectors in its store, reads them
//! into these indexes and serves the questions.
//!
//! Architecture Invariant: the modules form no cycle; `maxsim` (the vocabulary: `MultiVector`,
//! `Hit`, `IndexError`) and `quant` import none of the others, and the arithmetic shared by the
//! indexes (dot products, best `n`, k-means) lives in one private module.

pub mod fusion;
pub mod ivf;
pub mod maxsim;
pub mod maxsim_int8;
pub mod quant;
mod vector_kernel;
pub mod visual_index;

pub use vector_kernel::normalized;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
