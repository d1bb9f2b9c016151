//! A worker runner: handlers registered per queue, each run by a number of tasks that claim
//! batches, keep their leases alive while the handler works (a heartbeat extends them), apply
//! what the handler decided for each job, and stop gracefully: [`Running::shutdown`] lets the
//! batches in progress finish and claims nothing more.
//!
//! ```
//! use std::time::Duration;
//! use squeueha::worker::{Outcome, QueueOptions, Worker};
//! use squeueha::{AsyncQueue, Config, NewJob};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> squeueha::Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| squeueha::Error::InvalidArgument(e.to_string()))?;
//! let queue = AsyncQueue::open(dir.path().join("jobs.db"), Config::default()).await?;
//! queue.enqueue("ocr", NewJob::new(b"page-1".to_vec())).await?;
//! let running = Worker::new(queue.clone())
//!     .register("ocr", QueueOptions::default().batch(16).concurrency(2), |jobs| async move {
//!         // ... work on the batch ...
//!         jobs.iter().map(|_| Outcome::Done).collect()
//!     })
//!     .start();
//! while queue.stats("ocr").await?.pending() > 0 {
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//! }
//! running.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::{AsyncQueue, Job, Lease};

/// What became of one job of a batch, in the batch's order.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done: acked.
    Done,
    /// Failed this time: tried again after `delay` (the queue's back-off when `None`), or
    /// dead-lettered once its attempts are spent.
    Retry {
        /// Why, kept with the job.
        error: String,
        /// When to try again.
        delay: Option<Duration>,
    },
    /// Failed for good (a malformed payload): dead-lettered at once with this reason.
    Bury(String),
}

/// How one queue's handler runs.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    concurrency: usize,
    batch: usize,
    visibility: Duration,
    idle_wait: Duration,
}

impl Default for QueueOptions {
    /// One task, batches of 1, a 30 s lease, a wake-up check every second while idle.
    fn default() -> Self {
        Self {
            concurrency: 1,
            batch: 1,
            visibility: Duration::from_secs(30),
            idle_wait: Duration::from_secs(1),
        }
    }
}

impl QueueOptions {
    /// Tasks claiming and running batches at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Jobs a batch holds at most (at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// The lease of a claimed job; while the handler runs it is extended every third of it, so
    /// a slow handler keeps its jobs and a crashed process gives them back after at most this
    /// long. At least 100 ms.
    pub fn visibility(mut self, lease: Duration) -> Self {
        self.visibility = lease.max(Duration::from_millis(100));
        self
    }

    /// How long an idle task waits for new work before it looks again (an enqueue in this
    /// process wakes it at once).
    pub fn idle_wait(mut self, wait: Duration) -> Self {
        self.idle_wait = wait.max(Duration::from_millis(10));
        self
    }
}

type BoxedHandler =
    Arc<dyn Fn(Vec<Job>) -> Pin<Box<dyn Future<Output = Vec<Outcome>> + Send>> + Send + Sync>;

struct Registration {
    queue: String,
    options: QueueOptions,
    handler: BoxedHandler,
}

/// Handlers per queue, not running yet.
pub struct Worker {
    queue: AsyncQueue,
    registrations: Vec<Registration>,
}

impl Worker {
    /// No handler yet, on `queue`'s database.
    pub fn new(queue: AsyncQueue) -> Self {
        Self {
            queue,
            registrations: Vec::new(),
        }
    }

