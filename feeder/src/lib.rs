//! A batch feeder for OpenAI-compatible inference servers (vLLM, llama-server), on a
//! [`squeueha`] queue.
//!
//! Per model type (a [`Lane`]: a queue, a server, a result sink) the [`Feeder`]:
//!
//! - claims a batch of jobs (8–16, the server's `--max-num-seqs`) in one transaction;
//! - sends the batch's requests **concurrently** through [`horos_vllm_client`], so the server's
//!   continuous batching sees a full batch;
//! - stores each answer and acks its job **in one transaction** ([`TableSink`]), or records it
//!   through fan-in when the jobs are fragments ([`FanInSink`]);
//! - **releases** the batch (attempts not counted) when its server is down — every connection was
//!   refused, nothing was sent;
//! - **nacks** jobs the server refused as bad requests (400/413/422): retried while attempts remain,
//!   then dead-lettered — the request's own fault;
//! - when a batch takes its server down (connections cut, then the health check fails), asks the
//!   server's owner to bring it back through [`ServerControl::recover`] and **bisects** the unfinished jobs to isolate the poison
//!   pill(s): at most ⌈log2 n⌉ + 1 reruns per poison job; the poison job is buried with its reason,
//!   the innocent jobs are completed or released without losing an attempt;
//! - skips a lane whose [`LaneGate`] is closed (its GPU serves another mode now), so an
//!   allocator's executor can drain a lane and swap servers without a batch in between;
//! - pauses after each batch as the seam's [`ThermalPolicy`](horos_server_control::ThermalPolicy)
//!   says.
//!
//! A metrics or status page reads the feeder's totals from [`FeederCounters`], which
//! [`metrics::publish`] refreshes once a second.
//!
//! See the README for an example and the measured figures.

mod config;
mod control;
mod error;
mod feeder;
mod gate;
pub mod health;
pub mod housekeeping;
mod lane;
pub mod metrics;
mod report;
mod sink;

pub use config::{FeederConfig, FeederFile, InvalidFeederConfig, Pacing};
pub use control::HealthOnly;
pub use error::{Error, Result};
pub use feeder::Feeder;
pub use gate::LaneGate;
pub use horos_server_control::{Backoff, ControlError, ServerControl};
pub use lane::{Lane, RequestBuilder, TemperatureSource, json_chat_request};
pub use metrics::FeederCounters;
pub use report::{BatchReport, FeederStats, LaneTotals, Poison};
pub use sink::{Completed, FanInSink, RESULTS_TABLE, ResultSink, TableSink};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
