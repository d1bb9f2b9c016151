//! The VRAM lease ledger: one SQLite file (WAL) shared by every process on the
//! machine — inference servers and training jobs alike — recording who holds how much VRAM
//! on which GPU, until when.
//!
//! - `acquire` runs in one `BEGIN IMMEDIATE` transaction (the write lock is taken before
//!   the capacity check), so two processes never over-commit a GPU; a multi-GPU lease
//!   checks and records its parts in GPU index order, all or nothing.
//! - Leases carry an expiry renewed by heartbeat ([`VramLedger::renew`]) and optionally the
//!   owner's pid: a lease whose pid is dead (on this machine) is reclaimed at once, any other
//!   at its expiry. Expired leases are purged before every acquisition.
//! - [`VramLedger::acquire_checked`] also checks the monitor's actual free memory, since
//!   processes outside the ledger use VRAM too.
//!
//! The API is blocking; from async code call it in `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::monitor::{GpuMonitor, MonitorError};

/// Ledger failures.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The GPU has no registered capacity.
    #[error("GPU {0} has no registered capacity")]
    UnknownGpu(u32),
    /// Not enough VRAM left on a GPU (by the ledger or by the monitor's actual free memory).
    #[error("GPU {gpu}: {requested_mb} MB requested, {available_mb} MB available ({by})")]
    Insufficient {
        /// GPU index.
        gpu: u32,
        /// MB requested.
        requested_mb: u64,
        /// MB available.
        available_mb: u64,
        /// `ledger` or `actual` (monitor).
        by: &'static str,
    },
    /// A request with no part, a zero-MB part or the same GPU twice.
    #[error("invalid lease request: {0}")]
    Invalid(&'static str),
    /// The monitor failed.
    #[error("monitor: {0}")]
    Monitor(#[from] MonitorError),
    /// The schema's migration failed.
    #[error("ledger schema: {0}")]
    Schema(#[source] squeueha::Error),
    /// The ledger's tables were written by a newer release whose schema this build does not
    /// know. Nothing was changed.
    #[error("ledger schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// Version found in the file.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
}

/// A request for VRAM on one or more GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// Who holds it (free text: `pool:qwen3-32b`, `train:run-42`).
    pub owner: String,
    /// The owner's pid, so its leases can be reclaimed as soon as it dies.
    pub pid: Option<u32>,
    /// `(gpu, mb)` parts.
    pub parts: Vec<(u32, u64)>,
    /// Time to live; renew before it runs out.
    pub ttl: Duration,
}

/// The longest time to live a lease may ask for (30 days).
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(30 * 86_400);

/// A lease's time to live from seconds as users write them: `None` unless positive, finite and
/// at most [`MAX_LEASE_TTL`].
pub fn lease_ttl(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs > 0.0 && secs <= MAX_LEASE_TTL.as_secs_f64())
        .then(|| Duration::from_secs_f64(secs))
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Lease id (shared by all its parts).
    pub id: String,
    /// Owner.
    pub owner: String,
    /// `(gpu, mb)` parts, in GPU index order.
    pub parts: Vec<(u32, u64)>,
    /// Expiry, milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
}

/// One row of the ledger (one GPU part of a lease).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    /// Lease id.
    pub id: String,
    /// Owner.
    pub owner: String,
    /// Owner pid.
    pub pid: Option<u32>,
    /// GPU index.
    pub gpu: u32,
    /// MB.
    pub mb: u64,
    /// Expiry, ms since the epoch.
    pub expires_at_ms: i64,
}

