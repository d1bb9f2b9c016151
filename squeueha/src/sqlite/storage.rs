//! `Storage` for SQLite: each operation is one transaction on a pooled connection.

use crate::error::Result;
use crate::job::{DeadJob, Enqueued, Job, JobInfo, Lease, Millis, Nacked, NewJob, now_ms};
use crate::leader::Leadership;
use crate::sqlite::SqliteStore;
use crate::sqlite::ops;
use crate::stats::QueueStats;
use crate::storage::{AckReport, MaintenanceReport, Storage};

impl Storage for SqliteStore {
    fn enqueue(&self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        ops::check_queue_name(queue)?;
        // Refuse bad input before taking the write lock.
        ops::validate(jobs, &self.cfg)?;
        self.write_ids(|tx, ids| ops::enqueue(tx, ids, queue, jobs, &self.cfg, now_ms()))
    }

    fn claim(&self, queue: &str, n: usize, visibility_ms: i64, token: i64) -> Result<Vec<Job>> {
        self.write(|tx| ops::claim(tx, queue, n, visibility_ms, token, now_ms()))
    }

    fn ack(&self, leases: &[Lease]) -> Result<AckReport> {
        self.write(|tx| ops::ack_many(tx, leases, &self.cfg, now_ms()))
    }

    fn ack_and_claim(
        &self,
        leases: &[Lease],
        queue: &str,
        n: usize,
        visibility_ms: i64,
        token: i64,
    ) -> Result<(AckReport, Vec<Job>)> {
        self.write(|tx| {
            let now = now_ms();
            let report = ops::ack_many(tx, leases, &self.cfg, now)?;
            let jobs = ops::claim(tx, queue, n, visibility_ms, token, now)?;
            Ok((report, jobs))
        })
    }

    fn nack(&self, lease: Lease, error: &str, delay_ms: Option<i64>) -> Result<Nacked> {
        self.write(|tx| ops::nack(tx, lease, error, delay_ms, &self.cfg, now_ms()))
    }

    fn release(&self, lease: Lease, delay_ms: i64) -> Result<()> {
        self.write(|tx| ops::release(tx, lease, delay_ms, now_ms()))
    }

    fn extend(&self, lease: Lease, visibility_ms: i64) -> Result<Millis> {
        self.write(|tx| ops::extend(tx, lease, visibility_ms, now_ms()))
    }

    fn bury(&self, lease: Lease, reason: &str) -> Result<()> {
        self.write(|tx| {
            ops::check_lease(tx, lease)?;
            ops::bury(tx, lease.job_id, reason, now_ms())
        })
    }

    fn get(&self, id: i64) -> Result<Option<JobInfo>> {
        self.read(|tx| ops::get(tx, id))
    }

    fn list_dead(&self, queue: &str, after: (Millis, i64), limit: usize) -> Result<Vec<DeadJob>> {
        self.read(|tx| ops::list_dead(tx, queue, after, limit))
    }

    fn list_dead_newest(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
        self.read(|tx| ops::list_dead_newest(tx, queue, limit))
    }

    fn get_dead(&self, id: i64) -> Result<Option<DeadJob>> {
        self.read(|tx| ops::get_dead(tx, id))
    }

    fn requeue_dead(&self, id: i64) -> Result<i64> {
        self.write_ids(|tx, ids| ops::requeue_dead(tx, ids, id, &self.cfg, now_ms()))
    }

    fn cancel(&self, job_id: i64) -> Result<bool> {
        self.write(|tx| ops::cancel(tx, job_id))
    }

    fn purge_dead(&self, queue: &str, older_than: Option<Millis>) -> Result<usize> {
        self.write(|tx| ops::purge_dead(tx, queue, older_than))
    }

    fn purge_done(&self, before: Millis) -> Result<usize> {
        self.write(|tx| ops::purge_done(tx, before))
    }

    fn purge_dedup(&self, before: Millis) -> Result<usize> {
        self.write(|tx| ops::purge_dedup(tx, before))
    }

    fn stats(&self, queue: &str) -> Result<QueueStats> {
        self.read(|tx| ops::stats(tx, queue, now_ms()))
    }

    fn queues(&self) -> Result<Vec<String>> {
        self.read(|tx| ops::queues(tx))
    }

    fn next_due(&self, queue: &str) -> Result<Option<Millis>> {
        self.read(|tx| ops::next_due(tx, queue))
    }

    fn try_lead(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Leadership>> {
        self.write(|tx| {
            Ok(
                ops::try_lead(tx, name, holder, ttl_ms, now_ms())?.map(|(fencing, expires_at)| {
                    Leadership {
                        name: name.to_owned(),
                        holder: holder.to_owned(),
                        fencing_token: fencing,
                        expires_at,
                    }
                }),
            )
        })
    }

    fn resign(&self, lead: &Leadership) -> Result<bool> {
        self.write(|tx| ops::resign(tx, &lead.name, &lead.holder, lead.fencing_token))
    }

    fn leader(&self, name: &str) -> Result<Option<Leadership>> {
        self.read(|tx| {
            Ok(
                ops::leader(tx, name, now_ms())?.map(|(holder, fencing, expires_at)| Leadership {
                    name: name.to_owned(),
                    holder,
                    fencing_token: fencing,
                    expires_at,
                }),
            )
        })
    }

    fn maintain(&self) -> Result<MaintenanceReport> {
        let writer = self.writer();
        crate::sqlite::with_busy_retry(&self.cfg, || self.maintain_on(&writer.conn, now_ms()))
    }
}
