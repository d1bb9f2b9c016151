//! Shared helpers for the HOROS benchmarks: the raw-SQLite ceilings every squeueha figure is
//! compared with, and small statistics helpers; [`pg`] holds the PostgreSQL drains, [`soak`] the
//! soak and chaos bench (issue 48).

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use squeueha::{Lease, NewJob, Queue};

pub mod pg;
pub mod soak;

/// Payload size used by every queue benchmark.
pub const PAYLOAD: usize = 64;

/// What the bench binaries return: any error, boxed (`Send + Sync`, so that worker threads can
/// return it through `join`).
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Enqueues `n` jobs of [`PAYLOAD`] bytes and priority `priority` on `queue`, 5,000 per batch.
pub fn fill(q: &Queue, queue: &str, n: usize, priority: i32) -> BenchResult<()> {
    let jobs: Vec<NewJob> = (0..n)
        .map(|_| NewJob::new(vec![7u8; PAYLOAD]).priority(priority))
        .collect();
    for chunk in jobs.chunks(5000) {
        q.enqueue_batch(queue, chunk)?;
    }
    Ok(())
}

/// One worker's drain of `queue`: `ack_and_poll` (the ack of the last batch and the claim of the
/// next in one call) with `batch` jobs and visibility `vis`, until a claim finds nothing; returns
/// how many jobs it acked.
pub fn drain_fused(q: &Queue, queue: &str, batch: usize, vis: Duration) -> BenchResult<usize> {
    let mut leases: Vec<Lease> = Vec::new();
    let mut done = 0;
    loop {
        let (report, jobs) = q.ack_and_poll(&leases, queue, batch, vis)?;
        done += report.acked;
        if jobs.is_empty() {
            return Ok(done);
        }
        leases = jobs.iter().map(|j| j.lease).collect();
    }
}

/// A plain rusqlite connection: WAL, synchronous=NORMAL, and no checkpoint at all (squeueha
/// checkpoints in a background thread; the ceiling pays for none), so it is a true upper bound.
pub fn raw_connection(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS raw_jobs (
             id INTEGER PRIMARY KEY, queue TEXT NOT NULL, priority INTEGER NOT NULL,
             visible_at INTEGER NOT NULL, lease INTEGER, payload BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS raw_jobs_claim ON raw_jobs (queue, priority DESC, visible_at);",
    )?;
    Ok(conn)
}

/// Raw ceiling: `per_tx` INSERTs per transaction; returns rows/s.
pub fn raw_insert(conn: &mut Connection, total: usize, per_tx: usize) -> rusqlite::Result<f64> {
    let payload = vec![7u8; PAYLOAD];
    let start = Instant::now();
    let mut done = 0;
    while done < total {
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO raw_jobs (queue, priority, visible_at, payload) VALUES ('q', 0, ?1, ?2)",
            )?;
            // A monotonic visible_at, as a queue's enqueue time is: appends, not random inserts.
            for i in 0..per_tx.min(total - done) {
                stmt.execute(params![(done + i) as i64, payload])?;
            }
        }
        tx.commit()?;
        done += per_tx;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// A stricter ceiling than the issue's: `per_tx` rows per transaction written by multi-row
/// `INSERT … VALUES (…), (…)` statements of `per_stmt` rows (what squeueha's batched enqueue does
/// since session 3); returns rows/s.
pub fn raw_insert_multi(
    conn: &mut Connection,
    total: usize,
    per_tx: usize,
    per_stmt: usize,
) -> rusqlite::Result<f64> {
    let payload = vec![7u8; PAYLOAD];
    let rows: Vec<String> = (0..per_stmt)
        .map(|r| format!("('q', 0, ?{}, ?{})", 2 * r + 1, 2 * r + 2))
        .collect();
    let multi = format!(
        "INSERT INTO raw_jobs (queue, priority, visible_at, payload) VALUES {}",
        rows.join(", ")
    );
    let start = Instant::now();
    let mut done = 0;
    while done < total {
        let tx = conn.transaction()?;
        {
            let n = per_tx.min(total - done);
            let mut i = 0;
            while i < n {
                if n - i >= per_stmt {
                    let mut stmt = tx.prepare_cached(&multi)?;
                    for r in 0..per_stmt {
                        stmt.raw_bind_parameter(2 * r + 1, (done + i + r) as i64)?;
                        stmt.raw_bind_parameter(2 * r + 2, &payload)?;
                    }
                    stmt.raw_execute()?;
                    i += per_stmt;
                } else {
                    tx.prepare_cached(
                        "INSERT INTO raw_jobs (queue, priority, visible_at, payload) VALUES ('q', 0, ?1, ?2)",
                    )?
                    .execute(params![(done + i) as i64, payload])?;
                    i += 1;
                }
            }
        }
        tx.commit()?;
        done += per_tx;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Raw ceiling: a bare claim of `batch` rows (`UPDATE … RETURNING`) plus their DELETE, in one
/// transaction, until the table is empty; returns rows/s.
pub fn raw_claim_delete(conn: &mut Connection, batch: usize) -> rusqlite::Result<f64> {
    let start = Instant::now();
    let mut total = 0usize;
    loop {
        let tx = conn.transaction()?;
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare_cached(
                "UPDATE raw_jobs SET lease = 1, visible_at = visible_at + 30000
                 WHERE id IN (SELECT id FROM raw_jobs WHERE queue = 'q' AND visible_at <= ?2
                              ORDER BY priority DESC, visible_at LIMIT ?1)
                 RETURNING id, payload",
            )?;
            let rows = stmt.query_map(params![batch as i64, i64::MAX / 2], |r| {
                let _: Vec<u8> = r.get(1)?;
                r.get(0)
            })?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        {
            let mut del = tx.prepare_cached("DELETE FROM raw_jobs WHERE id = ?1")?;
            for id in &ids {
                del.execute([id])?;
            }
        }
        tx.commit()?;
        if ids.is_empty() {
            break;
        }
        total += ids.len();
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// The `p`-th percentile (0..=100) of `samples`, which it sorts.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

/// Median of repeated measurements.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// The machine's CPU as a bench names it: its model (from `/proc/cpuinfo`) and its number of
/// cores, e.g. `AMD EPYC 7B13, 2 cores`.
pub fn cpu() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}
