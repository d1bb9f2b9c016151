//! Where the executor reads each lane's waiting work: the [`Backlog`] seam, and
//! [`QueueBacklog`], the one over a `squeueha` queue.

use async_trait::async_trait;
use squeueha::Queue;

/// What waits for one lane, as a [`Backlog`] reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    /// Jobs waiting (not started).
    pub jobs: u64,
    /// GPU-seconds they need, where known (else the executor counts the lane's `job_s` each).
    pub work_s: Option<f64>,
    /// How long the oldest has waited, seconds.
    pub oldest_wait_s: f64,
    /// GPU-seconds of work that ever arrived for the lane, where known (else the executor
    /// counts the increases of `jobs` between ticks as arrivals).
    pub arrived_work_s_total: Option<f64>,
}

/// A backlog that could not be read (the lane is left out of that tick).
#[derive(Debug, thiserror::Error)]
#[error("cannot read the backlog of `{queue}`: {reason}")]
pub struct BacklogError {
    /// The lane's queue.
    pub queue: String,
    /// Why.
    pub reason: String,
}

/// The work waiting per lane, read at every tick.
#[async_trait]
pub trait Backlog: Send + Sync {
    /// What waits in `queue` now.
    async fn pending(&self, queue: &str) -> Result<Pending, BacklogError>;
}

/// The lanes' `squeueha` queues (one queue per lane, named as the lane): ready jobs and the age
/// of the oldest, read on a blocking thread.
#[derive(Clone)]
pub struct QueueBacklog(pub Queue);

#[async_trait]
impl Backlog for QueueBacklog {
    async fn pending(&self, queue: &str) -> Result<Pending, BacklogError> {
        let q = self.0.clone();
        let name = queue.to_owned();
        let failed = |reason: String| BacklogError {
            queue: queue.to_owned(),
            reason,
        };
        let stats = tokio::task::spawn_blocking(move || q.stats(&name))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(e.to_string()))?;
        Ok(Pending {
            jobs: stats.ready,
            work_s: None,
            oldest_wait_s: stats.oldest_ready_age_ms.unwrap_or(0).max(0) as f64 / 1000.0,
            arrived_work_s_total: None,
        })
    }
}
