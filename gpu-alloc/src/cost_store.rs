//! Measured swap costs kept across restarts: one row per (mode, GPU, kind, level) with the
//! moving average of its measurements and their count, in an SQLite file (the VRAM ledger's,
//! as `horos-ref run` uses it; WAL, so several processes may share it).
//!
//! [`CostStore::record`] is one `INSERT ... ON CONFLICT DO UPDATE` statement: the moving
//! average is updated in the database itself, atomically, with the same weight as
//! [`SwapCosts::record`] ([`SwapCosts::SMOOTHING`]), so the stored figure is the one the
//! allocator plans with. [`CostStore::load`] reads them all back as a [`SwapCosts`].
//!
//! The API is blocking; from async code call it in `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, params};

use crate::allocator::{Measured, SwapCosts, SwapKind, SwapMeasurement};
use crate::catalogue::SleepLevel;

/// Cost store failures.
#[derive(Debug, thiserror::Error)]
pub enum CostStoreError {
    /// SQLite failed.
    #[error("swap costs: sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The schema's migration failed.
    #[error("swap costs schema: {0}")]
    Schema(#[source] squeueha::Error),
    /// A row names a kind or level this build does not know.
    #[error("swap costs: unknown kind `{kind}` at level {level}")]
    UnknownKind {
        /// The kind as stored.
        kind: String,
        /// The level as stored.
        level: i64,
    },
}

/// The table, versioned by squeueha's migrator in a namespace of its own
/// (`horos_gpu_alloc_costs`), so that the ledger's schema version is unchanged for the files
/// that hold only the ledger. Never edit a released step: append a new one.
const MIGRATIONS: squeueha::Migrations = squeueha::Migrations::new(
    "horos_gpu_alloc_costs",
    &[squeueha::Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS swap_costs (
    mode TEXT NOT NULL,
    gpu INTEGER NOT NULL,
    kind TEXT NOT NULL,
    level INTEGER NOT NULL,
    mean_s REAL NOT NULL,
    count INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (mode, gpu, kind, level)
);",
    }],
);

/// A swap kind as stored: its name and its level (0 for a load or a stop).
fn columns(kind: SwapKind) -> (&'static str, i64) {
    match kind {
        SwapKind::Load => ("load", 0),
        SwapKind::Stop => ("stop", 0),
        SwapKind::Wake(l) => ("wake", i64::from(l.number())),
        SwapKind::Sleep(l) => ("sleep", i64::from(l.number())),
    }
}

/// The swap kind of a stored row.
fn kind_of(kind: &str, level: i64) -> Option<SwapKind> {
    let level_of = |n| match n {
        1 => Some(SleepLevel::One),
        2 => Some(SleepLevel::Two),
        _ => None,
    };
    match kind {
        "load" => Some(SwapKind::Load),
        "stop" => Some(SwapKind::Stop),
        "wake" => level_of(level).map(SwapKind::Wake),
        "sleep" => level_of(level).map(SwapKind::Sleep),
        _ => None,
    }
}

/// The measured swap costs in a database file.
#[derive(Debug)]
pub struct CostStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl CostStore {
    /// Opens (creating if needed) the file and its table: WAL, 5 s busy timeout.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CostStoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = crate::ledger::open_file(&path)?;
        MIGRATIONS.apply(&conn).map_err(CostStoreError::Schema)?;
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

