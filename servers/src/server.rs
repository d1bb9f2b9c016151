//! What every kind of managed server offers: start, stop, state, checks. The
//! [`Supervisor`](crate::Supervisor) and the [`ServerBackend`](crate::ServerBackend) are written
//! against it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::error::ServerError;
use crate::probe::Probe;
use crate::sleep::SleepApi;

/// How a server process or container ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, when it exited by itself.
    pub code: Option<i64>,
    /// The signal that killed it (processes only; a container's code is 128 + signal).
    pub signal: Option<i32>,
    /// The kernel's OOM killer ended it (containers only).
    pub oom_killed: bool,
    /// More words: the engine's error, the log's last lines.
    pub detail: String,
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (_, Some(s)) => write!(f, "killed by signal {s}")?,
            (Some(c), None) => write!(f, "exited with code {c}")?,
            (None, None) => f.write_str("exited")?,
        }
        if self.oom_killed {
            f.write_str(" (OOM killed)")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Whether a server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Never started, or stopped.
    NotStarted,
    /// The process or container runs (it may still be unhealthy).
    Running,
    /// It ended without being asked to.
    Exited(ExitInfo),
    /// Cannot tell now (the Docker engine did not answer): the probe decides.
    Unknown(String),
}

impl RunState {
    /// The error a check reports for a server that does not run.
    pub fn not_running_error(&self, name: &str) -> Option<ServerError> {
        match self {
            RunState::Running | RunState::Unknown(_) => None,
            RunState::NotStarted => Some(ServerError::NotRunning(format!("{name}: not started"))),
            RunState::Exited(e) => Some(ServerError::NotRunning(format!("{name}: {e}"))),
        }
    }
}

/// A server this crate runs: a [`ProcessServer`](crate::ProcessServer) or a
/// [`DockerServer`](crate::DockerServer).
#[async_trait]
pub trait ManagedServer: Send + Sync + 'static {
    /// The name (logs, labels, status pages).
    fn name(&self) -> &str;
    /// The base URL, `http://127.0.0.1:PORT`.
    fn url(&self) -> String;
    /// The health probe.
    fn probe(&self) -> &Probe;
    /// How many times it was started (a restart increments it).
    fn generation(&self) -> u64;
    /// Starts it, stopping a previous instance first, and returns once `/health` answers.
    async fn start(&self) -> Result<(), ServerError>;
    /// Stops it (SIGTERM then SIGKILL; or stop and remove the container).
    async fn stop(&self) -> Result<(), ServerError>;
    /// Whether it runs.
    async fn state(&self) -> RunState;

    /// How it sleeps on request, where its command says it can (`None` by default).
    fn sleep_api(&self) -> Option<SleepApi> {
        None
    }

    /// Runs and passes the probe's [`check`](Probe::check) (`/health`, and the tiny inference
    /// when due).
    async fn check(&self) -> Result<(), ServerError> {
        if let Some(e) = self.state().await.not_running_error(self.name()) {
            return Err(e);
        }
        self.probe().check().await
    }
}

/// The lifecycle lock and the start counter both kinds share.
///
/// The lock is a `tokio::sync::Mutex` held across the awaits of a start or stop on purpose: it
/// serialises lifecycle operations (a start and a stop must not race on one port). Nothing else
/// is held while waiting on it, and health checks never take it. Restarts are decided in one
/// place, the [`Supervisor`](crate::Supervisor), so no two of them race for the same crash.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    pub(crate) lock: tokio::sync::Mutex<()>,
    /// Servers spawned (or containers started).
    generation: AtomicU64,
}

impl Lifecycle {
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(crate) fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