/// The ledger handle (one SQLite connection; cheap to open one per process or thread).
#[derive(Debug)]
pub struct VramLedger {
    conn: Mutex<Connection>,
    path: PathBuf,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Whether a process exists on this machine (`kill(pid, 0)`).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission checks.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The ledger's tables, versioned by squeueha's migrator (namespace `horos_gpu_alloc`): the one
/// migrator every HOROS crate uses, so a ledger inside a file shared with a queue follows the
/// file's one set of rules. Never edit a released step: append a new one. Version 1 is
/// idempotent, so ledgers written before the schema was versioned are adopted.
const MIGRATIONS: squeueha::Migrations = squeueha::Migrations::new(
    "horos_gpu_alloc",
    &[squeueha::Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS vram_gpus (
    gpu INTEGER PRIMARY KEY,
    capacity_mb INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS vram_leases (
    row_id INTEGER PRIMARY KEY AUTOINCREMENT,
    lease_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    pid INTEGER,
    gpu INTEGER NOT NULL,
    mb INTEGER NOT NULL,
    acquired_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS vram_leases_gpu ON vram_leases(gpu);
CREATE INDEX IF NOT EXISTS vram_leases_lease ON vram_leases(lease_id);",
    }],
);

/// Brings the ledger's tables to this build's schema (one `BEGIN IMMEDIATE` transaction).
fn migrate(conn: &mut Connection) -> Result<(), LedgerError> {
    match MIGRATIONS.apply(conn) {
        Ok(_) => Ok(()),
        Err(squeueha::Error::SchemaTooNew {
            found, supported, ..
        }) => Err(LedgerError::SchemaTooNew { found, supported }),
        Err(e) => Err(LedgerError::Schema(e)),
    }
}

/// A connection to the ledger's file (shared by several processes, and with the
/// [`CostStore`](crate::cost_store::CostStore)): WAL, synchronous NORMAL, 5 s busy timeout.
pub(crate) fn open_file(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

impl VramLedger {
    /// Opens (creating if needed) the ledger file: WAL, 5 s busy timeout. A ledger written by a
    /// newer release is refused with [`LedgerError::SchemaTooNew`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        let mut conn = open_file(&path)?;
        migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers (or updates) a GPU's capacity.
    pub fn set_capacity(&self, gpu: u32, capacity_mb: u64) -> Result<(), LedgerError> {
        self.conn().execute(
            "INSERT INTO vram_gpus (gpu, capacity_mb) VALUES (?1, ?2)
             ON CONFLICT(gpu) DO UPDATE SET capacity_mb = excluded.capacity_mb",
            params![gpu, capacity_mb as i64],
        )?;
        Ok(())
    }

    /// Every registered GPU's capacity, MB.
    pub fn capacities(&self) -> Result<std::collections::BTreeMap<u32, u64>, LedgerError> {
        let conn = self.conn();
        let mut st = conn.prepare("SELECT gpu, capacity_mb FROM vram_gpus ORDER BY gpu")?;
        let rows = st.query_map([], |r| {
            Ok((
                u32::try_from(r.get::<_, i64>(0)?).unwrap_or(u32::MAX),
                r.get::<_, i64>(1)?.max(0) as u64,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Registers every GPU of a monitor with its total memory.
    pub fn register_from(&self, monitor: &dyn GpuMonitor) -> Result<(), LedgerError> {
        for s in monitor.sample()? {
            self.set_capacity(s.index, s.memory_total_mb)?;
        }
        Ok(())
    }

    fn purge(conn: &Connection, now: i64) -> Result<usize, LedgerError> {
        let mut n = conn.execute(
            "DELETE FROM vram_leases WHERE expires_at_ms <= ?1",
            params![now],
        )?;
        let pids: Vec<u32> = {
            let mut st =
                conn.prepare("SELECT DISTINCT pid FROM vram_leases WHERE pid IS NOT NULL")?;
            let rows = st.query_map([], |r| r.get::<_, i64>(0))?;
            rows.filter_map(Result::ok)
                .filter_map(|p| u32::try_from(p).ok())
                .collect()
        };
        for pid in pids.into_iter().filter(|p| !pid_alive(*p)) {
            n += conn.execute("DELETE FROM vram_leases WHERE pid = ?1", params![pid])?;
        }
        Ok(n)
    }

    /// Removes expired leases and leases of dead pids; returns the rows removed.
    pub fn expire(&self) -> Result<usize, LedgerError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = Self::purge(&tx, now_ms())?;
        tx.commit()?;
        Ok(n)
    }

    fn available(conn: &Connection, gpu: u32) -> Result<u64, LedgerError> {
        let cap: Option<i64> = conn
            .query_row(
                "SELECT capacity_mb FROM vram_gpus WHERE gpu = ?1",
                params![gpu],
                |r| r.get(0),
            )
            .optional()?;
        let cap = cap.ok_or(LedgerError::UnknownGpu(gpu))?;
        let used: i64 = conn.query_row(
            "SELECT COALESCE(SUM(mb), 0) FROM vram_leases WHERE gpu = ?1",
            params![gpu],
            |r| r.get(0),
        )?;
        Ok((cap - used).max(0) as u64)
    }

    /// MB not leased on a GPU (live leases only).
    pub fn free_mb(&self, gpu: u32) -> Result<u64, LedgerError> {
        let conn = self.conn();
        let _ = Self::purge(&conn, now_ms())?;
        Self::available(&conn, gpu)
    }

    /// Acquires a lease, all parts or none.
    pub fn acquire(&self, req: &LeaseRequest) -> Result<Lease, LedgerError> {
        self.acquire_inner(req, None)
    }

    /// Acquires a lease after also checking the monitor's actual free memory on every GPU
    /// (memory used outside the ledger counts).
    pub fn acquire_checked(
        &self,
        req: &LeaseRequest,
        monitor: &dyn GpuMonitor,
    ) -> Result<Lease, LedgerError> {
        let samples = monitor.sample()?;
        let mut actual = Vec::new();
        for &(gpu, _) in &req.parts {
            let s = samples
                .iter()
                .find(|s| s.index == gpu)
                .ok_or(MonitorError::NoSuchGpu(gpu))?;
            actual.push((gpu, s.memory_free_mb));
        }
        self.acquire_inner(req, Some(&actual))
    }

    fn acquire_inner(
        &self,
        req: &LeaseRequest,
        actual: Option<&[(u32, u64)]>,
    ) -> Result<Lease, LedgerError> {
        if req.parts.is_empty() {
            return Err(LedgerError::Invalid("no part"));
        }
        let mut parts = req.parts.clone();
        parts.sort_by_key(|p| p.0);
        if parts.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(LedgerError::Invalid("the same GPU twice"));
        }
        if parts.iter().any(|p| p.1 == 0) {
            return Err(LedgerError::Invalid("zero MB"));
        }
        let now = now_ms();
        let expires = now.saturating_add(req.ttl.as_millis() as i64);
        let id = format!(
            "{:x}-{:x}-{:x}",
            now,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        Self::purge(&tx, now)?;
        for &(gpu, mb) in &parts {
            let avail = Self::available(&tx, gpu)?;
            if mb > avail {
                return Err(LedgerError::Insufficient {
                    gpu,
                    requested_mb: mb,
                    available_mb: avail,
                    by: "ledger",
                });
            }
            if let Some(&(_, free)) = actual.and_then(|a| a.iter().find(|a| a.0 == gpu))
                && mb > free
            {
                return Err(LedgerError::Insufficient {
                    gpu,
                    requested_mb: mb,
                    available_mb: free,
                    by: "actual",
                });
            }
            tx.execute(
                "INSERT INTO vram_leases (lease_id, owner, pid, gpu, mb, acquired_at_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![id, req.owner, req.pid, gpu, mb as i64, now, expires],
            )?;
        }
        tx.commit()?;
        Ok(Lease {
            id,
            owner: req.owner.clone(),
            parts,
            expires_at_ms: expires,
        })
    }

    /// Releases a lease; returns whether it existed.
    pub fn release(&self, lease_id: &str) -> Result<bool, LedgerError> {
        Ok(self.conn().execute(
            "DELETE FROM vram_leases WHERE lease_id = ?1",
            params![lease_id],
        )? > 0)
    }

    /// Heartbeat: pushes a live lease's expiry to now + `ttl`; false if it is gone (expired
    /// and purged, or released).
    pub fn renew(&self, lease_id: &str, ttl: Duration) -> Result<bool, LedgerError> {
        let exp = now_ms().saturating_add(ttl.as_millis() as i64);
        Ok(self.conn().execute(
            "UPDATE vram_leases SET expires_at_ms = ?2 WHERE lease_id = ?1 AND expires_at_ms > ?3",
            params![lease_id, exp, now_ms()],
        )? > 0)
    }

    /// Changes the MB of one part of a lease (e.g. to the measured usage after a load). Growth
    /// is checked against the GPU's capacity.
    pub fn resize(&self, lease_id: &str, gpu: u32, mb: u64) -> Result<bool, LedgerError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cur: Option<i64> = tx
            .query_row(
                "SELECT mb FROM vram_leases WHERE lease_id = ?1 AND gpu = ?2",
                params![lease_id, gpu],
                |r| r.get(0),
            )
            .optional()?;
        let Some(cur) = cur else { return Ok(false) };
        let cur = cur.max(0) as u64;
        if mb > cur {
            let avail = Self::available(&tx, gpu)?;
            if mb - cur > avail {
                return Err(LedgerError::Insufficient {
                    gpu,
                    requested_mb: mb - cur,
                    available_mb: avail,
                    by: "ledger",
                });
            }
        }
        tx.execute(
            "UPDATE vram_leases SET mb = ?3 WHERE lease_id = ?1 AND gpu = ?2",
            params![lease_id, gpu, mb as i64],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Every live row, by GPU then lease.
    pub fn leases(&self) -> Result<Vec<LeaseRow>, LedgerError> {
        let conn = self.conn();
        let mut st = conn.prepare(
            "SELECT lease_id, owner, pid, gpu, mb, expires_at_ms FROM vram_leases
             WHERE expires_at_ms > ?1 ORDER BY gpu, row_id",
        )?;
        let rows = st.query_map(params![now_ms()], |r| {
            Ok(LeaseRow {
                id: r.get(0)?,
                owner: r.get(1)?,
                pid: r
                    .get::<_, Option<i64>>(2)?
                    .and_then(|p| u32::try_from(p).ok()),
                gpu: r.get::<_, i64>(3)? as u32,
                mb: r.get::<_, i64>(4)?.max(0) as u64,
                expires_at_ms: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ttls_are_positive_finite_and_bounded() {
        assert_eq!(lease_ttl(600.0), Some(Duration::from_secs(600)));
        assert_eq!(lease_ttl(30.0 * 86_400.0), Some(MAX_LEASE_TTL));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 30.0 * 86_400.0 + 1.0] {
            assert_eq!(lease_ttl(bad), None, "{bad}");
        }
    }
}
