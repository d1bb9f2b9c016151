//! The blocking queue handle.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{DeadJob, Enqueued, Job, JobInfo, Lease, Millis, Nacked, NewJob, millis, now_ms};
use crate::leader::Leadership;
#[cfg(feature = "tokio")]
use crate::notify::Signal;
use crate::notify::Signals;
use crate::sqlite::SqliteStore;
use crate::stats::QueueStats;
use crate::storage::{AckReport, MaintenanceReport, Storage};
use crate::tx::{QueueTx, SqliteTx};

/// A handle on a queue database. Cheap to clone; clones share the connection pool and the in-process
/// wake-up signals. Every method is atomic and safe to call from many threads and processes at
/// once; a write is committed when it returns. Writes of concurrent threads share commits (group
/// commit: each in a savepoint of its own, so one failing rolls back only itself).
///
/// Delivery is **at least once**: a job whose lease expires before it is acked (the worker crashed or
/// was too slow) is delivered again, so handlers must be idempotent or deduplicate by job id.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

/// The storage behind a queue.
enum Backend {
    Sqlite(SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgStore),
}

impl Backend {
    fn sqlite(&self) -> Option<&SqliteStore> {
        match self {
            Backend::Sqlite(store) => Some(store),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }
}

struct Inner {
    backend: Backend,
    signals: Signals,
    token_seed: RandomState,
    token_counter: AtomicU64,
    idle_poll: Duration,
    /// Tells consumers in other processes about committed work (`Config::cross_process_wakeup`).
    wake: std::sync::OnceLock<Arc<crate::wake::Wake>>,
}

/// `now + timeout`, saturating (a `Duration::MAX` timeout means "wait as long as it takes").
pub(crate) fn far_deadline(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Checkpoints the WAL off the write path until the last handle of the queue is dropped: when the
/// WAL passes `max_bytes`, or `every` after the last one. Checkpointing rarely saves work: a page
/// rewritten many times in between is copied once.
fn spawn_checkpointer(
    inner: Weak<Inner>,
    every: Duration,
    max_bytes: u64,
    wal: std::path::PathBuf,
) {
    const TICK: Duration = Duration::from_millis(100);
    let spawned = std::thread::Builder::new()
        .name("squeueha-checkpoint".into())
        .spawn(move || {
            let mut last = Instant::now();
            loop {
                std::thread::sleep(TICK.min(every));
                // journal_size_limit truncates the WAL after a checkpoint, so its size tells growth.
                let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
                let due = size > max_bytes || (last.elapsed() >= every && size > 0);
                if !due {
                    if inner.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                // Best effort: a busy or failing checkpoint is retried at the next tick.
                if let Some(store) = inner.backend.sqlite() {
                    let _ = store.checkpoint();
                }
                last = Instant::now();
            }
        });
    // Without the thread, commits still work; the WAL then only shrinks at `maintain()`. Rare enough
    // (thread creation failing) not to refuse the open.
    drop(spawned);
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner.backend {
            Backend::Sqlite(store) => f
                .debug_struct("Queue")
                .field("path", &store.path())
                .finish(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => f
                .debug_struct("Queue")
                .field("postgres", &store.target)
                .finish(),
        }
    }
}

impl Queue {
    /// Opens (or creates) the queue database at `path` with the default [`Config`].
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_with(path, Config::default())
    }

    /// Opens (or creates) the queue database at `path`: verifies WAL mode from the PRAGMA's answer,
    /// applies pending schema migrations, and builds the connection pool.
    ///
    /// A `postgres://` (or `postgresql://`) URL instead of a path opens a PostgreSQL queue, as
    /// [`open_postgres`](Self::open_postgres) does (feature `postgres`; without it such a URL is
    /// refused with [`Error::Unsupported`]).
    pub fn open_with(path: impl AsRef<Path>, config: Config) -> Result<Queue> {
        if let Some(url) = path.as_ref().to_str()
            && (url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            #[cfg(feature = "postgres")]
            return Queue::open_postgres(url, config);
            #[cfg(not(feature = "postgres"))]
            return Err(Error::Unsupported {
                backend: "sqlite",
                what: "a postgres:// URL (build squeueha with the feature `postgres`)",
            });
        }
        let checkpoint_every = config.checkpoint_interval;
        let checkpoint_bytes = config.checkpoint_wal_bytes;
        let idle_poll = config.idle_poll.max(Duration::from_millis(1));
        let cross_process = config.cross_process_wakeup;
        let mut wal = path.as_ref().as_os_str().to_owned();
        wal.push("-wal");
        let store = SqliteStore::open(path.as_ref(), config)?;
        let inner = Arc::new(Inner {
            backend: Backend::Sqlite(store),
            signals: Signals::default(),
            token_seed: RandomState::new(),
            token_counter: AtomicU64::new(0),
            idle_poll,
            wake: std::sync::OnceLock::new(),
        });
        if cross_process {
            let weak = Arc::downgrade(&inner);
            let heard = move |queue: &str| match weak.upgrade() {
                Some(inner) => {
                    inner.signals.notify(queue);
                    true
                }
                None => false,
            };
            if let Some(wake) = crate::wake::Wake::start(&crate::wake::dir_of(path.as_ref()), heard)
            {
                let _ = inner.wake.set(wake);
            }
        }
        if let Some(every) = checkpoint_every {
            spawn_checkpointer(Arc::downgrade(&inner), every, checkpoint_bytes, wal.into());
        }
        Ok(Queue { inner })
    }

    /// Opens a queue on the PostgreSQL database at `url` (`postgres://user:password@host:port/db`;
    /// a `?options=-c%20search_path%3Dmy_schema` suffix puts its tables in another schema):
    /// applies pending schema migrations, builds the connection pool (`config.pool_size`
    /// connections) and keeps one more connection listening for other nodes' enqueues
    /// (`LISTEN/NOTIFY`), so that waiting consumers wake without a poll interval (`idle_poll` stays
    /// the fallback while that connection is down). SQLite's settings of `config` (synchronous,
    /// WAL, busy timeout, checkpoints, group commit, `cross_process_wakeup`: NOTIFY does that
    /// job) do not apply; `busy_backoff` paces retries after a deadlock.
    #[cfg(feature = "postgres")]
    pub fn open_postgres(url: &str, config: Config) -> Result<Queue> {
        let idle_poll = config.idle_poll.max(Duration::from_millis(1));
        let store = crate::postgres::PgStore::open(url, config)?;
        let listen = store.pg_config.clone();
        let origin = store.origin.clone();
        let inner = Arc::new(Inner {
            backend: Backend::Postgres(store),
            signals: Signals::default(),
            token_seed: RandomState::new(),
            token_counter: AtomicU64::new(0),
            idle_poll,
            // NOTIFY reaches every node; the machine-local datagrams are SQLite's.
            wake: std::sync::OnceLock::new(),
        });
        let weak = Arc::downgrade(&inner);
        crate::postgres::spawn_listener(listen, move |heard| {
            let Some(inner) = weak.upgrade() else {
                return false;
            };
            match heard {
                crate::postgres::Heard::Listening => inner.signals.notify_all(),
                crate::postgres::Heard::Queue(payload) => {
                    if let Some(queue) = crate::postgres::foreign_queue(payload, &origin) {
                        inner.signals.notify(queue);
                    }
                }
                crate::postgres::Heard::Idle => {}
            }
            true
        });
        Ok(Queue { inner })
    }

    fn storage(&self) -> &dyn Storage {
        match &self.inner.backend {
            Backend::Sqlite(store) => store,
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store,
        }
    }

    fn sqlite(&self, what: &'static str) -> Result<&SqliteStore> {
        self.inner.backend.sqlite().ok_or(Error::Unsupported {
            backend: "postgres",
            what,
        })
    }

    /// Committed work for `queue`: wakes its consumers here and in other processes.
    fn work_for(&self, queue: &str) {
        self.inner.signals.notify(queue);
        if let Some(wake) = self.inner.wake.get() {
            wake.announce(queue);
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        match &self.inner.backend {
            Backend::Sqlite(store) => &store.cfg,
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => &store.cfg,
        }
    }

    /// The database file (empty for a PostgreSQL queue).
    pub fn path(&self) -> &Path {
        match &self.inner.backend {
            Backend::Sqlite(store) => store.path(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Path::new(""),
        }
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match &self.inner.backend {
            Backend::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
        }
    }

    fn new_token(&self) -> i64 {
        let mut h = self.inner.token_seed.build_hasher();
        h.write_u64(self.inner.token_counter.fetch_add(1, Ordering::Relaxed));
        h.write_i64(now_ms());
        h.finish() as i64
    }

    /// Enqueues one job.
    pub fn enqueue(&self, queue: &str, job: NewJob) -> Result<Enqueued> {
        let out = self.enqueue_batch(queue, std::slice::from_ref(&job))?;
        out.into_iter()
            .next()
            .ok_or_else(|| Error::InvalidArgument("empty enqueue".into()))
    }

    /// Enqueues many jobs in one transaction: all or none.
    pub fn enqueue_batch(&self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = self.storage().enqueue(queue, jobs)?;
        if out.iter().any(|e| e.is_new()) {
            self.work_for(queue);
        }
        Ok(out)
    }

    /// Claims up to `n` visible jobs, highest priority first, then oldest, in one `BEGIN IMMEDIATE`
    /// transaction. They stay invisible to other consumers for `visibility`; each carries the lease
    /// needed to ack it. Returns an empty vector when nothing is ready.
    pub fn poll_batch(&self, queue: &str, n: usize, visibility: Duration) -> Result<Vec<Job>> {
        let token = self.new_token();
        self.storage().claim(queue, n, millis(visibility), token)
    }

    /// Like [`poll_batch`](Self::poll_batch), but waits up to `timeout` for work: an enqueue in this
    /// process wakes it at once; delayed jobs and expired leases wake it when due; work enqueued by
    /// other processes on this machine wakes it at once too (`Config::cross_process_wakeup`), and
    /// is noticed within `Config::idle_poll` otherwise.
    pub fn poll_batch_wait(
        &self,
        queue: &str,
        n: usize,
        visibility: Duration,
        timeout: Duration,
    ) -> Result<Vec<Job>> {
        let signal = self.inner.signals.get(queue);
        let deadline = far_deadline(Instant::now(), timeout);
        loop {
            let seen = signal.generation();
            let jobs = self.poll_batch(queue, n, visibility)?;
            if !jobs.is_empty() {
                return Ok(jobs);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(jobs);
            }
            let wake = self.next_wake(queue, now, deadline)?;
            signal.wait_past(seen, wake);
        }
    }

    pub(crate) fn next_wake(
        &self,
        queue: &str,
        now: Instant,
        deadline: Instant,
    ) -> Result<Instant> {
        let mut wake = (now + self.inner.idle_poll).min(deadline);
        if let Some(due) = self.storage().next_due(queue)? {
            let in_ms = (due - now_ms()).max(0) as u64;
            wake = wake.min(now + Duration::from_millis(in_ms));
        }
        Ok(wake)
    }

    /// The wake-up signal of `queue` (the async API's watchers subscribe to it).
    #[cfg(feature = "tokio")]
    pub(crate) fn signal(&self, queue: &str) -> Arc<Signal> {
        self.inner.signals.get(queue)
    }

    /// Completes a job. Fails with [`Error::StaleLease`] when the lease is no longer the job's
    /// current one (it expired and the job was claimed again, or it was already acked).
    pub fn ack(&self, lease: Lease) -> Result<()> {
        let report = self.storage().ack(std::slice::from_ref(&lease))?;
        if report.acked == 1 {
            Ok(())
        } else {
            Err(Error::StaleLease {
                job_id: lease.job_id,
            })
        }
    }

    /// Completes many jobs in one transaction; stale leases are reported, not fatal.
    pub fn ack_batch(&self, leases: &[Lease]) -> Result<AckReport> {
        self.storage().ack(leases)
    }

    /// Acks `leases` and claims the next batch in one transaction: a worker's loop pays one commit per
    /// batch instead of two. If the transaction fails, neither happened.
    pub fn ack_and_poll(
        &self,
        leases: &[Lease],
        queue: &str,
        n: usize,
        visibility: Duration,
    ) -> Result<(AckReport, Vec<Job>)> {
        let token = self.new_token();
        self.storage()
            .ack_and_claim(leases, queue, n, millis(visibility), token)
    }

    /// Gives a job back after a failure, recording `error`. The attempt counts: when the job has used
    /// its attempts it moves to the dead-letter table, otherwise it becomes visible again after
    /// `delay`, or after the configured exponential backoff when `delay` is `None`.
    pub fn nack(&self, lease: Lease, error: &str, delay: Option<Duration>) -> Result<Nacked> {
        let out = self.storage().nack(lease, error, delay.map(millis))?;
        self.wake_if_ready(&out, lease);
        Ok(out)
    }

    fn wake_if_ready(&self, out: &Nacked, lease: Lease) {
        if let Nacked::Retry { at } = out
            && *at <= now_ms()
            && let Ok(Some(info)) = self.storage().get(lease.job_id)
        {
            self.work_for(&info.queue);
        }
    }

    /// Gives a job back without counting the attempt (the failure was not the job's: its server was
    /// down, the worker is shutting down). Visible again after `delay`.
    pub fn release(&self, lease: Lease, delay: Duration) -> Result<()> {
        self.storage().release(lease, millis(delay))?;
        if delay.is_zero()
            && let Ok(Some(info)) = self.storage().get(lease.job_id)
        {
            self.work_for(&info.queue);
        }
        Ok(())
    }

    /// Extends a lease (heartbeat): the job stays invisible for `visibility` from now.
    /// Returns the new expiry.
    pub fn extend(&self, lease: Lease, visibility: Duration) -> Result<Millis> {
        self.storage().extend(lease, millis(visibility))
    }

    /// Sends a claimed job straight to the dead-letter table with `reason` (a poison job, say).
    pub fn bury(&self, lease: Lease, reason: &str) -> Result<()> {
        self.storage().bury(lease, reason)
    }

    /// Looks a job up by id, whatever its state (ready, in flight, delayed, retained, dead).
    /// `None` when it never existed or was acked and not retained.
    pub fn get(&self, id: i64) -> Result<Option<JobInfo>> {
        self.storage().get(id)
    }

    /// Dead letters of `queue`, oldest death first.
    pub fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
        self.storage()
            .list_dead(queue, (Millis::MIN, i64::MIN), limit)
    }

    /// The newest `limit` dead letters of `queue`, newest death first (a status page's view;
    /// reads only those rows).
    pub fn newest_dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
        self.storage().list_dead_newest(queue, limit)
    }

    /// Dead letters of `queue` that died after `after`, a `(died_at, id)` cursor, oldest death
    /// first: pass the last one read (`(d.died_at, d.id)`) to page on, or a time to read only
    /// what died since (`(t, i64::MIN)`). Reads only those rows, whatever the table's size.
    pub fn dead_letters_after(
        &self,
        queue: &str,
        after: (Millis, i64),
        limit: usize,
    ) -> Result<Vec<DeadJob>> {
        self.storage().list_dead(queue, after, limit)
    }

    /// The dead letter of the job that had id `id` (in any queue), or `None`: to see what a job
    /// was about before requeueing it.
    pub fn dead_letter(&self, id: i64) -> Result<Option<DeadJob>> {
        self.storage().get_dead(id)
    }

    /// Moves a dead letter back into its queue as a new job with fresh attempts; returns its new id.
    pub fn requeue_dead(&self, id: i64) -> Result<i64> {
        let new_id = self.storage().requeue_dead(id)?;
        if let Ok(Some(info)) = self.storage().get(new_id) {
            self.work_for(&info.queue);
        }
        Ok(new_id)
    }

    /// Cancels a job that has not started: a ready or delayed job is deleted and never delivered
    /// (true). A job in flight is left to its holder, and a finished, dead or unknown one has
    /// nothing to cancel (false).
    pub fn cancel(&self, job_id: i64) -> Result<bool> {
        self.storage().cancel(job_id)
    }

    /// Deletes dead letters of `queue` that died more than `older_than` ago (all when `None`).
    pub fn purge_dead(&self, queue: &str, older_than: Option<Duration>) -> Result<usize> {
        self.storage()
            .purge_dead(queue, older_than.map(|d| now_ms() - millis(d)))
    }

    /// Deletes retained finished jobs older than `older_than`.
    pub fn purge_done(&self, older_than: Duration) -> Result<usize> {
        self.storage().purge_done(now_ms() - millis(older_than))
    }

    /// Forgets dedup keys older than `older_than` (the only way to forget them with
    /// [`DedupWindow::Permanent`](crate::DedupWindow::Permanent)).
    pub fn purge_dedup(&self, older_than: Duration) -> Result<usize> {
        self.storage().purge_dedup(now_ms() - millis(older_than))
    }

    /// Counts of `queue`'s jobs by state.
    pub fn stats(&self, queue: &str) -> Result<QueueStats> {
        self.storage().stats(queue)
    }

    /// Stats of every queue that has jobs or dead letters.
    pub fn all_stats(&self) -> Result<Vec<QueueStats>> {
        self.storage()
            .queues()?
            .iter()
            .map(|q| self.storage().stats(q))
            .collect()
    }

    /// Runs housekeeping now: WAL checkpoint, retention, dedup expiry. Writers also run it on their
    /// own every [`Config::maintenance_interval`].
    pub fn maintain(&self) -> Result<MaintenanceReport> {
        self.storage().maintain()
    }

    /// Becomes (or stays) the leader of election `name` for `ttl` if nobody else holds an unexpired
    /// leadership. Renew by calling again before `expires_at`; the fencing token stays the same while
    /// the same holder renews, and increases when leadership changes hands.
    pub fn try_lead(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Leadership>> {
        if name.is_empty() || holder.is_empty() {
            return Err(Error::InvalidArgument(
                "election name and holder must not be empty".into(),
            ));
        }
        self.storage().try_lead(name, holder, millis(ttl))
    }

    /// Gives leadership up at once so another candidate can take over without waiting for the lease.
    pub fn resign(&self, lead: &Leadership) -> Result<bool> {
        self.storage().resign(lead)
    }

    /// The current, unexpired leader of `name`.
    pub fn leader(&self, name: &str) -> Result<Option<Leadership>> {
        self.storage().leader(name)
    }

    /// Runs a read-only query of the caller's on either backend (SQL with `?1`-style
    /// placeholders, see [`QueueTx::execute`]): on SQLite through the reader pool, never waiting
    /// for writers; on PostgreSQL on a pooled connection, retried on another one when the server
    /// closed it. Change nothing through it: writes go through [`transaction`](Self::transaction).
    pub fn query(&self, sql: &str, params: &[crate::Value]) -> Result<Vec<crate::Row>> {
        match &self.inner.backend {
            Backend::Sqlite(store) => store.read(|c| crate::sql::sqlite_query(c, sql, params)),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => {
                store.auto(|ctx| crate::postgres::sql_query(ctx, sql, params))
            }
        }
    }

    /// The first row of [`query`](Self::query), if any.
    pub fn query_opt(&self, sql: &str, params: &[crate::Value]) -> Result<Option<crate::Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Runs `f` in a read transaction on one of the pool's connections (kept open between calls,
    /// with their prepared-statement caches), for reading the caller's own tables in the queue's
    /// file without opening a connection per call. Readers never wait for writers (WAL): `f` sees
    /// the last commit before it started. Retried while the database is busy, so `f` may run more
    /// than once. Change nothing through it: writes go through [`transaction`](Self::transaction).
    ///
    /// SQLite only: on PostgreSQL it fails with [`Error::Unsupported`] (read through your own
    /// client or [`pg_transaction`](Self::pg_transaction)).
    pub fn read<T>(&self, mut f: impl FnMut(&rusqlite::Connection) -> Result<T>) -> Result<T> {
        self.sqlite("Queue::read (a SQLite connection)")?
            .read(|tx| f(tx))
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction of the SQLite backend, so that queue operations
    /// and the caller's own tables change atomically (fan-in: record a result, ack the fragment and
    /// enqueue the next stage together). If `f` fails, nothing it did is kept; returns once the
    /// commit holding it succeeded.
    ///
    /// With group commit on, `f` shares the transaction of other threads' writes like every other
    /// operation (in a savepoint of its own: its failure rolls back only itself). So `f` may run
    /// more than once — when the shared commit fails, each member runs again alone — always against
    /// a state without its earlier runs: keep side effects outside the database out of it.
    ///
    /// Inside `f`, use only `tx`: calling this `Queue`'s own methods there would wait for the very
    /// transaction that is running (this process's writes go through one connection).
    ///
    /// On PostgreSQL `f` runs in one transaction of a pooled connection, and runs again after a
    /// deadlock or serialization failure. The caller's SQL goes through [`QueueTx::execute`] and
    /// [`QueueTx::query`], which take the same text on both backends.
    pub fn transaction<T, E: From<Error>>(
        &self,
        mut f: impl FnMut(&mut QueueTx<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        #[cfg(feature = "postgres")]
        if let Backend::Postgres(_) = &self.inner.backend {
            return self.pg_transaction(|pg| f(&mut QueueTx::new(pg)));
        }
        let store = self.sqlite("Queue::transaction")?;
        let token = self.new_token();
        let cfg = self.config();
        // The caller's own error, kept aside while the writer rolls its savepoint back.
        let mut failed: Option<E> = None;
        let mut touched = Vec::new();
        let out = store.write_ids(|conn, ids| {
            let mut sqlite_tx = SqliteTx::new(conn, ids, cfg, token);
            match f(&mut QueueTx::new(&mut sqlite_tx)) {
                Ok(value) => {
                    touched = sqlite_tx.into_touched();
                    failed = None;
                    Ok(value)
                }
                Err(e) => {
                    failed = Some(e);
                    // Never busy, so never retried: the caller's error ends the call.
                    Err(Error::TransactionAborted)
                }
            }
        });
        match out {
            Ok(value) => {
                for queue in touched {
                    self.work_for(&queue);
                }
                Ok(value)
            }
            Err(e) => Err(failed.take().unwrap_or_else(|| E::from(e))),
        }
    }
}

#[cfg(feature = "postgres")]
impl Queue {
    /// Runs `f` in one PostgreSQL transaction, so that queue operations (through
    /// [`PgQueueTx`](crate::PgQueueTx)) and the caller's own tables (through
    /// [`PgQueueTx::client`](crate::PgQueueTx::client)) change atomically: the PostgreSQL
    /// counterpart of [`transaction`](Self::transaction). If `f` fails, nothing it did is kept.
    /// After a deadlock or serialization failure the whole transaction runs again, so `f` may run
    /// more than once: keep side effects outside the database out of it. Fails with
    /// [`Error::Unsupported`] on a SQLite queue.
    pub fn pg_transaction<T, E: From<Error>>(
        &self,
        mut f: impl FnMut(&mut crate::PgQueueTx<'_, '_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let Backend::Postgres(store) = &self.inner.backend else {
            return Err(E::from(Error::Unsupported {
                backend: "sqlite",
                what: "Queue::pg_transaction (use Queue::transaction)",
            }));
        };
        let token = self.new_token();
        let mut failed: Option<E> = None;
        let mut touched = Vec::new();
        let out = store.tx(|ctx| {
            let mut tx = crate::PgQueueTx::new(ctx.reborrow(), &store.cfg, token);
            match f(&mut tx) {
                Ok(value) => {
                    touched = tx.into_touched();
                    failed = None;
                    Ok(value)
                }
                Err(e) => {
                    failed = Some(e);
                    Err(Error::TransactionAborted)
                }
            }
        });
        match out {
            Ok(value) => {
                for queue in touched {
                    self.inner.signals.notify(&queue);
                }
                Ok(value)
            }
            Err(e) => Err(failed.take().unwrap_or_else(|| E::from(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::Queue;
    use crate::config::Config;
    use crate::error::Error;
    use crate::job::NewJob;

    /// A transaction joins the group like any other write: one commit for it and the writes that
    /// queued behind it, and a failing transaction rolls back only itself.
    #[test]
    fn a_transaction_shares_the_group_commit_and_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            group_commit: true,
            ..Config::default()
        };
        let q = Queue::open_with(dir.path().join("q.db"), cfg).unwrap();
        let before = q.sqlite("test").unwrap().writer_slot().commits();
        let inside = Arc::new(AtomicBool::new(false));
        let first = {
            let (q, inside) = (q.clone(), inside.clone());
            std::thread::spawn(move || {
                q.transaction(|tx| -> crate::Result<()> {
                    tx.connection()?
                        .execute_batch("CREATE TABLE IF NOT EXISTS mine (x INTEGER)")?;
                    tx.connection()?
                        .execute("INSERT INTO mine (x) VALUES (1)", [])?;
                    tx.enqueue("t", NewJob::new(b"first".to_vec()))?;
                    // Only the first run waits for the others to queue behind it.
                    if !inside.swap(true, Ordering::SeqCst) {
                        while q.sqlite("test").unwrap().writer_slot().waiting() < 2 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    Ok(())
                })
            })
        };
        while !inside.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let plain = {
            let q = q.clone();
            std::thread::spawn(move || q.enqueue("t", NewJob::new(b"plain".to_vec())))
        };
        let failing = {
            let q = q.clone();
            std::thread::spawn(move || {
                q.transaction(|tx| -> crate::Result<()> {
                    tx.enqueue("t", NewJob::new(b"rolled back".to_vec()))?;
                    Err(Error::InvalidArgument("changed its mind".into()))
                })
            })
        };
        first.join().unwrap().unwrap();
        plain.join().unwrap().unwrap();
        assert!(matches!(
            failing.join().unwrap(),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(
            q.sqlite("test").unwrap().writer_slot().commits() - before,
            1
        );
        assert_eq!(q.stats("t").unwrap().ready, 2);
        let rows: i64 = q
            .transaction(|tx| -> crate::Result<i64> {
                Ok(tx
                    .connection()?
                    .query_row("SELECT count(*) FROM mine", [], |r| r.get(0))?)
            })
            .unwrap();
        assert_eq!(rows, 1);
    }

    /// Reads go through the pool's open connections: many reads, no new connection each.
    #[test]
    fn reads_reuse_the_pools_connections_and_see_committed_rows() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path().join("q.db")).unwrap();
        q.transaction(|tx| -> crate::Result<()> {
            tx.connection()?
                .execute_batch("CREATE TABLE mine (x INTEGER); INSERT INTO mine VALUES (41);")?;
            Ok(())
        })
        .unwrap();
        for _ in 0..200 {
            let x: i64 = q
                .read(|c| {
                    Ok(c.prepare_cached("SELECT x + 1 FROM mine")?
                        .query_row([], |r| r.get(0))?)
                })
                .unwrap();
            assert_eq!(x, 42);
        }
        // The pool's connections stay open and serve every read: never one per call.
        let open = q.sqlite("test").unwrap().pooled_connections();
        assert!(
            open <= q.config().pool_size,
            "{open} connections for 200 sequential reads"
        );
    }
}
