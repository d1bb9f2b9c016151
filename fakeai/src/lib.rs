//! A scriptable fault-injection OpenAI-compatible server for tests.
//!
//! It serves `/v1/chat/completions` (streaming or not), `/v1/completions`, `/v1/embeddings`,
//! vLLM's `/pooling` (`token_embed`: scripted per-word multi-vectors, see [`IMAGE_WORDS_KEYWORD`]),
//! `/v1/rerank` (documents ranked by the share of the query's words they contain),
//! `/v1/models`, `/health` and `/metrics` (vLLM-style `vllm:num_requests_running` and
//! `vllm:num_requests_waiting` gauges, which count real requests holding or waiting for one of the
//! server's slots). By default it answers with the prompt (echo), at once. With
//! [`SleepScript::enabled`] it also serves vLLM's sleep API (`/sleep`, `/wake_up`,
//! `/is_sleeping`), with scripted latencies and faults.
//!
//! Faults ([`Fault`]) are scripted by configuration, changed at run time ([`FakeServer::set_fault`]),
//! or chosen per request with the `x-fakeai-fault` header or the `x_fakeai_fault` body field:
//! HTTP errors, a connection dropped mid-stream, a connection reset, malformed JSON, a hang, a crash.
//! A request whose body contains the configured crash marker crashes the server: in a separate process
//! ([`FakeProcess`], or the `horos-fakeai` binary) the process exits with [`CRASH_EXIT_CODE`], the way a
//! real inference server dies on a poison pill; in-process the server stops serving instead.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use horos_fakeai::{FakeConfig, FakeServer, Fault};
//! use std::time::Duration;
//!
//! let server = FakeServer::start(FakeConfig {
//!     slots: 4,
//!     latency: Duration::from_millis(5),
//!     fault: Fault::Status(503),
//!     fault_count: Some(1), // the first request gets a 503, the others an answer
//!     ..FakeConfig::default()
//! })
//! .await?;
//! println!("serving on {}", server.url());
//! # Ok(()) }
//! ```

mod answer;
mod config;
mod http;
mod pooling;
mod process;
mod rerank;
mod server;
mod sleep;
mod vectors;

pub use config::{ConfigError, CrashAction, FakeConfig, Fault, Reply, SleepScript, USAGE};
pub use pooling::{IMAGE_WORDS_KEYWORD, image_tokens};
pub use process::{
    CHILD_ENV, FakeProcess, PUBLISH_ENV, URL_LINE_PREFIX, run_child_if_requested, serve_blocking,
};
pub use server::{CRASH_EXIT_CODE, FakeServer, RecordedRequest, Stats};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
