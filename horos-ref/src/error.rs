//! The binary's one error type: every command returns it, `main` prints it once.

use crate::config;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration file cannot be read or used.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The queue database.
    #[error("queue: {0}")]
    Queue(#[from] squeueha::Error),
    /// The feeder refused its settings.
    #[error("feeder: {0}")]
    Feeder(#[from] horos_feeder::Error),
    /// An HTTP client could not be built.
    #[error("client: {0}")]
    Client(#[from] horos_vllm_client::Error),
    /// An operation of the operations layer (its message says what to do).
    #[error(transparent)]
    Ops(#[from] horos_ops::OpsError),
    /// A file or a socket.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Anything else, said in words (a missing section, a server that did not start...).
    #[error("{0}")]
    Usage(String),
}