    /// Runs `handler` on the batches of `queue`: it gets the claimed jobs and answers one
    /// [`Outcome`] per job, in order (a missing outcome counts as a retry, a panic as a retry of
    /// the whole batch).
    pub fn register<F, Fut>(mut self, queue: &str, options: QueueOptions, handler: F) -> Self
    where
        F: Fn(Vec<Job>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Outcome>> + Send + 'static,
    {
        let handler: BoxedHandler = Arc::new(move |jobs| Box::pin(handler(jobs)));
        self.registrations.push(Registration {
            queue: queue.to_owned(),
            options,
            handler,
        });
        self
    }

    /// Starts every registered handler's tasks (on the current tokio runtime).
    pub fn start(self) -> Running {
        let (stop, stopping) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for r in self.registrations {
            for _ in 0..r.options.concurrency {
                tasks.spawn(run_task(
                    self.queue.clone(),
                    r.queue.clone(),
                    r.options.clone(),
                    Arc::clone(&r.handler),
                    stopping.clone(),
                ));
            }
        }
        Running { stop, tasks }
    }
}

/// The running handlers.
pub struct Running {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Running {
    /// Claims nothing more, lets every batch in progress finish (its outcomes applied), and
    /// returns once all tasks have ended.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// One task: claim, run, apply, until told to stop.
async fn run_task(
    queue: AsyncQueue,
    name: String,
    options: QueueOptions,
    handler: BoxedHandler,
    mut stopping: watch::Receiver<bool>,
) {
    while !*stopping.borrow() {
        // Waiting for work ends early when a stop is asked; the claim itself is cancel-safe.
        let claimed = tokio::select! {
            jobs = queue.poll_batch_wait(&name, options.batch, options.visibility, options.idle_wait) => jobs,
            _ = stopping.changed() => break,
        };
        let Ok(jobs) = claimed else {
            // A busy or briefly unavailable database: the next claim tries again (squeueha does
            // not log; the queue's stats show work that is not claimed).
            tokio::time::sleep(options.idle_wait).await;
            continue;
        };
        if jobs.is_empty() {
            continue;
        }
        run_batch(&queue, &options, &handler, jobs).await;
    }
}

/// Runs the handler on `jobs` with their leases kept alive, then applies its outcomes.
async fn run_batch(
    queue: &AsyncQueue,
    options: &QueueOptions,
    handler: &BoxedHandler,
    jobs: Vec<Job>,
) {
    let leases: Vec<Lease> = jobs.iter().map(|j| j.lease).collect();
    let work = tokio::spawn(handler(jobs));
    let beat = options.visibility / 3;
    let mut work = std::pin::pin!(work);
    let outcomes = loop {
        tokio::select! {
            done = &mut work => break done,
            _ = tokio::time::sleep(beat) => {
                for lease in &leases {
                    // A lease lost meanwhile (expired and claimed elsewhere) stays lost: its
                    // outcome will be refused as stale, which is what at-least-once allows.
                    let _ = queue.extend(*lease, options.visibility).await;
                }
            }
        }
    };
    let outcomes = match outcomes {
        Ok(o) => o,
        Err(e) => {
            let error = format!("the handler panicked: {e}");
            leases
                .iter()
                .map(|_| Outcome::Retry {
                    error: error.clone(),
                    delay: None,
                })
                .collect()
        }
    };
    let mut done = Vec::new();
    for (i, lease) in leases.iter().enumerate() {
        match outcomes.get(i) {
            Some(Outcome::Done) => done.push(*lease),
            Some(Outcome::Retry { error, delay }) => {
                let _ = queue.nack(*lease, error, *delay).await;
            }
            Some(Outcome::Bury(reason)) => {
                let _ = queue.bury(*lease, reason).await;
            }
            None => {
                let _ = queue
                    .nack(*lease, "the handler returned no outcome for this job", None)
                    .await;
            }
        }
    }
    if !done.is_empty() {
        // Stale leases (taken over after a lost heartbeat) are the only partial outcome; the
        // jobs are then someone else's.
        let _ = queue.ack_batch(done).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Config, JobState, NewJob};
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn open() -> (tempfile::TempDir, AsyncQueue) {
        let dir = tempfile::tempdir().unwrap();
        let q = AsyncQueue::open(dir.path().join("q.db"), Config::default())
            .await
            .unwrap();
        (dir, q)
    }

    async fn drained(q: &AsyncQueue, name: &str) {
        for _ in 0..500 {
            if q.stats(name).await.unwrap().pending() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{name} not drained: {:?}", q.stats(name).await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_outcomes_and_a_graceful_shutdown() {
        let (_d, q) = open().await;
        let jobs: Vec<NewJob> = (0..20)
            .map(|i| NewJob::new(format!("{i}").into_bytes()).max_attempts(1))
            .collect();
        let ids: Vec<i64> = q
            .enqueue_batch("work", jobs)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id())
            .collect();
        let largest = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&largest);
        let running = Worker::new(q.clone())
            .register(
                "work",
                QueueOptions::default().batch(8).concurrency(2),
                move |jobs| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.fetch_max(jobs.len(), Ordering::SeqCst);
                        jobs.iter()
                            .map(|j| match j.payload.as_slice() {
                                b"3" => Outcome::Bury("three is malformed".into()),
                                b"4" => Outcome::Retry {
                                    error: "four failed".into(),
                                    delay: None,
                                },
                                _ => Outcome::Done,
                            })
                            .collect()
                    }
                },
            )
            .start();
        drained(&q, "work").await;
        running.shutdown().await;
        assert!(largest.load(Ordering::SeqCst) > 1, "batched");
        let mut states = Vec::new();
        for id in &ids {
            states.push(q.get(*id).await.unwrap().map(|j| j.state));
        }
        let dead = states
            .iter()
            .filter(|s| **s == Some(JobState::Dead))
            .count();
        assert_eq!(
            dead, 2,
            "buried, and retried past its one attempt: {states:?}"
        );
        let dead_letters = q.dead_letters("work", 10).await.unwrap();
        let reasons: Vec<_> = dead_letters
            .iter()
            .filter_map(|d| d.last_error.clone())
            .collect();
        assert!(
            reasons.iter().any(|r| r.contains("three is malformed")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("four failed")),
            "{reasons:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_handler_keeps_its_jobs_and_shutdown_waits_for_it() {
        let (_d, q) = open().await;
        let id = q
            .enqueue("slow", NewJob::new(b"x".to_vec()))
            .await
            .unwrap()
            .id();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let running = Worker::new(q.clone())
            .register(
                "slow",
                QueueOptions::default().visibility(Duration::from_secs(2)),
                move |jobs| {
                    let counted = Arc::clone(&counted);
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        // Two and a half leases long: only the heartbeat keeps the job ours.
                        tokio::time::sleep(Duration::from_millis(5000)).await;
                        jobs.iter().map(|_| Outcome::Done).collect()
                    }
                },
            )
            .start();
        // Once the handler holds the job (not before: the test's claim would take it first on
        // a slow machine), a second consumer never gets it while the heartbeat runs.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while calls.load(Ordering::SeqCst) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the handler never ran"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for _ in 0..10 {
            let stolen = q
                .poll_batch("slow", 1, Duration::from_secs(10))
                .await
                .unwrap();
            assert!(
                stolen.is_empty(),
                "the lease lapsed under a running handler"
            );
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        running.shutdown().await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let job = q.get(id).await.unwrap();
        assert!(
            job.as_ref().is_none_or(|j| j.state == JobState::Done),
            "{job:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_handler_retries_its_batch_and_the_worker_goes_on() {
        let (_d, q) = open().await;
        let id = q
            .enqueue("p", NewJob::new(b"boom".to_vec()).max_attempts(2))
            .await
            .unwrap()
            .id();
        let running = Worker::new(q.clone())
            .register(
                "p",
                QueueOptions::default().idle_wait(Duration::from_millis(20)),
                |jobs| async move {
                    if jobs.iter().any(|j| j.attempts == 1) {
                        panic!("first attempt fails");
                    }
                    jobs.iter().map(|_| Outcome::Done).collect()
                },
            )
            .start();
        for _ in 0..500 {
            if q.get(id)
                .await
                .unwrap()
                .is_none_or(|j| j.state == JobState::Done)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        running.shutdown().await;
        let job = q.get(id).await.unwrap();
        assert!(
            job.as_ref().is_none_or(|j| j.state == JobState::Done),
            "{job:?}"
        );
    }
}