    /// Every cost kept, as the allocator plans with them.
    pub fn load(&self) -> Result<SwapCosts, CostStoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT mode, gpu, kind, level, mean_s, count FROM swap_costs")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, u32>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, f64>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?;
        let mut costs = SwapCosts::new();
        for row in rows {
            let (mode, gpu, kind, level, mean_s, count) = row?;
            let Some(k) = kind_of(&kind, level) else {
                return Err(CostStoreError::UnknownKind { kind, level });
            };
            let count = u64::try_from(count).unwrap_or(0);
            costs.restore(&mode, gpu, k, Measured { mean_s, count });
        }
        Ok(costs)
    }

    /// Records one measurement: its (mode, GPU, kind, level)'s moving average and count
    /// updated in one statement (the first measurement taken as is). A negative or non-finite
    /// measurement is ignored, as [`SwapCosts::record`] ignores it.
    pub fn record(&self, m: &SwapMeasurement) -> Result<(), CostStoreError> {
        if !(m.seconds >= 0.0 && m.seconds.is_finite()) {
            return Ok(());
        }
        let (kind, level) = columns(m.kind);
        self.conn().execute(
            "INSERT INTO swap_costs (mode, gpu, kind, level, mean_s, count, updated_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6)
             ON CONFLICT (mode, gpu, kind, level) DO UPDATE SET
                 mean_s = mean_s + ?7 * (excluded.mean_s - mean_s),
                 count = count + 1,
                 updated_at_ms = excluded.updated_at_ms",
            params![
                m.mode,
                m.gpu,
                kind,
                level,
                m.seconds,
                crate::ledger::now_ms(),
                SwapCosts::SMOOTHING
            ],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(mode: &str, gpu: u32, kind: SwapKind, seconds: f64) -> SwapMeasurement {
        SwapMeasurement::new(mode, gpu, kind, seconds)
    }

    #[test]
    fn costs_recorded_are_read_back_after_the_file_is_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let measured = [
            m("think", 0, SwapKind::Load, 100.0),
            m("think", 0, SwapKind::Load, 50.0),
            m("think", 0, SwapKind::Wake(SleepLevel::One), 0.8),
            m("think", 1, SwapKind::Sleep(SleepLevel::Two), 0.4),
            m("vision", 0, SwapKind::Stop, 2.0),
            m("vision", 0, SwapKind::Stop, f64::NAN),
        ];
        let mut in_memory = SwapCosts::new();
        {
            let store = CostStore::open(&path).unwrap();
            for x in &measured {
                store.record(x).unwrap();
                in_memory.record(x);
            }
        }
        let store = CostStore::open(&path).unwrap();
        let back = store.load().unwrap();
        let load = back.measured("think", 0, SwapKind::Load).unwrap();
        assert_eq!(load.count, 2);
        assert!((load.mean_s - 85.0).abs() < 1e-9, "{load:?}");
        let wake = back
            .measured("think", 0, SwapKind::Wake(SleepLevel::One))
            .unwrap();
        assert_eq!((wake.mean_s, wake.count), (0.8, 1));
        assert!(
            back.measured("think", 1, SwapKind::Sleep(SleepLevel::Two))
                .is_some()
        );
        assert!(
            back.measured("think", 1, SwapKind::Sleep(SleepLevel::One))
                .is_none()
        );
        assert_eq!(
            back.measured("vision", 0, SwapKind::Stop).map(|x| x.count),
            Some(1)
        );
        // The database's moving average is the allocator's.
        assert_eq!(back, in_memory);
    }

    #[test]
    fn a_file_shared_with_the_ledger_keeps_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let ledger = crate::ledger::VramLedger::open(&path).unwrap();
        ledger.set_capacity(0, 1000).unwrap();
        let store = CostStore::open(&path).unwrap();
        store.record(&m("a", 0, SwapKind::Load, 1.0)).unwrap();
        drop(store);
        let ledger = crate::ledger::VramLedger::open(&path).unwrap();
        assert_eq!(ledger.free_mb(0).unwrap(), 1000);
        let store = CostStore::open(&path).unwrap();
        assert_eq!(store.load().unwrap().iter().count(), 1);
    }

    #[test]
    fn an_unknown_kind_is_an_error_not_a_guess() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let store = CostStore::open(&path).unwrap();
        store
            .conn()
            .execute(
                "INSERT INTO swap_costs VALUES ('a', 0, 'wake', 3, 1.0, 1, 0)",
                [],
            )
            .unwrap();
        assert!(matches!(
            store.load(),
            Err(CostStoreError::UnknownKind { level: 3, .. })
        ));
    }
}
