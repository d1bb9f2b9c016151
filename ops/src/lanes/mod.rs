//! Lane jobs: chat requests queued on a lane's queue, sent to its inference server by the
//! feeder, whose answers it stores in the queue database's results table
//! ([`horos_feeder::TableSink`]). One file per operation: [`submit`](LaneJobs::submit),
//! [`status`](LaneJobs::status) (a job's state and its answer), [`stats`](LaneJobs::stats) and
//! [`dead`](LaneJobs::dead) (dead letters listed, one requeued, a queue's purged).

mod dead;
mod stats;
pub(crate) mod status;
mod submit;

pub use dead::{
    DEFAULT_DEAD_LIMIT, DeadAnswer, DeadArgs, DeadLetter, DeadLetters, Purged, Requeued,
    is_ingest_stage,
};
pub use stats::{Stats, StatsArgs};
pub use status::{JobStatus, StatusArgs, Wait};
pub use submit::{SubmitArgs, Submitted};

use std::sync::Arc;

use horos_feeder::TableSink;
use squeueha::AsyncQueue;
use tokio::sync::OnceCell;

use crate::error::OpsError;

/// A lane as the operations see it: its queue, the model a prompt is sent to when the caller
/// names none, and the attempts its jobs get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    /// The lane's queue (`think`, `vision`, ...).
    pub queue: String,
    /// The model a prompt goes to by default.
    pub model: Option<String>,
    /// Claims a job submitted to the lane gets before it is dead-lettered (`None`: the queue's
    /// `default_max_attempts`, squeueha's 5).
    pub max_attempts: Option<u32>,
}

impl Lane {
    /// The lane of `queue`, with `model` as its default.
    pub fn new(queue: impl Into<String>, model: Option<String>) -> Self {
        Self {
            queue: queue.into(),
            model,
            max_attempts: None,
        }
    }

    /// Jobs submitted to the lane get `attempts` claims (at least 1) before they are
    /// dead-lettered.
    #[must_use]
    pub fn max_attempts(mut self, attempts: Option<u32>) -> Self {
        self.max_attempts = attempts;
        self
    }
}

/// The lane jobs of one queue database: the operations on them are its methods.
///
/// Cheap to clone (the queue is a handle; the results table is opened once, at the first
/// [`status`](Self::status), and shared by the clones).
#[derive(Debug, Clone)]
pub struct LaneJobs {
    queue: AsyncQueue,
    lanes: Arc<[Lane]>,
    results: Arc<OnceCell<TableSink>>,
}

impl LaneJobs {
    /// The jobs of `lanes` on `queue`.
    pub fn new(queue: AsyncQueue, lanes: Vec<Lane>) -> Self {
        Self {
            queue,
            lanes: lanes.into(),
            results: Arc::default(),
        }
    }

    /// The queue database.
    pub fn queue(&self) -> &AsyncQueue {
        &self.queue
    }

    /// The lanes.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// The lane of `queue`, or [`OpsError::UnknownLane`].
    fn lane(&self, queue: &str) -> Result<&Lane, OpsError> {
        self.lanes
            .iter()
            .find(|l| l.queue == queue)
            .ok_or_else(|| OpsError::UnknownLane {
                queue: queue.to_owned(),
                known: self.lanes.iter().map(|l| l.queue.clone()).collect(),
            })
    }

    /// The feeder's results table (created the first time, as the feeder would).
    async fn results(&self) -> Result<&TableSink, OpsError> {
        self.results
            .get_or_try_init(|| async {
                let queue = self.queue.blocking().clone();
                tokio::task::spawn_blocking(move || TableSink::new(queue))
                    .await?
                    .map_err(OpsError::Results)
            })
            .await
    }
}

#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used)]
    //! A queue database in a temporary directory, with two lanes.

    use super::*;

    /// Lane jobs on a fresh SQLite file: `think` (model `smollm2`) and `vision` (no model,
    /// `max_attempts` 2).
    pub async fn lane_jobs() -> (tempfile::TempDir, LaneJobs) {
        let dir = tempfile::tempdir().unwrap();
        let queue = AsyncQueue::open(dir.path().join("jobs.db"), squeueha::Config::default())
            .await
            .unwrap();
        let lanes = vec![
            Lane::new("think", Some("smollm2".into())),
            Lane::new("vision", None).max_attempts(Some(2)),
        ];
        (dir, LaneJobs::new(queue, lanes))
    }
}
