//! The one error type of the seams.

/// Why a server could not be started, stopped, recovered or found healthy. The variant says
/// what a caller can do: try again later ([`ControlError::is_retryable`]) or give up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The server does not run: never started, stopped, or it exited. Starting it may help.
    #[error("not running: {0}")]
    NotRunning(String),
    /// It runs but fails its health check or hangs. A restart may help.
    #[error("unhealthy: {0}")]
    Unhealthy(String),
    /// A start did not bring it up (it exited, timed out, its port was taken, the engine
    /// refused). Trying again later may help.
    #[error("start failed: {0}")]
    StartFailed(String),
    /// The configuration or the settings cannot work: trying again will not help.
    #[error("configuration: {0}")]
    Config(String),
    /// Whoever owns the server stopped it on purpose or shut down: nothing will bring it back.
    #[error("stopped: {0}")]
    Stopped(String),
    /// The server cannot do what was asked (a server that cannot sleep asked to sleep):
    /// trying again will not help; do something else (stop it instead).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Any other failure (an I/O error, an engine call), as text.
    #[error("{0}")]
    Other(String),
}

impl ControlError {
    /// Whether trying again later may succeed (everything but [`ControlError::Config`],
    /// [`ControlError::Stopped`] and [`ControlError::Unsupported`]).
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            ControlError::Config(_) | ControlError::Stopped(_) | ControlError::Unsupported(_)
        )
    }

    /// [`ControlError::Other`] from any error's message.
    pub fn other(e: impl std::fmt::Display) -> ControlError {
        ControlError::Other(e.to_string())
    }
}

/// The error of a [`Backend`](crate::Backend) or [`BackendFactory`](crate::BackendFactory):
/// the same type, under the name a model pool's users know.
pub type BackendError = ControlError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_and_stop_errors_are_final() {
        assert!(!ControlError::Config("no image".into()).is_retryable());
        assert!(!ControlError::Stopped("shut down".into()).is_retryable());
        assert!(ControlError::StartFailed("exited".into()).is_retryable());
        assert!(ControlError::other("disk full").is_retryable());
        assert_eq!(
            ControlError::NotRunning("exited with code 1".into()).to_string(),
            "not running: exited with code 1"
        );
    }
}
