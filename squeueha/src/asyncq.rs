//! The async API: every call runs the blocking core on tokio's blocking pool, and
//! `poll_batch_wait` awaits the in-process wake-up instead of parking a thread.

use std::time::Duration;

use std::sync::Arc;

use crate::async_tx::Batcher;
use crate::error::{Error, Result};
use crate::job::{DeadJob, Enqueued, Job, JobInfo, Lease, Millis, Nacked, NewJob};
use crate::leader::Leadership;
use crate::queue::Queue;
use crate::stats::QueueStats;
use crate::storage::AckReport;
use crate::tx::QueueTx;

/// Tells when a queue may have work, without claiming any: see [`AsyncQueue::watch`].
///
/// Call [`mark_seen`](Self::mark_seen) before polling, then [`wait`](Self::wait) after an empty
/// poll: an enqueue in between is never missed.
#[derive(Debug)]
pub struct QueueWatch {
    changes: tokio::sync::watch::Receiver<u64>,
    queue: Queue,
    name: String,
}

impl QueueWatch {
    /// Forgets the changes seen so far: the next [`wait`](Self::wait) waits for a newer one.
    pub fn mark_seen(&mut self) {
        self.changes.borrow_and_update();
    }

    /// Returns when work may be ready, at most after `timeout`: an enqueue or release in this
    /// process since [`mark_seen`](Self::mark_seen) (at once), a delayed job or an expired lease
    /// coming due, a wake-up from another process on this machine, or the idle poll interval
    /// (`Config::idle_poll`: work whose cross-process wake-up was lost or is off).
    /// `Ok(true)`: a change in this process ended the wait; `Ok(false)`: a timer did.
    pub async fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let std_now = std::time::Instant::now();
        let deadline = crate::queue::far_deadline(std_now, timeout);
        let (q, name) = (self.queue.clone(), self.name.clone());
        let wake = blocking(move || q.next_wake(&name, std_now, deadline)).await?;
        let sleep_until = tokio::time::Instant::from_std(wake);
        // A closed channel cannot happen while we hold the queue; treat it as a timer tick.
        let changed = tokio::time::timeout_at(sleep_until, self.changes.changed()).await;
        Ok(matches!(changed, Ok(Ok(()))))
    }
}

/// Async handle on a queue database; clone freely. Obtain with [`AsyncQueue::new`] or
/// [`AsyncQueue::open`].
#[derive(Clone, Debug)]
pub struct AsyncQueue {
    queue: Queue,
    /// The transactions of this handle and its clones waiting for a shared commit.
    batcher: Arc<Batcher>,
}

impl AsyncQueue {
    /// Wraps a blocking handle (they share pool and signals).
    pub fn new(queue: Queue) -> Self {
        AsyncQueue {
            queue,
            batcher: Arc::default(),
        }
    }

