//! The SQLite backend (the `storage::Storage` seam's implementation): a pool of WAL connections,
//! busy retries with backoff, and housekeeping.

pub(crate) mod ops;
pub(crate) mod schema;
pub(crate) mod state;
pub(crate) mod writer;

use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use self::writer::{Writer, WriterSlot};

use crate::config::{Config, DedupWindow};
use crate::error::{Error, Result, is_busy_sqlite};
use crate::job::{Millis, millis, now_ms};
use crate::storage::MaintenanceReport;

pub(crate) struct SqliteStore {
    pool: Pool<SqliteConnectionManager>,
    pub(crate) cfg: Config,
    path: PathBuf,
    last_maintenance: AtomicI64,
    /// This process's one writing connection, with group commit (see `writer`). Writers queue on
    /// its mutex instead of SQLite's busy handler (which sleeps in coarse steps and leaves the lock
    /// idle), and its page cache stays warm because no other connection of this process writes.
    /// Other processes still meet the busy handler and the backoff.
    writer: WriterSlot,
}

/// Job ids reserved from `squeueha_meta.next_job_id` in blocks, so an enqueue does not write the
/// counter page every time. Ids are never reused; a process that dies leaves a gap. A block
/// reserved by a transaction that rolls back is abandoned (the counter did not move).
#[derive(Default)]
pub(crate) struct IdBlock {
    next: i64,
    end: i64,
    reserved_in_open_tx: bool,
    /// Counts reservations, so a group member can tell whether the block came from its own
    /// (rolled back) savepoint.
    generation: u64,
}

const ID_BLOCK: i64 = 1024;

/// Most operations committed together (bounds how long the first of a group waits for its commit).
const MAX_GROUP: usize = 32;

impl IdBlock {
    /// The first of `count` consecutive fresh ids.
    pub(crate) fn take(&mut self, conn: &Connection, count: i64) -> Result<i64> {
        if self.end - self.next < count {
            let size = count.max(ID_BLOCK);
            let start: i64 = conn
                .prepare_cached(
                    "UPDATE squeueha_meta SET value = value + ?1 WHERE key = 'next_job_id'
                     RETURNING value - ?1",
                )?
                .query_row([size], |r| r.get(0))?;
            self.next = start;
            self.end = start + size;
            self.reserved_in_open_tx = true;
            self.generation += 1;
        }
        let first = self.next;
        self.next += count;
        Ok(first)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn committed(&mut self) {
        self.reserved_in_open_tx = false;
    }

    pub(crate) fn rolled_back(&mut self) {
        if self.reserved_in_open_tx {
            *self = IdBlock {
                generation: self.generation + 1,
                ..IdBlock::default()
            };
        }
    }
}

fn apply_pragmas(conn: &Connection, cfg: &Config) -> rusqlite::Result<()> {
    conn.busy_timeout(cfg.busy_timeout)?;
    conn.pragma_update(None, "synchronous", cfg.synchronous.pragma_value())?;
    conn.pragma_update(None, "journal_size_limit", cfg.journal_size_limit as i64)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    if cfg.checkpoint_interval.is_some() {
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    }
    conn.set_prepared_statement_cache_capacity(64);
    // Plans must not depend on bound values: without this, the bundled SQLite (STAT4) expires
    // the claim statement whenever `LIMIT ?` is rebound and re-prepares it on every claim
    // (about 10 % of the CPU of a busy pipeline). squeueha's plans never depend on values: its
    // partial indexes are selected by literals.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// Maps an error met while opening `path` to the typed error naming that path.
fn open_error(path: &Path, e: rusqlite::Error) -> Error {
    match Error::from(e) {
        Error::NotADatabase { .. } => Error::NotADatabase {
            path: path.to_owned(),
        },
        Error::CannotOpen { reason, .. } => Error::CannotOpen {
            path: path.to_owned(),
            reason,
        },
        other => other,
    }
}

impl SqliteStore {
    pub(crate) fn open(path: &Path, cfg: Config) -> Result<Self> {
        if cfg.pool_size == 0 {
            return Err(Error::InvalidArgument(
                "pool_size must be at least 1".into(),
            ));
        }
        // Validate with one plain connection first: r2d2 would turn every failure into a timeout.
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| open_error(path, e))?;
        apply_pragmas(&conn, &cfg).map_err(|e| open_error(path, e))?;
        conn.set_prepared_statement_cache_capacity(128);
        let mode: String = with_busy_retry(&cfg, || {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                .map_err(|e| open_error(path, e))
        })?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::WalUnavailable { mode });
        }
        with_busy_retry(&cfg, || {
            schema::migrate(&mut conn).map_err(|e| match e {
                Error::Sqlite(s) => open_error(path, s),
                other => other,
            })
        })?;

