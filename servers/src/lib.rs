//! Persistent inference servers for HOROS: vLLM or llama-server run as local
//! processes ([`ProcessServer`]) or Docker containers ([`DockerServer`], through bollard),
//! health-checked with `/health` and a periodic one-token inference ([`Probe`]), restarted with
//! exponential back-off by a [`Supervisor`], the one owner of a running server's life.
//!
//! A [`SupervisorHandle`] is the feeder's [`horos_server_control::ServerControl`] (report a
//! crash, wait for health) and a mode executor's [`horos_server_control::ModeServer`] (stop,
//! start); [`ServerBackend`] is the model pool's [`horos_server_control::Backend`].
//!
//! [`logs::LogFiles`] serves the servers' log files by name as the seam's
//! [`horos_server_control::LogBook`] (an admin API's `/api/v1/logs`, a status page).
//!
//! See the README for an example and for what is and is not handled.

mod backend;
mod booked;
pub mod discover;
mod docker;
mod error;
pub mod kinds;
pub mod logs;
pub mod pidfile;
mod probe;
mod process;
mod server;
pub mod settings;
mod sleep;
mod supervisor;
mod template;

pub use backend::{
    BackendSettings, DockerBackendFactory, PoolBackendFactory, ProcessBackendFactory, ServerBackend,
};
pub use bollard;
pub use booked::BookedServer;
pub use docker::{
    DockerConfig, DockerServer, LABEL_MANAGED, LABEL_NAME, LABEL_OWNER, connect_docker,
    remove_managed,
};
pub use error::ServerError;
pub use horos_server_control::Backoff;
pub use kinds::{BackendKind, Health, KindArgs, Launch, ModelRole};
pub use probe::{InferenceKind, Probe, ProbeConfig};
pub use process::{ProcessConfig, ProcessServer};
pub use server::{ExitInfo, ManagedServer, RunState};
pub use sleep::{SleepApi, SleepKind};
pub use supervisor::{
    ServerState, Supervisor, SupervisorConfig, SupervisorEvent, SupervisorHandle, SupervisorStatus,
};
pub use template::Vars;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
