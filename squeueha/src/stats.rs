//! Per-queue counts, for dashboards and allocators.

use serde::{Deserialize, Serialize};

/// Counts of one queue's jobs by state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Visible and waiting.
    pub ready: u64,
    /// Claimed, lease running.
    pub in_flight: u64,
    /// Waiting for a delay or a retry backoff.
    pub delayed: u64,
    /// Finished and retained.
    pub done: u64,
    /// In the dead-letter table.
    pub dead: u64,
    /// Age of the oldest ready job, in milliseconds.
    pub oldest_ready_age_ms: Option<i64>,
}

impl QueueStats {
    /// Jobs not finished yet: ready, delayed or in flight.
    pub fn pending(&self) -> u64 {
        self.ready + self.delayed + self.in_flight
    }
}
