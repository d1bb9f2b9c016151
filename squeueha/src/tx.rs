//! Queue operations inside a caller's transaction, on either backend.

use std::time::Duration;

use rusqlite::Connection;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Enqueued, Job, JobInfo, Lease, Nacked, NewJob, millis, now_ms};
use crate::sql::{Row, Value};
use crate::sqlite::{IdBlock, ops};
use crate::storage::AckReport;

/// What a backend's transaction offers [`QueueTx`]: the queue's operations and the caller's SQL.
pub(crate) trait TxOps {
    fn backend(&self) -> &'static str;
    fn sqlite_connection(&self) -> Option<&Connection>;
    fn enqueue_batch(&mut self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>>;
    fn poll_batch(&mut self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>>;
    fn ack_batch(&mut self, leases: &[Lease]) -> Result<AckReport>;
    fn nack(&mut self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked>;
    fn release(&mut self, lease: Lease, delay: Duration) -> Result<()>;
    fn check_lease(&mut self, lease: Lease) -> Result<()>;
    fn bury(&mut self, lease: Lease, reason: &str) -> Result<()>;
    fn cancel(&mut self, job_id: i64) -> Result<bool>;
    fn cancel_in(&mut self, queue: &str, job_id: i64) -> Result<bool>;
    fn get(&mut self, id: i64) -> Result<Option<JobInfo>>;
    fn check_fencing(&mut self, name: &str, fencing_token: i64) -> Result<bool>;
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64>;
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>>;
    fn execute_batch(&mut self, sql: &str) -> Result<()>;
}

/// Queue operations that commit or roll back together with the caller's own SQL, obtained from
/// [`Queue::transaction`](crate::Queue::transaction), on SQLite (one `BEGIN IMMEDIATE`
/// transaction) and on PostgreSQL alike.
///
/// The caller's tables are reached through [`execute`](Self::execute) and
/// [`query`](Self::query), whose SQL (with `?1`-style placeholders) runs on both backends; see
/// [`Value`] for the types. [`connection`](Self::connection) is SQLite's escape hatch.
pub struct QueueTx<'a> {
    ops: &'a mut (dyn TxOps + 'a),
}

impl<'a> QueueTx<'a> {
    pub(crate) fn new(ops: &'a mut (dyn TxOps + 'a)) -> Self {
        QueueTx { ops }
    }

    /// `"sqlite"` or `"postgres"`: for the caller's DDL, which differs between them.
    pub fn backend(&self) -> &'static str {
        self.ops.backend()
    }

    /// The SQLite connection inside the transaction, for the caller's own tables; do not commit
    /// or roll back through it. Fails with [`Error::Unsupported`] on PostgreSQL: use
    /// [`execute`](Self::execute) and [`query`](Self::query), which work on both.
    pub fn connection(&self) -> Result<&Connection> {
        self.ops.sqlite_connection().ok_or(Error::Unsupported {
            backend: "postgres",
            what: "QueueTx::connection (a SQLite connection; use QueueTx::execute/query)",
        })
    }

    /// Runs one statement of the caller's, in the transaction; returns the rows changed.
    pub fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        self.ops.execute(sql, params)
    }

    /// Runs a query of the caller's, in the transaction, and returns every row.
    pub fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        self.ops.query(sql, params)
    }

    /// The first row of a query, if any.
    pub fn query_opt(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>> {
        Ok(self.ops.query(sql, params)?.into_iter().next())
    }

    /// Runs statements without parameters (DDL), in the transaction.
    pub fn execute_batch(&mut self, sql: &str) -> Result<()> {
        self.ops.execute_batch(sql)
    }

    /// Enqueues jobs as part of the transaction; waiting consumers are woken after the commit.
    pub fn enqueue_batch(&mut self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        self.ops.enqueue_batch(queue, jobs)
    }

    /// Enqueues one job as part of the transaction.
    pub fn enqueue(&mut self, queue: &str, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_batch(queue, std::slice::from_ref(&job))?;
        out.pop()
            .ok_or_else(|| Error::InvalidArgument("empty enqueue".into()))
    }

    /// Claims up to `n` jobs as part of the transaction.
    pub fn poll_batch(&mut self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        self.ops.poll_batch(queue, n, visibility)
    }

    /// Acks a job as part of the transaction; `StaleLease` if the lease is not current.
    pub fn ack(&mut self, lease: Lease) -> Result<()> {
        let report = self.ack_batch(std::slice::from_ref(&lease))?;
        if report.acked == 1 {
            Ok(())
        } else {
            Err(Error::StaleLease {
                job_id: lease.job_id,
            })
        }
    }

    /// Acks many jobs as part of the transaction; stale leases are reported, not fatal (see
    /// [`AckReport::all_acked`]).
    pub fn ack_batch(&mut self, leases: &[Lease]) -> Result<AckReport> {
        self.ops.ack_batch(leases)
    }

    /// Nacks a job as part of the transaction.
    pub fn nack(&mut self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        self.ops.nack(lease, error, delay)
    }

    /// Gives a claimed job back without counting the attempt, as part of the transaction.
    pub fn release(&mut self, lease: Lease, delay: Duration) -> Result<()> {
        self.ops.release(lease, delay)
    }

    /// Fails with `StaleLease` unless `lease` is the job's current lease (on PostgreSQL the job
    /// stays locked until the transaction ends).
    pub fn check_lease(&mut self, lease: Lease) -> Result<()> {
        self.ops.check_lease(lease)
    }

    /// Moves a claimed job to the dead-letter table as part of the transaction.
    pub fn bury(&mut self, lease: Lease, reason: &str) -> Result<()> {
        self.ops.bury(lease, reason)
    }

    /// Deletes a job that is not in flight (cancellation of pending work); returns whether it existed.
    pub fn cancel(&mut self, job_id: i64) -> Result<bool> {
        self.ops.cancel(job_id)
    }

    /// Deletes a job of `queue` that is not in flight; returns whether it existed there. A job
    /// of another queue with the same id is left as it is: a caller that owns one queue of a
    /// shared database cancels only its own work, in one statement.
    pub fn cancel_in(&mut self, queue: &str, job_id: i64) -> Result<bool> {
        self.ops.cancel_in(queue, job_id)
    }

    /// Looks a job up inside the transaction.
    pub fn get(&mut self, id: i64) -> Result<Option<JobInfo>> {
        self.ops.get(id)
    }

    /// True when `fencing_token` is the current, unexpired token of election `name`: a leader checks
    /// this inside the transaction that performs its side effect (on PostgreSQL the leadership
    /// stays locked until the transaction commits, so no successor takes over in between).
    pub fn check_fencing(&mut self, name: &str, fencing_token: i64) -> Result<bool> {
        self.ops.check_fencing(name, fencing_token)
    }
}