    /// Opens the database at `path` on the blocking pool.
    pub async fn open(path: impl AsRef<std::path::Path>, config: crate::Config) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let queue = blocking(move || Queue::open_with(path, config)).await?;
        Ok(AsyncQueue::new(queue))
    }

    /// The blocking handle.
    pub fn blocking(&self) -> &Queue {
        &self.queue
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Queue) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let q = self.queue.clone();
        blocking(move || f(&q)).await
    }

    /// See [`Queue::enqueue`].
    pub async fn enqueue(&self, queue: &str, job: NewJob) -> Result<Enqueued> {
        let queue = queue.to_owned();
        self.run(move |q| q.enqueue(&queue, job)).await
    }

    /// See [`Queue::enqueue_batch`].
    pub async fn enqueue_batch(&self, queue: &str, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let queue = queue.to_owned();
        self.run(move |q| q.enqueue_batch(&queue, &jobs)).await
    }

    /// See [`Queue::poll_batch`]. Cancel-safe: if this future is dropped while the claim runs, the
    /// claimed jobs are released at once (attempt not counted) instead of sitting invisible until
    /// their lease expires.
    pub async fn poll_batch(
        &self,
        queue: &str,
        n: usize,
        visibility: Duration,
    ) -> Result<Vec<Job>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let q = self.queue.clone();
        let queue = queue.to_owned();
        tokio::task::spawn_blocking(move || {
            let claimed = q.poll_batch(&queue, n, visibility);
            // Refused when the future was dropped first: the claim is nobody's, give it back.
            if let Err(Ok(jobs)) = tx.send(claimed) {
                release_all(&q, jobs);
            }
        });
        let mut answer = ClaimAnswer {
            rx: Some(rx),
            queue: self.queue.clone(),
        };
        let rx = answer
            .rx
            .as_mut()
            .ok_or_else(|| Error::Task("claim answer taken".into()))?;
        let claimed = rx
            .await
            .map_err(|_| Error::Task("claim task ended without an answer".into()))?;
        answer.rx = None;
        claimed
    }

    /// Waits up to `timeout` for up to `n` jobs without holding a thread while idle: an enqueue in
    /// this process or another on this machine wakes it at once, timers when due, and a lost
    /// wake-up is caught within `Config::idle_poll`.
    pub async fn poll_batch_wait(
        &self,
        queue: &str,
        n: usize,
        visibility: Duration,
        timeout: Duration,
    ) -> Result<Vec<Job>> {
        let mut watch = self.watch(queue);
        let deadline = crate::queue::far_deadline(std::time::Instant::now(), timeout);
        loop {
            watch.mark_seen();
            let jobs = self.poll_batch(queue, n, visibility).await?;
            let now = std::time::Instant::now();
            if !jobs.is_empty() || now >= deadline {
                return Ok(jobs);
            }
            watch.wait(deadline - now).await?;
        }
    }

    /// A watch on `queue`'s work, for consumers that must not claim a job before they can run it
    /// (a worker pool waits for work with no worker reserved, then claims with
    /// [`poll_batch`](Self::poll_batch)).
    pub fn watch(&self, queue: &str) -> QueueWatch {
        QueueWatch {
            changes: self.queue.signal(queue).subscribe(),
            queue: self.queue.clone(),
            name: queue.to_owned(),
        }
    }

    /// See [`Queue::ack`].
    pub async fn ack(&self, lease: Lease) -> Result<()> {
        self.run(move |q| q.ack(lease)).await
    }

    /// See [`Queue::ack_batch`].
    pub async fn ack_batch(&self, leases: Vec<Lease>) -> Result<AckReport> {
        self.run(move |q| q.ack_batch(&leases)).await
    }

    /// See [`Queue::nack`].
    pub async fn nack(&self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        let error = error.to_owned();
        self.run(move |q| q.nack(lease, &error, delay)).await
    }

    /// See [`Queue::release`].
    pub async fn release(&self, lease: Lease, delay: Duration) -> Result<()> {
        self.run(move |q| q.release(lease, delay)).await
    }

    /// See [`Queue::extend`].
    pub async fn extend(&self, lease: Lease, visibility: Duration) -> Result<Millis> {
        self.run(move |q| q.extend(lease, visibility)).await
    }

    /// See [`Queue::bury`].
    pub async fn bury(&self, lease: Lease, reason: &str) -> Result<()> {
        let reason = reason.to_owned();
        self.run(move |q| q.bury(lease, &reason)).await
    }

    /// See [`Queue::get`].
    pub async fn get(&self, id: i64) -> Result<Option<JobInfo>> {
        self.run(move |q| q.get(id)).await
    }

    /// Runs `f` in one write transaction, atomically with the queue operations it makes through
    /// [`QueueTx`], as [`Queue::transaction`] does; for async callers, the closures of concurrent
    /// calls on this handle and its clones are committed together, by one task on the blocking
    /// pool (one commit and one hop for many; an idle caller's batch is itself alone). `f` may run
    /// more than once, always against a state without its earlier runs: when a closure of a
    /// batch fails, or its commit does, each closure runs again alone, so every caller gets its
    /// own outcome. The call returns once the commit holding `f` succeeded.
    pub async fn transaction<T, E>(
        &self,
        f: impl FnMut(&mut QueueTx<'_>) -> std::result::Result<T, E> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        self.batcher.run(&self.queue, f).await
    }

    /// See `Queue::pg_transaction` (feature `postgres`): `f` runs in one PostgreSQL transaction on
    /// tokio's blocking pool (never on a thread that drives async tasks).
    #[cfg(feature = "postgres")]
    pub async fn pg_transaction<T, E>(
        &self,
        mut f: impl FnMut(&mut crate::PgQueueTx<'_, '_>) -> std::result::Result<T, E> + Send + 'static,
    ) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let q = self.queue.clone();
        match tokio::task::spawn_blocking(move || q.pg_transaction(&mut f)).await {
            Ok(out) => out,
            Err(e) => Err(E::from(Error::Task(e.to_string()))),
        }
    }

    /// See [`Queue::read`]: `f` runs on tokio's blocking pool.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnMut(&rusqlite::Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.run(move |q| q.read(f)).await
    }

    /// See [`Queue::query`]: a read of the caller's tables on either backend, on the blocking pool.
    pub async fn query(&self, sql: &str, params: &[crate::Value]) -> Result<Vec<crate::Row>> {
        let (sql, params) = (sql.to_owned(), params.to_vec());
        self.run(move |q| q.query(&sql, &params)).await
    }

    /// See [`Queue::query_opt`].
    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[crate::Value],
    ) -> Result<Option<crate::Row>> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// See [`Queue::stats`].
    pub async fn stats(&self, queue: &str) -> Result<QueueStats> {
        let queue = queue.to_owned();
        self.run(move |q| q.stats(&queue)).await
    }

    /// See [`Queue::all_stats`].
    pub async fn all_stats(&self) -> Result<Vec<QueueStats>> {
        self.run(|q| q.all_stats()).await
    }

    /// See [`Queue::dead_letters`].
    pub async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
        let queue = queue.to_owned();
        self.run(move |q| q.dead_letters(&queue, limit)).await
    }

    /// See [`Queue::dead_letter`].
    pub async fn dead_letter(&self, id: i64) -> Result<Option<DeadJob>> {
        self.run(move |q| q.dead_letter(id)).await
    }

    /// See [`Queue::newest_dead_letters`].
    pub async fn newest_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
        let queue = queue.to_owned();
        self.run(move |q| q.newest_dead_letters(&queue, limit))
            .await
    }

    /// See [`Queue::cancel`].
    pub async fn cancel(&self, job_id: i64) -> Result<bool> {
        self.run(move |q| q.cancel(job_id)).await
    }

    /// See [`Queue::requeue_dead`].
    pub async fn requeue_dead(&self, id: i64) -> Result<i64> {
        self.run(move |q| q.requeue_dead(id)).await
    }

    /// See [`Queue::try_lead`].
    pub async fn try_lead(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Leadership>> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.run(move |q| q.try_lead(&name, &holder, ttl)).await
    }

    /// See [`Queue::resign`].
    pub async fn resign(&self, lead: Leadership) -> Result<bool> {
        self.run(move |q| q.resign(&lead)).await
    }
}

/// Gives claimed jobs back at once (attempt not counted). Best effort: a failed release leaves the
/// job to its lease expiry.
fn release_all(q: &Queue, jobs: Vec<Job>) {
    for job in jobs {
        let _ = q.release(job.lease, Duration::ZERO);
    }
}

/// The receiving end of a claim, which releases the claim if the future is dropped after the
/// answer was sent but before it was read (the sender cannot see that drop).
struct ClaimAnswer {
    rx: Option<tokio::sync::oneshot::Receiver<Result<Vec<Job>>>>,
    queue: Queue,
}

impl Drop for ClaimAnswer {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        // After close, a claim still running finds the channel shut and releases by itself; one
        // already sent is read here.
        rx.close();
        if let Ok(Ok(jobs)) = rx.try_recv()
            && !jobs.is_empty()
        {
            let q = self.queue.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(move || release_all(&q, jobs))),
                Err(_) => release_all(&q, jobs),
            }
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}
