//! The storage seam and the reports it returns. `Queue` speaks only to this trait; all SQL lives
//! behind it in `sqlite/`, which depends on this module and never the other way round. A
//! PostgreSQL backend (`FOR UPDATE SKIP LOCKED` claims) implements the same trait without any change
//! to the public API.

use crate::error::Result;
use crate::job::{DeadJob, Enqueued, Job, JobInfo, Lease, Millis, Nacked, NewJob};
use crate::leader::Leadership;
use crate::stats::QueueStats;

/// What one housekeeping pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Retained finished jobs deleted.
    pub purged_done: usize,
    /// Expired dedup keys deleted.
    pub purged_dedup: usize,
    /// Pages in the WAL at checkpoint time.
    pub wal_pages: u64,
    /// Pages copied back into the database by the checkpoint.
    pub checkpointed_pages: u64,
}

/// Outcome of a batched ack: stale leases do not abort the others, so the report says which were
/// refused. Use it: [`AckReport::all_acked`] turns any stale lease into the error a single
/// [`Queue::ack`](crate::Queue::ack) returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "stale leases are reported here, not as an error: check `stale` or call `all_acked()`"]
pub struct AckReport {
    /// Jobs acked.
    pub acked: usize,
    /// Jobs whose lease was stale (not acked: someone else holds them now, or they finished).
    pub stale: Vec<i64>,
}

impl AckReport {
    /// The number acked when every lease was current; otherwise
    /// [`Error::StaleLease`](crate::Error::StaleLease) naming the first stale job.
    pub fn all_acked(self) -> Result<usize> {
        match self.stale.first() {
            None => Ok(self.acked),
            Some(&job_id) => Err(crate::Error::StaleLease { job_id }),
        }
    }
}

/// Storage backends implement this; `Queue` speaks only to it.
pub(crate) trait Storage: Send + Sync {
    fn enqueue(&self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>>;
    fn claim(&self, queue: &str, n: usize, visibility_ms: i64, token: i64) -> Result<Vec<Job>>;
    fn ack(&self, leases: &[Lease]) -> Result<AckReport>;
    fn ack_and_claim(
        &self,
        leases: &[Lease],
        queue: &str,
        n: usize,
        visibility_ms: i64,
        token: i64,
    ) -> Result<(AckReport, Vec<Job>)>;
    fn nack(&self, lease: Lease, error: &str, delay_ms: Option<i64>) -> Result<Nacked>;
    fn release(&self, lease: Lease, delay_ms: i64) -> Result<()>;
    fn extend(&self, lease: Lease, visibility_ms: i64) -> Result<Millis>;
    fn bury(&self, lease: Lease, reason: &str) -> Result<()>;
    fn get(&self, id: i64) -> Result<Option<JobInfo>>;
    fn list_dead(&self, queue: &str, after: (Millis, i64), limit: usize) -> Result<Vec<DeadJob>>;
    fn list_dead_newest(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>>;
    fn get_dead(&self, id: i64) -> Result<Option<DeadJob>>;
    fn requeue_dead(&self, id: i64) -> Result<i64>;
    fn cancel(&self, job_id: i64) -> Result<bool>;
    fn purge_dead(&self, queue: &str, older_than: Option<Millis>) -> Result<usize>;
    fn purge_done(&self, before: Millis) -> Result<usize>;
    fn purge_dedup(&self, before: Millis) -> Result<usize>;
    fn stats(&self, queue: &str) -> Result<QueueStats>;
    fn queues(&self) -> Result<Vec<String>>;
    fn next_due(&self, queue: &str) -> Result<Option<Millis>>;
    fn try_lead(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Leadership>>;
    fn resign(&self, lead: &Leadership) -> Result<bool>;
    fn leader(&self, name: &str) -> Result<Option<Leadership>>;
    fn maintain(&self) -> Result<MaintenanceReport>;
}
