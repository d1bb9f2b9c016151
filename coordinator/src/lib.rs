//! # horos-coordinator — an OpenAI-compatible GPU coordinator
//!
//! One HTTP endpoint (127.0.0.1:8210 by default) in front of a pool of inference servers:
//!
//! - `POST /v1/chat/completions` (streams passed through frame by frame), `POST /v1/completions`,
//!   `POST /v1/embeddings`, `POST /v1/images/generations`, `POST /v1/rerank`,
//!   `POST /v1/audio/speech` (audio bytes streamed back, usage in input characters),
//!   `GET /v1/models`;
//!   extension fields `x_client_id`, `x_priority`, `x_timeout_s`, `x_task`, `x_thinking`,
//!   `keep_alive` are read and every `x_*` field is stripped before forwarding;
//! - a model manifest ([`horos_manifest`]): chat templates rendered here for models whose
//!   server has none (the chat sent to the completion endpoint, the answer shaped back, streams
//!   included), a thinking mode, reasoning moved to `reasoning_content`;
//! - client profiles ([`ClientProfile`]: aliases, defaults, allowed models; changed at run time),
//!   cooldowns, and a registry of who calls how often (on `/metrics` and in `/api/v1/status`);
//! - keys, limits and profiles reloaded while serving ([`Tenancy`]: `POST /api/v1/reload`,
//!   [`Coordinator::reload`]), checked whole before anything changes;
//! - the servers' logs (`GET /api/v1/logs`, a [`LogBook`] the owner gives), their last lines
//!   on the status page;
//! - a priority queue of waiting requests ordered by (priority, warm-model bump, submit time)
//!   under global and per-model concurrency limits;
//! - routing through the [`UpstreamPool`] trait; gpu-alloc's `PoolUpstream` implements it on its
//!   model pool (get-or-load, priority-aware eviction), [`StaticUpstream`] on fixed servers,
//!   [`UpstreamSet`] puts several behind one;
//! - cold loads count against the call's time budget: when the learned load time of a cold
//!   model exceeds what is left, the answer is an immediate 503 with `Retry-After` and the
//!   estimated ready time, and the load goes on in the background — never a timeout mid-load;
//! - fallback and retry: a request that meets a refused connection, a 5xx or 429, or no first
//!   byte in time moves to the next rung of its task's ladder, or retries after a back-off
//!   (honouring `Retry-After`), within its budget; a started answer is never replayed;
//! - remote models ([`RemoteUpstream`]): any OpenAI-compatible API elsewhere, its key read from
//!   an environment variable (https with the `tls` feature);
//! - a task registry (task → ladder of models, `pin_primary`) and a cloud-fallback guard
//!   changed at run time through `GET`/`PUT /api/v1/config` (persisted in SQLite, optional
//!   Bearer key);
//! - async jobs (`POST /v1/jobs`, `GET /v1/jobs/{id}`) on a squeueha queue, drained by
//!   workers through the same routing, results kept in the same SQLite file;
//! - `GET /metrics` (Prometheus), `GET /status` (HTML), structured logs with `tracing`; the
//!   control plane reads only atomics and a snapshot, never a lock of the data plane.
//!
//! Priorities are ranks: **smaller is more important** (0 is the highest); see [`queue_priority`]
//! and the [workspace's convention](https://github.com/horos-rs/horos-rs/blob/main/docs/architecture.md#priorities).
//!
//! See the README for a runnable example.
//!
//! ## Layout
//!
//! A directory per concern, each depending only on those listed before it: `tenancy/` (keys,
//! limits, profiles, usage, reload), `admission/` (scheduler, priorities, GPU room, load
//! times), `upstream/` (static, remote and set upstreams, task ladders), `data/` (the data
//! plane: request, ladder, proxy, manifest, metrics and decisions), `jobs/` (async jobs, through
//! their `Dispatch` seam), `control/` (snapshot, status page, admin operations) and `server/`
//! (the HTTP front of both planes and its one admission step). `Core` (`data/core/`) holds one
//! typed part of each concern. What a library user needs is re-exported here; the rest is
//! private to the crate.

// A directory per concern; what a library user needs is re-exported below, the rest is the
// crate's own.
mod admission;
mod clock;
pub mod config;
mod control;
mod data;
pub mod error;
mod jobs;
mod prom;
mod schema;
mod secret;
mod server;
pub mod settings;
mod tenancy;
mod upstream;

pub use admission::priority::queue_priority;
pub use admission::room::RoomDemand;
pub use config::{CoordinatorConfig, DEFAULT_BIND, RemoteModel, TaskSpec};
pub use control::admin_ext::{AdminAnswer, AdminExtension};
pub use control::snapshot::{
    Decision, DecisionAction, DecisionLog, GpuGauge, GpuGauges, HistoryPoint, ModeBoard, ModeState,
    ModeView, Snapshot,
};
pub use control::status::{DetailError, DetailFuture, StatusSection};
pub use data::search::{SearchError, Searcher};
pub use error::{ApiError, CoordinatorError, InvalidConfig};
pub use horos_manifest::{CompletionApi, ModelManifest, ThinkingVia};
pub use horos_server_control::{LogBook, LogChunk, LogEntry, LogError, LogKind, LogWindow};
pub use jobs::JobPayload;
pub use jobs::api::{JobKind, JobStatus, QUEUE_PREFIX as JOB_QUEUE_PREFIX};
pub use secret::Secret;
pub use server::{Coordinator, CoordinatorBuilder, ExtraMetrics};
pub use tenancy::limits::{Caller, Cooldown, GateChanges, Limits, VirtualKey};
pub use tenancy::profiles::ClientProfile;
pub use tenancy::{
    Reading, ReloadError, ReloadHandle, ReloadReport, SourceError, Tenancy, TenancySource,
};
pub use upstream::remote::RemoteUpstream;
pub use upstream::{
    Readiness, Share, SlotState, SlotView, StaticUpstream, UpstreamError, UpstreamLease,
    UpstreamPool, UpstreamSet,
};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
