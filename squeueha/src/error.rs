//! Typed errors returned by every squeueha operation.

use std::path::PathBuf;

/// Everything that can go wrong in squeueha. Each variant names one cause a caller can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database file exists but is not a SQLite database (or its header is damaged).
    #[error("{path}: not a SQLite database (or a corrupt one)")]
    NotADatabase {
        /// The file that was opened.
        path: PathBuf,
    },
    /// SQLite reported corruption inside the database.
    #[error("database is corrupt: {0}")]
    Corrupt(String),
    /// The database or its directory cannot be written.
    #[error("database is read-only: {0}")]
    ReadOnly(String),
    /// The file system is full (SQLITE_FULL). The failed transaction was rolled back; nothing else changed.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// The database file could not be opened or created.
    #[error("cannot open {path}: {reason}")]
    CannotOpen {
        /// The file that was opened.
        path: PathBuf,
        /// What SQLite or the OS said.
        reason: String,
    },
    /// `PRAGMA journal_mode=WAL` did not return `wal` (for example on a file system without shared memory).
    #[error("WAL journal mode unavailable: the database reports journal_mode={mode}")]
    WalUnavailable {
        /// The journal mode SQLite reported instead.
        mode: String,
    },
    /// The database was written by a newer release whose schema (of `namespace`: `squeueha` for
    /// the queue's own tables, or a crate registered with [`Migrations`](crate::Migrations)) this
    /// build does not know. Nothing was changed.
    #[error("schema {namespace} version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// The schema's namespace.
        namespace: String,
        /// Version found in the file.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
    /// The database stayed locked by other connections through every retry.
    #[error("database busy after {attempts} attempts")]
    Busy {
        /// How many attempts were made.
        attempts: u32,
    },
    /// A payload exceeded [`Config::max_payload_bytes`](crate::Config::max_payload_bytes).
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// Size of the refused payload.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The lease token does not match the job's current lease: the lease expired and the job was
    /// reclaimed (or already acked). The caller no longer owns the job.
    #[error("stale lease for job {job_id}: the job is no longer held by this lease")]
    StaleLease {
        /// The job the caller tried to act on.
        job_id: i64,
    },
    /// No job, dead letter or leadership with this identifier exists.
    #[error("not found: {0}")]
    NotFound(String),
    /// An argument was out of range (empty queue name, zero batch size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A payload could not be encoded or decoded as JSON.
    #[error("JSON payload: {0}")]
    Json(#[from] serde_json::Error),
    /// The connection pool could not hand out a connection.
    #[error("connection pool: {0}")]
    Pool(String),
    /// Any other SQLite error.
    #[error("sqlite: {0}")]
    Sqlite(rusqlite::Error),
    /// SQLite rolled the transaction back on its own (after an error the caller's code swallowed);
    /// nothing of it was committed.
    #[error("the transaction was rolled back by SQLite after an error; nothing was committed")]
    TransactionAborted,
    /// A blocking task could not be joined (async API only).
    #[error("background task failed: {0}")]
    Task(String),
    /// The operation exists only on another backend (for example [`Queue::transaction`](crate::Queue::transaction)
    /// hands out a SQLite connection, so a PostgreSQL queue offers
    /// `Queue::pg_transaction` instead).
    #[error("not supported by the {backend} backend: {what}")]
    Unsupported {
        /// The backend of the queue.
        backend: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// Any other PostgreSQL error (feature `postgres`).
    #[cfg(feature = "postgres")]
    #[error("postgres: {}", describe(.0))]
    Postgres(#[source] ::postgres::Error),
}

/// Shorthand for `Result<T, squeueha::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True for lock contention that a retry may resolve.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Busy { .. } => true,
            Error::Sqlite(e) => is_busy_sqlite(e),
            #[cfg(feature = "postgres")]
            Error::Postgres(e) => is_retryable(e),
            _ => false,
        }
    }
}

pub(crate) fn is_busy_sqlite(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The error and its causes, on one line.
#[cfg(feature = "postgres")]
pub(crate) fn describe(e: &::postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// True for failures a retry of the whole transaction may resolve (deadlock, serialization).
#[cfg(feature = "postgres")]
pub(crate) fn is_retryable(e: &::postgres::Error) -> bool {
    use ::postgres::error::SqlState;
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    })
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        let text = e.to_string();
        match e.sqlite_error_code() {
            Some(C::DiskFull) => Error::DiskFull(text),
            Some(C::ReadOnly) => Error::ReadOnly(text),
            Some(C::DatabaseCorrupt) => Error::Corrupt(text),
            Some(C::NotADatabase) => Error::NotADatabase {
                path: PathBuf::new(),
            },
            Some(C::CannotOpen) => Error::CannotOpen {
                path: PathBuf::new(),
                reason: text,
            },
            _ => Error::Sqlite(e),
        }
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Pool(e.to_string())
    }
}

#[cfg(feature = "postgres")]
impl From<::postgres::Error> for Error {
    fn from(e: ::postgres::Error) -> Self {
        use ::postgres::error::SqlState;
        match e.code() {
            Some(c) if *c == SqlState::DISK_FULL => Error::DiskFull(describe(&e)),
            Some(c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => Error::ReadOnly(describe(&e)),
            _ => Error::Postgres(e),
        }
    }
}