/// The SQLite backend's transaction: the writer's connection inside `BEGIN IMMEDIATE`.
pub(crate) struct SqliteTx<'a> {
    conn: &'a Connection,
    ids: &'a mut IdBlock,
    cfg: &'a Config,
    token: i64,
    touched: Vec<String>,
}

impl<'a> SqliteTx<'a> {
    pub(crate) fn new(
        conn: &'a Connection,
        ids: &'a mut IdBlock,
        cfg: &'a Config,
        token: i64,
    ) -> Self {
        SqliteTx {
            conn,
            ids,
            cfg,
            token,
            touched: Vec::new(),
        }
    }

    pub(crate) fn into_touched(self) -> Vec<String> {
        self.touched
    }
}

impl TxOps for SqliteTx<'_> {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn sqlite_connection(&self) -> Option<&Connection> {
        Some(self.conn)
    }

    fn enqueue_batch(&mut self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = ops::enqueue(self.conn, self.ids, queue, jobs, self.cfg, now_ms())?;
        if !self.touched.iter().any(|q| q == queue) {
            self.touched.push(queue.to_owned());
        }
        Ok(out)
    }

    fn poll_batch(&mut self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>> {
        ops::claim(
            self.conn,
            queue,
            n,
            millis(visibility),
            self.token,
            now_ms(),
        )
    }

    fn ack_batch(&mut self, leases: &[Lease]) -> Result<AckReport> {
        ops::ack_many(self.conn, leases, self.cfg, now_ms())
    }

    fn nack(&mut self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        ops::nack(
            self.conn,
            lease,
            error,
            delay.map(millis),
            self.cfg,
            now_ms(),
        )
    }

    fn release(&mut self, lease: Lease, delay: Duration) -> Result<()> {
        ops::release(self.conn, lease, millis(delay), now_ms())
    }

    fn check_lease(&mut self, lease: Lease) -> Result<()> {
        ops::check_lease(self.conn, lease)
    }

    fn bury(&mut self, lease: Lease, reason: &str) -> Result<()> {
        ops::check_lease(self.conn, lease)?;
        ops::bury(self.conn, lease.job_id, reason, now_ms())
    }

    fn cancel(&mut self, job_id: i64) -> Result<bool> {
        ops::cancel(self.conn, job_id)
    }

    fn cancel_in(&mut self, queue: &str, job_id: i64) -> Result<bool> {
        ops::cancel_in(self.conn, queue, job_id)
    }

    fn get(&mut self, id: i64) -> Result<Option<JobInfo>> {
        ops::get(self.conn, id)
    }

    fn check_fencing(&mut self, name: &str, fencing_token: i64) -> Result<bool> {
        ops::check_fencing(self.conn, name, fencing_token, now_ms())
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        crate::sql::sqlite_execute(self.conn, sql, params)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        crate::sql::sqlite_query(self.conn, sql, params)
    }

    fn execute_batch(&mut self, sql: &str) -> Result<()> {
        Ok(self.conn.execute_batch(sql)?)
    }
}
