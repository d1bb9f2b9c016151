//! Typed feeder errors.

/// What can go wrong in the feeder itself (an inference failure of one job is not an error of the
/// feeder: it is handled — released, retried, dead-lettered — and reported in a [`crate::BatchReport`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue failed (the database is unreadable, full, locked through every retry...).
    #[error("queue: {0}")]
    Queue(#[from] squeueha::Error),
    /// Fan-in failed to record a fragment.
    #[error("fan-in: {0}")]
    FanIn(#[from] fanin::Error),
    /// The results table could not be written.
    #[error("results table: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The inference server could not be brought back.
    #[error("cannot recover the server of lane `{lane}`: {source}")]
    Restart {
        /// The lane (queue) whose server it is.
        lane: String,
        /// Why, as its owner said.
        source: horos_server_control::ControlError,
    },
    /// A blocking task ended without an answer (it panicked or was cancelled).
    #[error("blocking task: {0}")]
    Task(String),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
