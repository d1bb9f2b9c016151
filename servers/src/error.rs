//! The crate's error type.

use std::time::Duration;

/// Why a server could not be started, stopped or found healthy.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration cannot work (empty command, bad URL, ...).
    #[error("configuration: {0}")]
    Config(String),
    /// The server process could not be spawned.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// An I/O error (log file, pidfile, signals).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The Docker engine refused or failed a call.
    #[error("docker: {0}")]
    Docker(String),
    /// The port is taken by something this crate did not start.
    #[error("port {0} is busy (something else listens on it)")]
    PortBusy(u16),
    /// The server is not running: never started, stopped, or exited (the detail says how).
    #[error("{0}")]
    NotRunning(String),
    /// `/health` failed.
    #[error("unhealthy: {0}")]
    Unhealthy(String),
    /// `/health` answers but the tiny inference failed or timed out: a hung engine.
    #[error("inference probe failed: {0}")]
    Hung(String),
    /// The server cannot do what was asked (sleep, for a server not started to sleep).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A sleep or a wake failed (refused, timed out, or the server says otherwise after it).
    #[error("sleep or wake: {0}")]
    Sleep(String),
    /// The server did not answer `/health` within the start time-out.
    #[error("not healthy {waited:?} after start: {last}")]
    StartTimeout {
        /// How long it was given.
        waited: Duration,
        /// The last health error.
        last: String,
    },
}

impl From<bollard::errors::Error> for ServerError {
    fn from(e: bollard::errors::Error) -> Self {
        ServerError::Docker(e.to_string())
    }
}

impl ServerError {
    /// Whether the error says the server process or container is gone (as opposed to
    /// running but unhealthy): a supervisor restarts at once instead of waiting for more failures.
    pub fn is_not_running(&self) -> bool {
        matches!(self, ServerError::NotRunning(_))
    }
}

impl From<ServerError> for horos_server_control::ControlError {
    /// The seam's error, by what a caller can do about it.
    fn from(e: ServerError) -> Self {
        use horos_server_control::ControlError as C;
        let text = e.to_string();
        match e {
            ServerError::Config(m) => C::Config(m),
            ServerError::NotRunning(m) => C::NotRunning(m),
            ServerError::Unhealthy(_) | ServerError::Hung(_) => C::Unhealthy(text),
            ServerError::Spawn { .. }
            | ServerError::PortBusy(_)
            | ServerError::StartTimeout { .. } => C::StartFailed(text),
            ServerError::Unsupported(m) => C::Unsupported(m),
            ServerError::Io(_) | ServerError::Docker(_) | ServerError::Sleep(_) => C::Other(text),
        }
    }
}
