//! One queue by name, with its defaults: what most callers hold instead of repeating the queue's
//! name and the lease on every call.
//!
//! ```
//! use std::time::Duration;
//! use squeueha::{NewJob, Queue};
//!
//! # fn main() -> squeueha::Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| squeueha::Error::InvalidArgument(e.to_string()))?;
//! let ocr = Queue::open(dir.path().join("jobs.db"))?
//!     .named("ocr")
//!     .visibility(Duration::from_secs(120));
//! ocr.enqueue(NewJob::new(b"page-1".to_vec()))?;
//! let batch = ocr.poll_batch(16)?;
//! ocr.ack_batch(batch.iter().map(|j| j.lease).collect())?.all_acked()?;
//! assert_eq!(ocr.stats()?.pending(), 0);
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::{AckReport, DeadJob, Enqueued, Job, Lease, NewJob, Queue, QueueStats, Result};

/// The lease a [`NamedQueue`] gives claimed jobs unless told otherwise.
const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// One queue of a [`Queue`]'s database, with the lease its claims take. Cheap to clone.
#[derive(Clone)]
pub struct NamedQueue {
    queue: Queue,
    name: String,
    visibility: Duration,
}

impl Queue {
    /// The queue `name` of this database, claiming with a 30 s lease (see
    /// [`NamedQueue::visibility`]).
    pub fn named(&self, name: &str) -> NamedQueue {
        NamedQueue {
            queue: self.clone(),
            name: name.to_owned(),
            visibility: DEFAULT_VISIBILITY,
        }
    }
}

impl NamedQueue {
    /// The same queue, claiming with leases of `visibility`.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database it belongs to.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// See [`Queue::enqueue`].
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.queue.enqueue(&self.name, job)
    }

    /// See [`Queue::enqueue_batch`].
    pub fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        self.queue.enqueue_batch(&self.name, jobs)
    }

    /// Up to `n` jobs, leased for this handle's visibility (see [`Queue::poll_batch`]).
    pub fn poll_batch(&self, n: usize) -> Result<Vec<Job>> {
        self.queue.poll_batch(&self.name, n, self.visibility)
    }

    /// See [`Queue::ack`].
    pub fn ack(&self, lease: Lease) -> Result<()> {
        self.queue.ack(lease)
    }

    /// See [`Queue::ack_batch`].
    pub fn ack_batch(&self, leases: Vec<Lease>) -> Result<AckReport> {
        self.queue.ack_batch(&leases)
    }

    /// Extends a claimed job's lease by this handle's visibility (see [`Queue::extend`]).
    pub fn extend(&self, lease: Lease) -> Result<crate::Millis> {
        self.queue.extend(lease, self.visibility)
    }

    /// See [`Queue::stats`].
    pub fn stats(&self) -> Result<QueueStats> {
        self.queue.stats(&self.name)
    }

    /// See [`Queue::dead_letters`].
    pub fn dead_letters(&self, limit: usize) -> Result<Vec<DeadJob>> {
        self.queue.dead_letters(&self.name, limit)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Error;

    #[test]
    fn a_named_queue_keeps_its_lease_and_a_stale_ack_is_an_error_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path().join("q.db")).unwrap();
        let ocr = q.named("ocr").visibility(Duration::from_millis(1));
        ocr.enqueue_batch(&[NewJob::new(b"a".to_vec()), NewJob::new(b"b".to_vec())])
            .unwrap();
        let first = ocr.poll_batch(2).unwrap();
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|j| j.queue == "ocr"));
        // The 1 ms lease lapses: another claim takes the jobs, the first leases are stale.
        std::thread::sleep(Duration::from_millis(20));
        let second = q.named("ocr").poll_batch(2).unwrap();
        assert_eq!(second.len(), 2);
        let report = ocr
            .ack_batch(first.iter().map(|j| j.lease).collect())
            .unwrap();
        assert_eq!(report.stale.len(), 2);
        assert!(matches!(
            report.all_acked(),
            Err(Error::StaleLease { job_id }) if job_id == first[0].id
        ));
        let acked = ocr
            .ack_batch(second.iter().map(|j| j.lease).collect())
            .unwrap()
            .all_acked()
            .unwrap();
        assert_eq!(acked, 2);
        assert_eq!(ocr.stats().unwrap().pending(), 0);
        assert_eq!(ocr.name(), "ocr");
    }
}
