//! Queue operations inside a caller's PostgreSQL transaction.

use std::time::Duration;

use ::postgres::Transaction;

use super::{Ctx, lease, ops};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Enqueued, Job, JobInfo, Lease, Nacked, NewJob, millis, now_ms};
use crate::storage::AckReport;
use crate::tx::QueueTx;

/// Queue operations that commit or roll back together with the caller's own SQL on a PostgreSQL
/// queue, obtained from [`Queue::pg_transaction`](crate::Queue::pg_transaction) (feature
/// `postgres`): the counterpart of [`QueueTx`](crate::QueueTx), whose
/// [`connection`](crate::QueueTx::connection) is SQLite's.
pub struct PgQueueTx<'a, 'b> {
    ctx: Ctx<'a, Transaction<'b>>,
    cfg: &'a Config,
    token: i64,
    /// Claims made so far: each gets a token of its own (`token` plus twice this).
    claims: i64,
    touched: Vec<String>,
}

impl<'a, 'b> PgQueueTx<'a, 'b> {
    pub(crate) fn new(ctx: Ctx<'a, Transaction<'b>>, cfg: &'a Config, token: i64) -> Self {
        PgQueueTx {
            ctx,
            cfg,
            token,
            claims: 0,
            touched: Vec::new(),
        }
    }

    pub(crate) fn into_touched(self) -> Vec<String> {
        self.touched
    }

    /// The PostgreSQL transaction, for the caller's own tables. Do not commit or roll back
    /// through it: the queue does when the closure returns.
    pub fn client(&mut self) -> &mut Transaction<'b> {
        self.ctx.c
    }

    /// Enqueues jobs as part of the transaction; consumers on every node are woken at commit.
    pub fn enqueue_batch(&mut self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = ops::enqueue(&mut self.ctx, queue, jobs, self.cfg, now_ms())?;
        if !self.touched.iter().any(|q| q == queue) {
            self.touched.push(queue.to_owned());
        }
        Ok(out)
    }

    /// Enqueues one job as part of the transaction.
    pub fn enqueue(&mut self, queue: &str, job: NewJob) -> Result<Enqueued> {
        QueueTx::new(self).enqueue(queue, job)
    }

    /// Claims up to `n` jobs as part of the transaction.
    pub fn poll_batch(&mut self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        // Each claim's lease is a row of its own: a token of its own (even; see ops).
        let token = self.token.wrapping_add(self.claims.wrapping_mul(2));
        self.claims += 1;
        let (_, jobs) = lease::ack_and_claim(
            &mut self.ctx,
            &[],
            queue,
            n,
            millis(visibility),
            token,
            lease::Timers::Due,
            true,
            self.cfg,
            now_ms(),
        )?;
        Ok(jobs.jobs)
    }

    /// Acks a job as part of the transaction; `StaleLease` if the lease is not current.
    pub fn ack(&mut self, lease: Lease) -> Result<()> {
        QueueTx::new(self).ack(lease)
    }

    /// Acks many jobs as part of the transaction; stale leases are reported, not fatal.
    pub fn ack_batch(&mut self, leases: &[Lease]) -> Result<AckReport> {
        lease::ack_many(&mut self.ctx, leases, self.cfg, now_ms())
    }

    /// Nacks a job as part of the transaction.
    pub fn nack(&mut self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        lease::nack(
            &mut self.ctx,
            lease,
            error,
            delay.map(millis),
            self.cfg,
            now_ms(),
        )
    }

    /// Gives a claimed job back without counting the attempt, as part of the transaction.
    pub fn release(&mut self, lease: Lease, delay: Duration) -> Result<()> {
        lease::release(&mut self.ctx, lease, millis(delay), now_ms())
    }

    /// Fails with `StaleLease` unless `lease` is the job's current lease; the job stays locked
    /// until the transaction ends.
    pub fn check_lease(&mut self, lease: Lease) -> Result<()> {
        lease::check_lease(&mut self.ctx, lease)
    }

    /// Moves a claimed job to the dead-letter table as part of the transaction.
    pub fn bury(&mut self, lease: Lease, reason: &str) -> Result<()> {
        lease::bury(&mut self.ctx, lease, reason, now_ms())
    }

    /// Deletes a job that is not in flight; returns whether it existed.
    pub fn cancel(&mut self, job_id: i64) -> Result<bool> {
        ops::cancel(&mut self.ctx, job_id)
    }

    /// Deletes a job of `queue` that is not in flight; returns whether it existed there.
    pub fn cancel_in(&mut self, queue: &str, job_id: i64) -> Result<bool> {
        ops::cancel_in(&mut self.ctx, queue, job_id)
    }

    /// Looks a job up inside the transaction.
    pub fn get(&mut self, id: i64) -> Result<Option<JobInfo>> {
        ops::get(&mut self.ctx, id)
    }

    /// True when `fencing_token` is the current, unexpired token of election `name`. The
    /// leadership stays locked until the transaction ends, so a successor cannot take over (and a
    /// stale leader's writes in this transaction cannot pass) before it commits.
    pub fn check_fencing(&mut self, name: &str, fencing_token: i64) -> Result<bool> {
        ops::check_fencing(&mut self.ctx, name, fencing_token, now_ms())
    }
}

impl crate::tx::TxOps for PgQueueTx<'_, '_> {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn sqlite_connection(&self) -> Option<&rusqlite::Connection> {
        None
    }

    fn enqueue_batch(&mut self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        PgQueueTx::enqueue_batch(self, queue, jobs)
    }

    fn poll_batch(&mut self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>> {
        PgQueueTx::poll_batch(self, queue, n, visibility)
    }

    fn ack_batch(&mut self, leases: &[Lease]) -> Result<AckReport> {
        PgQueueTx::ack_batch(self, leases)
    }

    fn nack(&mut self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        PgQueueTx::nack(self, lease, error, delay)
    }

    fn release(&mut self, lease: Lease, delay: Duration) -> Result<()> {
        PgQueueTx::release(self, lease, delay)
    }

    fn check_lease(&mut self, lease: Lease) -> Result<()> {
        PgQueueTx::check_lease(self, lease)
    }

    fn bury(&mut self, lease: Lease, reason: &str) -> Result<()> {
        PgQueueTx::bury(self, lease, reason)
    }

    fn cancel(&mut self, job_id: i64) -> Result<bool> {
        PgQueueTx::cancel(self, job_id)
    }

    fn cancel_in(&mut self, queue: &str, job_id: i64) -> Result<bool> {
        PgQueueTx::cancel_in(self, queue, job_id)
    }

    fn get(&mut self, id: i64) -> Result<Option<JobInfo>> {
        PgQueueTx::get(self, id)
    }

    fn check_fencing(&mut self, name: &str, fencing_token: i64) -> Result<bool> {
        PgQueueTx::check_fencing(self, name, fencing_token)
    }

    fn execute(&mut self, sql: &str, params: &[crate::Value]) -> Result<u64> {
        super::sql::execute(&mut self.ctx, sql, params)
    }

    fn query(&mut self, sql: &str, params: &[crate::Value]) -> Result<Vec<crate::Row>> {
        super::sql::query(&mut self.ctx, sql, params)
    }

    fn execute_batch(&mut self, sql: &str) -> Result<()> {
        super::sql::execute_batch(self.ctx.c, sql)
    }
}
