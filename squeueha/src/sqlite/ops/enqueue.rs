//! Enqueue: validation, dedup keys, fresh ids, single and multi-row inserts.

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::config::{Config, DedupWindow};
use crate::error::{Error, Result};
use crate::job::{Dedup, Enqueued, Millis, NewJob, millis};
use crate::sqlite::IdBlock;
use crate::sqlite::state::{DELAYED, READY};

use super::check_queue_name;

fn dedup_key(job: &NewJob) -> Option<String> {
    match &job.dedup {
        Dedup::None => None,
        Dedup::Key(k) => Some(format!("k:{k}")),
        Dedup::PayloadHash => {
            let digest = Sha256::digest(&job.payload);
            let mut hex = String::with_capacity(66);
            hex.push_str("h:");
            for b in digest {
                hex.push_str(&format!("{b:02x}"));
            }
            Some(hex)
        }
    }
}

/// Validates every job before anything is written, so a bad job in a batch changes nothing.
pub(crate) fn validate(jobs: &[NewJob], cfg: &Config) -> Result<()> {
    for job in jobs {
        if job.payload.len() > cfg.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                size: job.payload.len(),
                limit: cfg.max_payload_bytes,
            });
        }
    }
    Ok(())
}

pub(crate) fn enqueue(
    conn: &Connection,
    ids: &mut IdBlock,
    queue: &str,
    jobs: &[NewJob],
    cfg: &Config,
    now: Millis,
) -> Result<Vec<Enqueued>> {
    check_queue_name(queue)?;
    validate(jobs, cfg)?;
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let count = i64::try_from(jobs.len()).unwrap_or(i64::MAX);
    let mut next_id = ids.take(conn, count)?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO squeueha_jobs (id, queue, state, priority, due_at, max_attempts, enqueued_at, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    // Bindings survive executions: bind what the batch shares once, and a job's state, due time,
    // priority and attempts only where they differ from the previous job's (in a batch they
    // usually do not: each bind costs about as much as a column's share of the insert).
    insert.raw_bind_parameter(2, queue)?;
    insert.raw_bind_parameter(7, now)?;
    let mut bound: Option<(i64, Millis, i32, u32)> = None;
    let mut out = Vec::with_capacity(jobs.len());
    let mut rest = jobs;
    while let Some((job, after)) = rest.split_first() {
        // Runs of jobs without a dedup key go BLOCK rows to a statement: one statement start,
        // cursor set-up and halt for BLOCK rows instead of one per row.
        if let Some(block) = rest.get(..BLOCK)
            && block.iter().all(|j| matches!(j.dedup, Dedup::None))
        {
            insert_block(conn, queue, block, next_id, cfg, now)?;
            out.extend((next_id..).take(BLOCK).map(Enqueued::New));
            next_id += BLOCK as i64;
            rest = &rest[BLOCK..];
            continue;
        }
        rest = after;
        let key = dedup_key(job);
        if let Some(key) = &key
            && let Some(existing) = find_dedup(conn, queue, key, cfg, now)?
        {
            out.push(Enqueued::Duplicate(existing));
            continue;
        }
        let (state, due) = if job.delay.is_zero() {
            (READY, now)
        } else {
            (DELAYED, now.saturating_add(millis(job.delay)))
        };
        let max_attempts = job.max_attempts.unwrap_or(cfg.default_max_attempts).max(1);
        let id = next_id;
        next_id += 1;
        insert.raw_bind_parameter(1, id)?;
        let last = bound;
        if last.is_none_or(|b| b.0 != state) {
            insert.raw_bind_parameter(3, state)?;
        }
        if last.is_none_or(|b| b.1 != due) {
            insert.raw_bind_parameter(5, due)?;
        }
        if last.is_none_or(|b| b.2 != job.priority) {
            insert.raw_bind_parameter(4, job.priority)?;
        }
        if last.is_none_or(|b| b.3 != max_attempts) {
            insert.raw_bind_parameter(6, max_attempts)?;
        }
        bound = Some((state, due, job.priority, max_attempts));
        insert.raw_bind_parameter(8, &job.payload)?;
        insert.raw_execute()?;
        if let Some(key) = key {
            conn.prepare_cached(
                "INSERT OR REPLACE INTO squeueha_dedup (queue, key, job_id, created_at)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![queue, key, id, now])?;
        }
        out.push(Enqueued::New(id));
    }
    Ok(out)
}

/// Rows per multi-row insert.
const BLOCK: usize = 32;

/// The columns a row of [`BLOCK_SQL`] binds itself (after the shared queue, time and first id).
const PER_ROW: usize = 5;

/// `INSERT … VALUES (…), (…), …` for [`BLOCK`] rows: `?1` queue, `?2` now, `?3` the first id
/// (row `r` gets `?3 + r`), then per row state, priority, due time, attempts, payload.
static BLOCK_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let rows: Vec<String> = (0..BLOCK)
        .map(|r| {
            let p = 4 + r * PER_ROW;
            format!(
                "(?3 + {r}, ?1, ?{}, ?{}, ?{}, ?{}, ?2, ?{})",
                p,
                p + 1,
                p + 2,
                p + 3,
                p + 4
            )
        })
        .collect();
    format!(
        "INSERT INTO squeueha_jobs (id, queue, state, priority, due_at, max_attempts, enqueued_at, payload) VALUES {}",
        rows.join(", ")
    )
});

/// Inserts `block` (exactly [`BLOCK`] jobs, none with a dedup key) with ids `first..`.
fn insert_block(
    conn: &Connection,
    queue: &str,
    block: &[NewJob],
    first: i64,
    cfg: &Config,
    now: Millis,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(&BLOCK_SQL)?;
    stmt.raw_bind_parameter(1, queue)?;
    stmt.raw_bind_parameter(2, now)?;
    stmt.raw_bind_parameter(3, first)?;
    for (r, job) in block.iter().enumerate() {
        let (state, due) = if job.delay.is_zero() {
            (READY, now)
        } else {
            (DELAYED, now.saturating_add(millis(job.delay)))
        };
        let max_attempts = job.max_attempts.unwrap_or(cfg.default_max_attempts).max(1);
        let p = 4 + r * PER_ROW;
        stmt.raw_bind_parameter(p, state)?;
        stmt.raw_bind_parameter(p + 1, job.priority)?;
        stmt.raw_bind_parameter(p + 2, due)?;
        stmt.raw_bind_parameter(p + 3, max_attempts)?;
        stmt.raw_bind_parameter(p + 4, &job.payload)?;
    }
    stmt.raw_execute()?;
    Ok(())
}

fn find_dedup(
    conn: &Connection,
    queue: &str,
    key: &str,
    cfg: &Config,
    now: Millis,
) -> Result<Option<i64>> {
    let found: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT job_id, created_at FROM squeueha_dedup WHERE queue = ?1 AND key = ?2",
        )?
        .query_row(params![queue, key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(found.and_then(|(id, created)| match cfg.dedup_window {
        DedupWindow::Permanent => Some(id),
        DedupWindow::Window(w) => (now - created < millis(w)).then_some(id),
    }))
}