        // `SQUEUEHA_GROUP_COMMIT=on|off` overrides the configuration (benches compare both).
        let grouped = match std::env::var("SQUEUEHA_GROUP_COMMIT").as_deref() {
            Ok("off" | "0") => false,
            Ok("on" | "1") => true,
            _ => cfg.group_commit,
        };
        let max_group = if grouped { MAX_GROUP } else { 1 };
        let init_cfg = cfg.clone();
        let manager =
            SqliteConnectionManager::file(path).with_init(move |c| apply_pragmas(c, &init_cfg));
        let pool = Pool::builder()
            .max_size(cfg.pool_size)
            .min_idle(Some(1))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)?;
        Ok(SqliteStore {
            pool,
            cfg,
            path: path.to_owned(),
            last_maintenance: AtomicI64::new(now_ms()),
            writer: WriterSlot::new(conn, max_group),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The writing connection with no group transaction open on it.
    pub(crate) fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.exclusive()
    }

    /// Connections the reading pool holds open.
    #[cfg(test)]
    pub(crate) fn pooled_connections(&self) -> u32 {
        self.pool.state().connections
    }

    #[cfg(test)]
    pub(crate) fn writer_slot(&self) -> &WriterSlot {
        &self.writer
    }

    pub(crate) fn conn(&self) -> Result<PooledConnection<SqliteConnectionManager>> {
        Ok(self.pool.get()?)
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction, shared with other threads' writes (group
    /// commit, see `writer`), retried with backoff while the database is busy; returns once that
    /// transaction committed. `f` may run more than once, always against a state without its
    /// earlier runs.
    pub(crate) fn write<T>(&self, mut f: impl FnMut(&Connection) -> Result<T>) -> Result<T> {
        self.write_ids(|conn, _| f(conn))
    }

    /// Like `write`, for operations that create jobs and need fresh ids.
    pub(crate) fn write_ids<T>(
        &self,
        mut f: impl FnMut(&Connection, &mut IdBlock) -> Result<T>,
    ) -> Result<T> {
        let out = self.writer.write(&self.cfg, &mut f)?;
        self.maybe_maintain();
        Ok(out)
    }

    /// Runs `f` in a read (deferred) transaction, retried while busy.
    pub(crate) fn read<T>(&self, mut f: impl FnMut(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.conn()?;
        with_busy_retry(&self.cfg, || {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let value = f(&tx)?;
            tx.commit()?;
            Ok(value)
        })
    }

    /// Housekeeping, at most once per `maintenance_interval` across all connections of this store.
    fn maybe_maintain(&self) {
        let now = now_ms();
        let last = self.last_maintenance.load(Ordering::Relaxed);
        if now - last < millis(self.cfg.maintenance_interval)
            || self
                .last_maintenance
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Housekeeping is best effort: a busy database simply postpones it to the next interval.
        let writer = self.writer();
        let _ = self.maintain_on(&writer.conn, now);
    }

    pub(crate) fn maintain_on(&self, conn: &Connection, now: Millis) -> Result<MaintenanceReport> {
        let mut report = MaintenanceReport::default();
        if let Some(keep) = self.cfg.retain_done {
            report.purged_done = ops::purge_done(conn, now - millis(keep))?;
        }
        if let DedupWindow::Window(w) = self.cfg.dedup_window {
            report.purged_dedup = ops::purge_dedup(conn, now - millis(w))?;
        }
        // PASSIVE never blocks writers; journal_size_limit truncates the file afterwards.
        let (_, log, done): (i64, i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        report.wal_pages = log.max(0) as u64;
        report.checkpointed_pages = done.max(0) as u64;
        Ok(report)
    }
}

impl SqliteStore {
    /// One passive checkpoint on a pooled (non-writer) connection: copies committed WAL frames into
    /// the database while writers carry on appending.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let conn = self.conn()?;
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        Ok(())
    }
}

/// Retries `f` while SQLite reports BUSY/LOCKED, sleeping `cfg.busy_backoff[i]` between attempts.
pub(crate) fn with_busy_retry<T>(cfg: &Config, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempt = 0usize;
    loop {
        match f() {
            Err(e) if is_busy(&e) => {
                let Some(sleep) = cfg.busy_backoff.get(attempt) else {
                    return Err(Error::Busy {
                        attempts: attempt as u32 + 1,
                    });
                };
                std::thread::sleep(*sleep);
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn is_busy(e: &Error) -> bool {
    match e {
        Error::Sqlite(s) => is_busy_sqlite(s),
        _ => false,
    }
}
pub(crate) mod storage;
