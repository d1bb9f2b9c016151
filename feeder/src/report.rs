//! What the feeder reports: per batch, and in total.

use std::collections::BTreeMap;

/// A job buried as a poison pill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison {
    /// The job.
    pub job_id: i64,
    /// Bisection reruns it took to isolate it.
    pub reruns: usize,
    /// The reason written to the dead-letter table.
    pub reason: String,
}

/// What one batch (with its bisection, when it crashed the server) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// The lane (queue).
    pub lane: String,
    /// Jobs claimed.
    pub claimed: usize,
    /// Jobs whose result was stored (and acked).
    pub completed: usize,
    /// Jobs given back without counting the attempt (server down or busy, or untested after a
    /// crash).
    pub released: usize,
    /// Jobs nacked for a retry (attempt counted).
    pub retried: usize,
    /// Jobs dead-lettered for their own fault (bad request past its attempts, unusable payload).
    pub dead: usize,
    /// Jobs buried as poison pills.
    pub poisoned: Vec<Poison>,
    /// The server was down before the batch reached it: the whole batch was released.
    pub server_down: bool,
    /// The batch took the server down.
    pub crashed: bool,
    /// Server restarts.
    pub restarts: usize,
    /// Bisection reruns (sub-batches sent again after a crash).
    pub reruns: usize,
}

/// Totals over a feeder's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeederStats {
    /// Batches run (with at least one job).
    pub batches: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs released.
    pub released: u64,
    /// Jobs nacked for a retry.
    pub retried: u64,
    /// Jobs dead-lettered for their own fault.
    pub dead: u64,
    /// Poison pills buried.
    pub poisoned: u64,
    /// Batches that crashed their server.
    pub crashes: u64,
    /// Server restarts (after a crash, before bisection reruns, and by background recovery of a
    /// server found down or unhealthy).
    pub restarts: u64,
    /// Bisection reruns.
    pub reruns: u64,
    /// Per lane (queue): its batches and the jobs they claimed, whose ratio to the lane's batch
    /// size is how full its batches run.
    pub lanes: BTreeMap<String, LaneTotals>,
}

/// One lane's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneTotals {
    /// Batches run (with at least one job).
    pub batches: u64,
    /// Jobs those batches claimed.
    pub claimed: u64,
}

impl FeederStats {
    pub(crate) fn add(&mut self, r: &BatchReport) {
        let n = |x: usize| u64::try_from(x).unwrap_or(u64::MAX);
        self.batches += u64::from(r.claimed > 0);
        self.completed += n(r.completed);
        self.released += n(r.released);
        self.retried += n(r.retried);
        self.dead += n(r.dead);
        self.poisoned += n(r.poisoned.len());
        self.crashes += u64::from(r.crashed);
        self.restarts += n(r.restarts);
        self.reruns += n(r.reruns);
        if r.claimed > 0 {
            let lane = self.lanes.entry(r.lane.clone()).or_default();
            lane.batches += 1;
            lane.claimed += n(r.claimed);
        }
    }
}
