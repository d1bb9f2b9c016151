//! Where the store's SQL runs: a SQLite connection, a queue transaction (SQLite or PostgreSQL:
//! the store's rows change atomically with the queue's jobs) or a queue's read pool.

use squeueha::{Queue, QueueTx, Row, Value};

/// A database the store's functions read and write. One SQL text serves both backends
/// (`?1`-style placeholders, see [`squeueha::QueueTx::execute`]); where the dialects differ
/// (full-text search, ids), the store asks [`backend`](Db::backend).
pub trait Db {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;
    /// Runs a statement; returns the rows changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<u64>;
    /// Runs a query; returns its rows.
    fn query(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<Vec<Row>>;
}

impl Db for rusqlite::Connection {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<u64> {
        squeueha::sqlite_execute(self, sql, params)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<Vec<Row>> {
        squeueha::sqlite_query(self, sql, params)
    }
}

impl Db for QueueTx<'_> {
    fn backend(&self) -> &'static str {
        QueueTx::backend(self)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<u64> {
        QueueTx::execute(self, sql, params)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<Vec<Row>> {
        QueueTx::query(self, sql, params)
    }
}

/// Reads through a queue's pool ([`Queue::query`]: on SQLite its readers, which never wait for
/// the writer; on PostgreSQL a pooled connection). Each query sees the last commit before it.
/// Writes are refused: they go through a [`QueueTx`], atomically with the jobs.
/// Owns a handle on the queue (cheap to clone), so it can move to a blocking thread.
#[derive(Debug, Clone)]
pub struct Reads(pub Queue);

impl Db for Reads {
    fn backend(&self) -> &'static str {
        self.0.backend()
    }

    fn execute(&mut self, _sql: &str, _params: &[Value]) -> squeueha::Result<u64> {
        Err(squeueha::Error::InvalidArgument(
            "the store's reads cannot write: write in a queue transaction".into(),
        ))
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> squeueha::Result<Vec<Row>> {
        self.0.query(sql, params)
    }
}

/// Whether `db` is PostgreSQL (where the store's dialect differs).
pub(crate) fn is_postgres(db: &dyn Db) -> bool {
    db.backend() == "postgres"
}
