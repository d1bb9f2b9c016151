//! ingest-pipeline's integration tests, in one binary: one link instead of 11
//! (each module was a test binary of its own). `resume_kill` (it runs itself again as a child)
//! and `backends` (squeueha's conformance harness, which must be its crate's `common`) stay
//! binaries of their own.

#[path = "../common/mod.rs"]
mod common;

mod ceilings;
mod collections;
mod documents;
mod e2e_llama;
mod e2e_vllm_visual;
mod fallback;
mod openai_fake;
mod passages;
mod pipeline_cpu;
mod render_real;
mod rotation;
mod text_layer;
mod upgrade;
mod visual_pooling;
