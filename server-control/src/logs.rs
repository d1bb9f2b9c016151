//! The seam between an admin API (and its status page) and whatever keeps the servers' logs:
//! [`LogBook`]. A book knows its logs by name; a name from a request is only ever looked up
//! among them, never taken as a path.

use serde::{Deserialize, Serialize};

/// Whose output a log holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogKind {
    /// A lane's server (one log per instance).
    Lane,
    /// A model loaded on demand by a pool.
    Model,
    /// The serving process itself.
    Run,
}

impl LogKind {
    /// The name in JSON and tables: `lane`, `model`, `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogKind::Lane => "lane",
            LogKind::Model => "model",
            LogKind::Run => "run",
        }
    }
}

/// One log of a book.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Its name (a lane server's instance, a model's id, `run`).
    pub name: String,
    /// Whose output it holds.
    pub kind: LogKind,
    /// Its size in bytes; `None` while nothing was written yet.
    pub bytes: Option<u64>,
}

/// The part of a log to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogWindow {
    /// Its last `lines` whole lines.
    Tail {
        /// How many.
        lines: usize,
    },
    /// The whole lines written after byte `offset` (a [`LogChunk::next`] read earlier), as
    /// many as one read returns; an `offset` beyond the end (the log was cut) reads from the
    /// start.
    After {
        /// Where the previous read ended.
        offset: u64,
    },
}

/// A part of a log: whole lines, secrets the book knows of replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// The log's name.
    pub name: String,
    /// The lines, each ending with `\n` (empty: nothing new).
    pub text: String,
    /// Where to read on from ([`LogWindow::After`]): the byte after the last whole line read.
    pub next: u64,
}

/// Why a log cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The book has no log of that name (answered 404).
    #[error("no log named `{0}` (list them with GET /api/v1/logs)")]
    Unknown(String),
    /// The log exists but cannot be read.
    #[error("the log `{name}` cannot be read: {source}")]
    Read {
        /// The log's name.
        name: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The logs of a system's servers, by name.
pub trait LogBook: Send + Sync {
    /// Every log it holds, in a stable order.
    fn logs(&self) -> Vec<LogEntry>;

    /// A part of the log `name`. It reads files: call it on a blocking thread.
    fn read(&self, name: &str, window: LogWindow) -> Result<LogChunk, LogError>;
}

impl<T: LogBook + ?Sized> LogBook for std::sync::Arc<T> {
    fn logs(&self) -> Vec<LogEntry> {
        (**self).logs()
    }

    fn read(&self, name: &str, window: LogWindow) -> Result<LogChunk, LogError> {
        (**self).read(name, window)
    }
}
