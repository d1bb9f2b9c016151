//! Queue operations inside a caller's transaction (SQLite backend).

use std::time::Duration;

use rusqlite::Connection;

use crate::config::Config;
use crate::error::Result;
use crate::job::{Enqueued, Job, JobInfo, Lease, Nacked, NewJob, millis, now_ms};
use crate::sqlite::{IdBlock, ops};
use crate::storage::AckReport;

/// Queue operations that commit or roll back together with the caller's own SQL, obtained from
/// [`Queue::transaction`](crate::Queue::transaction). Everything done through it, and through
/// [`connection`](Self::connection), is one atomic `BEGIN IMMEDIATE` transaction.
pub struct QueueTx<'a> {
    conn: &'a Connection,
    ids: &'a mut IdBlock,
    cfg: &'a Config,
    token: i64,
    touched: Vec<String>,
}

impl<'a> QueueTx<'a> {
    pub(crate) fn new(
        conn: &'a Connection,
        ids: &'a mut IdBlock,
        cfg: &'a Config,
        token: i64,
    ) -> Self {
        QueueTx {
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

    /// The SQLite connection inside the transaction, for the caller's own tables. This is the SQLite
    /// backend's escape hatch; do not commit or roll back through it.
    pub fn connection(&self) -> &Connection {
        self.conn
    }

    /// Enqueues jobs as part of the transaction; waiting consumers are woken after the commit.
    pub fn enqueue_batch(&mut self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = ops::enqueue(self.conn, self.ids, queue, jobs, self.cfg, now_ms())?;
        if !self.touched.iter().any(|q| q == queue) {
            self.touched.push(queue.to_owned());
        }
        Ok(out)
    }

    /// Enqueues one job as part of the transaction.
    pub fn enqueue(&mut self, queue: &str, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_batch(queue, std::slice::from_ref(&job))?;
        out.pop()
            .ok_or_else(|| crate::Error::InvalidArgument("empty enqueue".into()))
    }

    /// Claims up to `n` jobs as part of the transaction.
    pub fn poll_batch(&mut self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>> {
        ops::claim(
            self.conn,
            queue,
            n,
            millis(visibility),
            self.token,
            now_ms(),
        )
    }

    /// Acks a job as part of the transaction; `StaleLease` if the lease is not current.
    pub fn ack(&mut self, lease: Lease) -> Result<()> {
        let report = self.ack_batch(std::slice::from_ref(&lease))?;
        if report.acked == 1 {
            Ok(())
        } else {
            Err(crate::Error::StaleLease {
                job_id: lease.job_id,
            })
        }
    }

    /// Acks many jobs as part of the transaction (one statement per lease token); stale leases are
    /// reported, not fatal.
    pub fn ack_batch(&mut self, leases: &[Lease]) -> Result<AckReport> {
        ops::ack_many(self.conn, leases, self.cfg, now_ms())
    }

    /// Nacks a job as part of the transaction.
    pub fn nack(&mut self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        ops::nack(
            self.conn,
            lease,
            error,
            delay.map(millis),
            self.cfg,
            now_ms(),
        )
    }

    /// Gives a claimed job back without counting the attempt, as part of the transaction.
    pub fn release(&mut self, lease: Lease, delay: Duration) -> Result<()> {
        ops::release(self.conn, lease, millis(delay), now_ms())
    }

    /// Fails with `StaleLease` unless `lease` is the job's current lease.
    pub fn check_lease(&self, lease: Lease) -> Result<()> {
        ops::check_lease(self.conn, lease)
    }

    /// Moves a claimed job to the dead-letter table as part of the transaction.
    pub fn bury(&mut self, lease: Lease, reason: &str) -> Result<()> {
        ops::check_lease(self.conn, lease)?;
        ops::bury(self.conn, lease.job_id, reason, now_ms())
    }

    /// Deletes a job that is not in flight (cancellation of pending work); returns whether it existed.
    pub fn cancel(&mut self, job_id: i64) -> Result<bool> {
        ops::cancel(self.conn, job_id)
    }

    /// Looks a job up inside the transaction.
    pub fn get(&self, id: i64) -> Result<Option<JobInfo>> {
        ops::get(self.conn, id)
    }

    /// True when `fencing_token` is the current, unexpired token of election `name`: a leader checks
    /// this inside the transaction that performs its side effect.
    pub fn check_fencing(&self, name: &str, fencing_token: i64) -> Result<bool> {
        ops::check_fencing(self.conn, name, fencing_token, now_ms())
    }
}
