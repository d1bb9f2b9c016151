//! The seams between the HOROS crates that run inference servers and the crates that use them:
//! traits and their typed errors, nothing else (plus the one [`Backoff`] every owner of a
//! restart loop uses, and the [`settings`] helpers every settings type uses).
//!
//! - [`ServerControl`]: what a batch feeder needs from a lane's server — is it healthy, and
//!   "it went down: bring it back and tell me when it answers".
//! - [`ModeServer`]: what a mode executor needs when a GPU changes hands — stop this server,
//!   start that one; or, where the server can sleep, put it to sleep at a [`SleepLevel`] and
//!   wake it.
//! - [`Gate`]: what a mode executor needs from a feeder's lane — no new batch, wait for the
//!   batch in progress, open again.
//! - [`Backend`] and [`BackendFactory`]: what a model pool needs to serve one model on given
//!   GPUs and a port.
//!
//! - [`UpstreamPool`]: what an OpenAI-compatible gateway needs from whatever serves its models
//!   (a model pool, fixed servers, a remote API, a feeder's lanes): is a model ready, a lease on
//!   it (loading it first), its slots for a status page. Its own [`SlotState`] and [`Share`]: no
//!   type of another HOROS crate appears in a seam.
//! - [`StatusSection`], [`Searcher`], [`AdminExtension`], [`GpuGauges`]: what a gateway's status
//!   page, `/v1/search`, admin API and metrics take from the crates that own those domains
//!   (ingest, the VRAM ledger, the GPU monitors). A search reads only the [`Collections`] of
//!   documents its caller may read (each document belongs to one [`Collection`]).
//! - [`LogBook`]: the servers' logs by name, for an admin API's `/api/v1/logs` and a status
//!   page (a name is looked up, never taken as a path).
//! - [`Reservation`]: what a server holds while it runs (its GPU memory in a ledger), taken
//!   before its start and given back after its stop.
//! - [`Demand`] and [`KeepWarm`]: work a mode executor weighs that waits outside its queues.
//! - [`ThermalPolicy`]: how long a GPU rests after a batch, shared by the feeder and gpu-alloc's
//!   simulator.
//!
//! [`settings`]: the helpers the crates' settings types share to read their TOML sections.
//! [`routes`]: the route table every HTTP router of the crates matches with (named path
//! parameters, 404 and 405 from one table).
//!
//! Every fallible method answers a [`ControlError`], whose variants say what a caller can do
//! about it ([`ControlError::is_retryable`]).
//!
//! `Arc<T>` and `Box<T>` implement each trait their `T` implements, so `Arc<dyn ServerControl>`
//! can be passed where an `impl ServerControl` is expected.

mod admin;
mod backend;
mod backoff;
mod collections;
mod control;
mod demand;
mod error;
mod gauges;
mod health;
mod logs;
mod reservation;
pub mod routes;
mod search;
pub mod settings;
mod status;
mod thermal;
mod upstream;

pub use admin::{AdminAnswer, AdminExtension, error_answer};
pub use backend::{Backend, BackendFactory};
pub use backoff::Backoff;
pub use collections::{Collection, Collections, InvalidCollection};
pub use control::{Gate, ModeServer, ServerControl, SleepLevel};
pub use demand::{Demand, KeepWarm};
pub use error::{BackendError, ControlError};
pub use gauges::{GpuGauge, GpuGauges, HistoryPoint};
pub use health::{HealthCheck, PartReport, Unhealthy, check_parts};
pub use logs::{LogBook, LogChunk, LogEntry, LogError, LogKind, LogWindow};
pub use reservation::Reservation;
pub use search::{Passage, PassageQuery, SearchError, Searcher};
pub use status::{DetailError, DetailFuture, StatusSection, safe_href};
pub use thermal::ThermalPolicy;
pub use upstream::{
    Readiness, Share, SlotState, SlotView, UpstreamError, UpstreamLease, UpstreamPool,
};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
