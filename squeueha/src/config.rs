//! Queue configuration: durability, contention, retries, limits and housekeeping.

use std::time::Duration;

/// SQLite's `synchronous` setting. In WAL mode `Normal` loses at most the last transactions on power
/// loss (never corrupts); `Full` also survives power loss at the cost of an fsync per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `PRAGMA synchronous=NORMAL` (default).
    #[default]
    Normal,
    /// `PRAGMA synchronous=FULL`.
    Full,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// How long a dedup key (or payload hash) keeps refusing duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupWindow {
    /// A key is remembered forever (until [`Queue::purge_dedup`](crate::Queue::purge_dedup)).
    Permanent,
    /// A key is remembered for this long after the first enqueue; afterwards the same key enqueues a
    /// new job.
    Window(Duration),
}

impl Default for DedupWindow {
    fn default() -> Self {
        DedupWindow::Window(Duration::from_secs(24 * 3600))
    }
}

/// Backoff applied by [`Queue::nack`](crate::Queue::nack) when the caller gives none:
/// `base * 2^(attempts-1)`, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBackoff {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl RetryBackoff {
    /// The delay after `attempts` failed attempts (1-based).
    pub fn delay(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(30);
        self.base
            .checked_mul(1u32 << shift)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

/// Everything configurable about a [`Queue`](crate::Queue). `Config::default()` is a sound production
/// setting: WAL, `synchronous=NORMAL`, 8 connections, 50/100/200/400/800 ms busy backoff.
#[derive(Debug, Clone)]
pub struct Config {
    /// Durability of commits.
    pub synchronous: Synchronous,
    /// Connections in the pool.
    pub pool_size: u32,
    /// SQLite's own busy wait per statement before our backoff takes over.
    pub busy_timeout: Duration,
    /// Sleeps between retries of a transaction that met `SQLITE_BUSY`; its length is the retry count.
    pub busy_backoff: Vec<Duration>,
    /// Attempts before a job goes to the dead-letter table, when the job does not set its own.
    pub default_max_attempts: u32,
    /// Backoff used by `nack` without an explicit delay.
    pub retry_backoff: RetryBackoff,
    /// Largest payload accepted by `enqueue`.
    pub max_payload_bytes: usize,
    /// How long dedup keys refuse duplicates.
    pub dedup_window: DedupWindow,
    /// Keep acked jobs (state `Done`) this long so they can still be looked up; `None` deletes them at ack.
    pub retain_done: Option<Duration>,
    /// `PRAGMA journal_size_limit`: the WAL file is truncated to this size after a checkpoint.
    pub journal_size_limit: u64,
    /// How often a writer also runs housekeeping: a passive WAL checkpoint, purge of retained jobs and
    /// expired dedup keys.
    pub maintenance_interval: Duration,
    /// `Some(period)`: a background thread checkpoints the WAL (PASSIVE, never blocking writers) at
    /// least every `period` while it has frames, and sooner once it exceeds `checkpoint_wal_bytes`;
    /// commits never checkpoint inline, so no enqueue or claim pays for a checkpoint's copy and fsync.
    /// `None`: SQLite's automatic checkpoint on commit (1000 pages).
    pub checkpoint_interval: Option<Duration>,
    /// WAL size that triggers a background checkpoint before `checkpoint_interval` is up (64 MiB:
    /// a hot page rewritten by many commits is copied once per checkpoint, so a larger bound costs
    /// fewer copies; 16 MiB measured a 4-worker drain 5 % slower on 2 cores).
    pub checkpoint_wal_bytes: u64,
    /// Group commit: threads writing through one `Queue` at the same time share a commit (each
    /// in a savepoint; each returns only after the commit holding its operation). Off by default:
    /// measured on a quiet 2-core VM it made a 4-worker drain slower (0.53–0.57× the raw ceiling
    /// against 0.67–0.75× off); under heavy CPU load it was faster (median 1.2×). The environment
    /// variable `SQUEUEHA_GROUP_COMMIT=on|off` overrides this when a queue opens.
    pub group_commit: bool,
    /// How often a consumer waiting for work looks again when nothing woke it (work from another
    /// process whose wake-up was lost, or with `cross_process_wakeup` off). At least 1 ms.
    pub idle_poll: Duration,
    /// Wake consumers in other processes on this machine at once when work is committed (a
    /// datagram socket per open queue in a directory beside the database, `FILE.wake/`); off,
    /// they notice it within `idle_poll`.
    pub cross_process_wakeup: bool,
    /// PostgreSQL: how many of the caller's statements ([`QueueTx::execute`](crate::QueueTx::execute),
    /// [`Queue::query`](crate::Queue::query)) each pooled connection keeps prepared, by their
    /// text (the queue's own are always kept). A statement prepared once then runs in one round
    /// trip instead of two. When the cache is full it starts again empty; a statement that fails
    /// is prepared again next time (after DDL changed its table, say). 0: every call prepares.
    /// Default 256. SQLite's connections cache their statements anyway.
    pub caller_statement_cache: usize,
}

impl Config {
    /// What a nack does to a job that has had `attempts` of its `max_attempts`: `None`, it goes to
    /// the dead letters; `Some(ms)`, it is retried after that delay (`delay_ms` when the caller
    /// gave one, else [`RetryBackoff::delay`]). The same rule on every backend.
    pub(crate) fn nack_delay(
        &self,
        attempts: u32,
        max_attempts: u32,
        delay_ms: Option<i64>,
    ) -> Option<crate::job::Millis> {
        (attempts < max_attempts).then(|| {
            delay_ms.unwrap_or_else(|| crate::job::millis(self.retry_backoff.delay(attempts)))
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            synchronous: Synchronous::Normal,
            pool_size: 8,
            busy_timeout: Duration::from_millis(1000),
            busy_backoff: [50, 100, 200, 400, 800, 1600, 3200]
                .iter()
                .map(|ms| Duration::from_millis(*ms))
                .collect(),
            default_max_attempts: 5,
            retry_backoff: RetryBackoff::default(),
            max_payload_bytes: 16 * 1024 * 1024,
            dedup_window: DedupWindow::default(),
            retain_done: None,
            journal_size_limit: 16 * 1024 * 1024,
            maintenance_interval: Duration::from_secs(30),
            checkpoint_interval: Some(Duration::from_secs(5)),
            checkpoint_wal_bytes: 64 * 1024 * 1024,
            group_commit: false,
            idle_poll: Duration::from_millis(200),
            cross_process_wakeup: true,
            caller_statement_cache: 256,
        }
    }
}
