//! Typed fan-in errors.

/// What can go wrong in fan-in. Bad input is refused before anything is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No parent with this id.
    #[error("unknown parent {0}")]
    UnknownParent(i64),
    /// The fragment index is not below the parent's fragment count.
    #[error("fragment index {index} out of range for parent {parent} with {total} fragments")]
    IndexOutOfRange {
        /// The parent.
        parent: i64,
        /// The index given.
        index: u32,
        /// The parent's fragment count.
        total: u32,
    },
    /// The job is not a fragment of any parent.
    #[error("job {0} is not a fan-in fragment")]
    NotAFragment(i64),
    /// A result path is absolute, contains `..`, or otherwise leaves the results directory.
    #[error("path {0:?} escapes the results directory")]
    PathEscapes(String),
    /// A file result was given but no results directory is configured.
    #[error("file results need FanInConfig::results_dir")]
    NoResultsDir,
    /// The lease given with a result belongs to another job than the slot's.
    #[error("lease of job {job_id} is not for fragment {index} of parent {parent}")]
    LeaseNotForSlot {
        /// The lease's job.
        job_id: i64,
        /// The parent.
        parent: i64,
        /// The index.
        index: u32,
    },
    /// The parent (or the slot a sub-parent was to fill) has already finished.
    #[error("parent {0} has already finished")]
    ParentClosed(i64),
    /// A parent must have at least one fragment.
    #[error("a parent needs at least one fragment")]
    NoFragments,
    /// The fragment slot is a sub-parent (or a job) and was used as the other kind.
    #[error("fragment {index} of parent {parent} is not a {expected} fragment")]
    WrongFragmentKind {
        /// The parent.
        parent: i64,
        /// The index.
        index: u32,
        /// What the call expected.
        expected: &'static str,
    },
    /// A fragment job was deduplicated into an existing job; fragments must be new jobs.
    #[error("fragment job was deduplicated into existing job {0}; fragments must be new jobs")]
    DuplicateFragmentJob(i64),
    /// Reading or writing a result file failed.
    #[error("result file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The queue failed.
    #[error(transparent)]
    Queue(#[from] squeueha::Error),
    /// A completion record could not be encoded.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Queue(squeueha::Error::from(e))
    }
}

/// Shorthand for `Result<T, fanin::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
