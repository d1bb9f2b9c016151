//! The queue's SQL. Every function runs on a connection that is already inside the caller's
//! transaction, so the public API and [`QueueTx`](crate::QueueTx) share one implementation.

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::config::{Config, DedupWindow};
use crate::error::{Error, Result};
use crate::job::{
    DeadJob, Dedup, Enqueued, Job, JobInfo, JobState, Lease, Millis, Nacked, NewJob, millis,
};
use crate::sqlite::IdBlock;
use crate::stats::QueueStats;
use crate::storage::AckReport;

const READY: i64 = 0;
const DELAYED: i64 = 2;

pub(crate) fn check_queue_name(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.len() > 200 {
        return Err(Error::InvalidArgument(format!(
            "queue name must be 1..=200 bytes, got {} bytes",
            queue.len()
        )));
    }
    Ok(())
}

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

/// Makes due timers effective for `queue`: delayed jobs whose time has come become ready, expired
/// leases become ready again, or dead when their attempts are used up.
pub(crate) fn promote_due(conn: &Connection, queue: &str, now: Millis) -> Result<usize> {
    let any: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM squeueha_jobs WHERE state <> 0 AND state IN (1, 2) AND queue = ?1 AND due_at <= ?2 LIMIT 1",
        )?
        .query_row(params![queue, now], |r| r.get(0))
        .optional()?;
    if any.is_none() {
        return Ok(0);
    }
    conn.prepare_cached(
        "INSERT INTO squeueha_dead
             (id, queue, priority, attempts, max_attempts, enqueued_at, died_at, last_error, payload)
         SELECT id, queue, priority, attempts, max_attempts, enqueued_at, ?2,
                'lease expired on attempt ' || attempts || ' of ' || max_attempts
                || ' (worker crashed or too slow)'
                || coalesce('; last error: ' || last_error, ''),
                payload
         FROM squeueha_jobs
         WHERE state <> 0 AND state = 1 AND queue = ?1 AND due_at <= ?2
               AND attempts >= max_attempts",
    )?
    .execute(params![queue, now])?;
    conn.prepare_cached(
        "DELETE FROM squeueha_jobs
         WHERE state <> 0 AND state = 1 AND queue = ?1 AND due_at <= ?2
               AND attempts >= max_attempts",
    )?
    .execute(params![queue, now])?;
    let promoted = conn
        .prepare_cached(
            "UPDATE squeueha_jobs SET state = 0, lease_token = NULL
             WHERE state <> 0 AND state IN (1, 2) AND queue = ?1 AND due_at <= ?2",
        )?
        .execute(params![queue, now])?;
    Ok(promoted)
}

pub(crate) fn claim(
    conn: &Connection,
    queue: &str,
    n: usize,
    visibility_ms: i64,
    token: i64,
    now: Millis,
) -> Result<Vec<Job>> {
    check_queue_name(queue)?;
    if n == 0 {
        return Err(Error::InvalidArgument(
            "batch size must be at least 1".into(),
        ));
    }
    promote_due(conn, queue, now)?;
    let expires = now.saturating_add(visibility_ms.max(1));
    let mut stmt = conn.prepare_cached(
        "UPDATE squeueha_jobs
         SET state = 1, lease_token = ?3, due_at = ?4, attempts = attempts + 1
         WHERE id IN (SELECT id FROM squeueha_jobs WHERE queue = ?1 AND state = 0
                      ORDER BY priority DESC, due_at, id LIMIT ?2)
         RETURNING id, priority, attempts, max_attempts, enqueued_at, payload",
    )?;
    let rows = stmt.query_map(
        params![queue, i64::try_from(n).unwrap_or(i64::MAX), token, expires],
        |r| {
            Ok(Job {
                id: r.get(0)?,
                queue: String::new(),
                priority: r.get(1)?,
                attempts: r.get(2)?,
                max_attempts: r.get(3)?,
                enqueued_at: r.get(4)?,
                payload: r.get(5)?,
                lease_expires_at: expires,
                lease: Lease {
                    job_id: r.get(0)?,
                    token,
                },
            })
        },
    )?;
    let mut jobs = Vec::with_capacity(n.min(1024));
    for row in rows {
        let mut job = row?;
        job.queue = queue.to_owned();
        jobs.push(job);
    }
    // RETURNING order is unspecified; hand jobs out in claim order.
    jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
    Ok(jobs)
}

/// Acks many leases with one statement per lease token (a batch from one `poll_batch` shares its
/// token), so a batch costs one statement, not one per job.
pub(crate) fn ack_many(
    conn: &Connection,
    leases: &[Lease],
    cfg: &Config,
    now: Millis,
) -> Result<AckReport> {
    let mut report = AckReport::default();
    let mut by_token: Vec<(i64, Vec<i64>)> = Vec::new();
    for lease in leases {
        match by_token.iter_mut().find(|(t, _)| *t == lease.token) {
            Some((_, ids)) => ids.push(lease.job_id),
            None => by_token.push((lease.token, vec![lease.job_id])),
        }
    }
    for (token, ids) in by_token {
        for chunk in ids.chunks(256) {
            let placeholders = (0..chunk.len())
                .map(|i| format!("?{}", i + 3))
                .collect::<Vec<_>>()
                .join(",");
            let sql = if cfg.retain_done.is_some() {
                format!(
                    "UPDATE squeueha_jobs SET state = 3, due_at = ?2, lease_token = NULL
                     WHERE lease_token = ?1 AND id IN ({placeholders}) RETURNING id"
                )
            } else {
                format!(
                    "DELETE FROM squeueha_jobs WHERE lease_token = ?1 AND id IN ({placeholders})
                     RETURNING id"
                )
            };
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut values: Vec<i64> = Vec::with_capacity(chunk.len() + 2);
            values.push(token);
            values.push(now);
            values.extend_from_slice(chunk);
            let done: Vec<i64> = stmt
                .query_map(rusqlite::params_from_iter(values.iter()), |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            report.acked += done.len();
            if done.len() < chunk.len() {
                report
                    .stale
                    .extend(chunk.iter().filter(|id| !done.contains(id)));
            }
        }
    }
    Ok(report)
}

pub(crate) fn nack(
    conn: &Connection,
    lease: Lease,
    error: &str,
    delay_ms: Option<i64>,
    cfg: &Config,
    now: Millis,
) -> Result<Nacked> {
    let row: Option<(u32, u32)> = conn
        .prepare_cached(
            "SELECT attempts, max_attempts FROM squeueha_jobs WHERE id = ?1 AND lease_token = ?2",
        )?
        .query_row(params![lease.job_id, lease.token], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let Some((attempts, max_attempts)) = row else {
        return Err(Error::StaleLease {
            job_id: lease.job_id,
        });
    };
    if attempts >= max_attempts {
        bury(conn, lease.job_id, error, now)?;
        return Ok(Nacked::Dead);
    }
    let delay = delay_ms.unwrap_or_else(|| millis(cfg.retry_backoff.delay(attempts)));
    let at = now.saturating_add(delay.max(0));
    let state = if delay <= 0 { READY } else { DELAYED };
    conn.prepare_cached(
        "UPDATE squeueha_jobs SET state = ?2, due_at = ?3, lease_token = NULL, last_error = ?4
         WHERE id = ?1",
    )?
    .execute(params![lease.job_id, state, at, error])?;
    Ok(Nacked::Retry { at })
}

/// `changed` rows by a statement guarded by `lease`: none means the lease is stale.
fn held(changed: usize, lease: Lease) -> Result<()> {
    if changed == 0 {
        return Err(Error::StaleLease {
            job_id: lease.job_id,
        });
    }
    Ok(())
}

/// Fails with `StaleLease` unless `lease` is the job's current lease.
pub(crate) fn check_lease(conn: &Connection, lease: Lease) -> Result<()> {
    conn.prepare_cached("SELECT 1 FROM squeueha_jobs WHERE id = ?1 AND lease_token = ?2")?
        .query_row(params![lease.job_id, lease.token], |_| Ok(()))
        .optional()?
        .ok_or(Error::StaleLease {
            job_id: lease.job_id,
        })
}

/// Moves a job (in any state) to the dead-letter table with `reason`.
pub(crate) fn bury(conn: &Connection, job_id: i64, reason: &str, now: Millis) -> Result<()> {
    let moved = conn
        .prepare_cached(
            "INSERT INTO squeueha_dead
                 (id, queue, priority, attempts, max_attempts, enqueued_at, died_at, last_error, payload)
             SELECT id, queue, priority, attempts, max_attempts, enqueued_at, ?2, ?3, payload
             FROM squeueha_jobs WHERE id = ?1",
        )?
        .execute(params![job_id, now, reason])?;
    if moved == 0 {
        return Err(Error::NotFound(format!("job {job_id}")));
    }
    conn.prepare_cached("DELETE FROM squeueha_jobs WHERE id = ?1")?
        .execute(params![job_id])?;
    Ok(())
}

/// Deletes a ready or delayed job (cancellation); in-flight jobs are left to their holder.
pub(crate) fn cancel(conn: &Connection, job_id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached("DELETE FROM squeueha_jobs WHERE id = ?1 AND state IN (0, 2)")?
        .execute(params![job_id])?
        > 0)
}

/// Gives a claimed job back without counting the attempt (the failure was not the job's fault).
pub(crate) fn release(conn: &Connection, lease: Lease, delay_ms: i64, now: Millis) -> Result<()> {
    let state = if delay_ms <= 0 { READY } else { DELAYED };
    let changed = conn
        .prepare_cached(
            "UPDATE squeueha_jobs
             SET state = ?3, due_at = ?4, lease_token = NULL, attempts = max(attempts - 1, 0)
             WHERE id = ?1 AND lease_token = ?2",
        )?
        .execute(params![
            lease.job_id,
            lease.token,
            state,
            now.saturating_add(delay_ms.max(0))
        ])?;
    held(changed, lease)
}

pub(crate) fn extend(
    conn: &Connection,
    lease: Lease,
    visibility_ms: i64,
    now: Millis,
) -> Result<Millis> {
    let until = now.saturating_add(visibility_ms.max(1));
    let changed = conn
        .prepare_cached(
            "UPDATE squeueha_jobs SET due_at = ?3 WHERE id = ?1 AND lease_token = ?2 AND state = 1",
        )?
        .execute(params![lease.job_id, lease.token, until])?;
    held(changed, lease)?;
    Ok(until)
}

pub(crate) fn get(conn: &Connection, id: i64) -> Result<Option<JobInfo>> {
    let live = conn
        .prepare_cached(
            "SELECT id, queue, state, payload, priority, attempts, max_attempts, last_error, enqueued_at
             FROM squeueha_jobs WHERE id = ?1",
        )?
        .query_row(params![id], |r| {
            Ok(JobInfo {
                id: r.get(0)?,
                queue: r.get(1)?,
                state: JobState::from_code(r.get(2)?),
                payload: r.get(3)?,
                priority: r.get(4)?,
                attempts: r.get(5)?,
                max_attempts: r.get(6)?,
                last_error: r.get(7)?,
                enqueued_at: r.get(8)?,
            })
        })
        .optional()?;
    if live.is_some() {
        return Ok(live);
    }
    Ok(conn
        .prepare_cached(
            "SELECT id, queue, payload, priority, attempts, max_attempts, last_error, enqueued_at
             FROM squeueha_dead WHERE id = ?1",
        )?
        .query_row(params![id], |r| {
            Ok(JobInfo {
                id: r.get(0)?,
                queue: r.get(1)?,
                state: JobState::Dead,
                payload: r.get(2)?,
                priority: r.get(3)?,
                attempts: r.get(4)?,
                max_attempts: r.get(5)?,
                last_error: r.get(6)?,
                enqueued_at: r.get(7)?,
            })
        })
        .optional()?)
}

pub(crate) fn list_dead(conn: &Connection, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
         FROM squeueha_dead WHERE queue = ?1 ORDER BY died_at, id LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        params![queue, i64::try_from(limit).unwrap_or(i64::MAX)],
        |r| {
            Ok(DeadJob {
                id: r.get(0)?,
                queue: r.get(1)?,
                payload: r.get(2)?,
                priority: r.get(3)?,
                attempts: r.get(4)?,
                last_error: r.get(5)?,
                enqueued_at: r.get(6)?,
                died_at: r.get(7)?,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Puts a dead job back in its queue as a new job with fresh attempts; returns the new id.
pub(crate) fn requeue_dead(
    conn: &Connection,
    ids: &mut IdBlock,
    id: i64,
    cfg: &Config,
    now: Millis,
) -> Result<i64> {
    let row: Option<(String, i32, u32, Vec<u8>)> = conn
        .prepare_cached(
            "SELECT queue, priority, max_attempts, payload FROM squeueha_dead WHERE id = ?1",
        )?
        .query_row(params![id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let Some((queue, priority, max_attempts, payload)) = row else {
        return Err(Error::NotFound(format!("dead job {id}")));
    };
    let job = NewJob::new(payload)
        .priority(priority)
        .max_attempts(max_attempts);
    let new_id = enqueue(conn, ids, &queue, &[job], cfg, now)?
        .first()
        .map(|e| e.id())
        .ok_or_else(|| Error::NotFound(format!("dead job {id}")))?;
    conn.prepare_cached("DELETE FROM squeueha_dead WHERE id = ?1")?
        .execute(params![id])?;
    Ok(new_id)
}

pub(crate) fn purge_dead(
    conn: &Connection,
    queue: &str,
    older_than: Option<Millis>,
) -> Result<usize> {
    let cutoff = older_than.unwrap_or(i64::MAX);
    Ok(conn
        .prepare_cached("DELETE FROM squeueha_dead WHERE queue = ?1 AND died_at <= ?2")?
        .execute(params![queue, cutoff])?)
}

pub(crate) fn purge_done(conn: &Connection, before: Millis) -> Result<usize> {
    Ok(conn
        .prepare_cached(
            "DELETE FROM squeueha_jobs WHERE state <> 0 AND state = 3 AND due_at <= ?1",
        )?
        .execute(params![before])?)
}

pub(crate) fn purge_dedup(conn: &Connection, before: Millis) -> Result<usize> {
    Ok(conn
        .prepare_cached("DELETE FROM squeueha_dedup WHERE created_at <= ?1")?
        .execute(params![before])?)
}

pub(crate) fn stats(conn: &Connection, queue: &str, now: Millis) -> Result<QueueStats> {
    let count = |sql: &str| -> Result<u64> {
        Ok(conn
            .prepare_cached(sql)?
            .query_row(params![queue], |r| r.get::<_, i64>(0))?
            .max(0) as u64)
    };
    // Each count reads one partial index, never the whole table.
    let ready = count("SELECT count(*) FROM squeueha_jobs WHERE queue = ?1 AND state = 0")?;
    let in_flight =
        count("SELECT count(*) FROM squeueha_jobs WHERE state <> 0 AND state = 1 AND queue = ?1")?;
    let delayed =
        count("SELECT count(*) FROM squeueha_jobs WHERE state <> 0 AND state = 2 AND queue = ?1")?;
    let done =
        count("SELECT count(*) FROM squeueha_jobs WHERE state <> 0 AND state = 3 AND queue = ?1")?;
    let dead = count("SELECT count(*) FROM squeueha_dead WHERE queue = ?1")?;
    let oldest: Option<i64> = conn
        .prepare_cached(
            "SELECT min(enqueued_at) FROM squeueha_jobs WHERE queue = ?1 AND state = 0",
        )?
        .query_row(params![queue], |r| r.get(0))?;
    Ok(QueueStats {
        queue: queue.to_owned(),
        ready,
        in_flight,
        delayed,
        done,
        dead,
        oldest_ready_age_ms: oldest.map(|t| (now - t).max(0)),
    })
}

pub(crate) fn queues(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT queue FROM squeueha_jobs GROUP BY queue
         UNION SELECT queue FROM squeueha_dead GROUP BY queue ORDER BY 1",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
}

pub(crate) fn next_due(conn: &Connection, queue: &str) -> Result<Option<Millis>> {
    // One index seek per state (a min over the IN would scan every in-flight row).
    let mut next: Option<Millis> = None;
    for state in [1i64, 2] {
        let due: Option<Millis> = conn
            .prepare_cached(
                "SELECT min(due_at) FROM squeueha_jobs WHERE state <> 0 AND state = ?2 AND queue = ?1",
            )?
            .query_row(params![queue, state], |r| r.get(0))?;
        next = match (next, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(next)
}

// Leader election: one row per name; the fencing token grows each time leadership changes hands.

pub(crate) fn try_lead(
    conn: &Connection,
    name: &str,
    holder: &str,
    ttl_ms: i64,
    now: Millis,
) -> Result<Option<(i64, Millis)>> {
    let row: Option<(String, i64, i64)> = conn
        .prepare_cached("SELECT holder, fencing, expires_at FROM squeueha_leaders WHERE name = ?1")?
        .query_row(params![name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let expires = now.saturating_add(ttl_ms.max(1));
    // Only an unexpired renewal keeps the token: a lapsed term (even the same holder's) ends, so
    // side effects still in flight from it fail the fence.
    let fencing = match row {
        None => 1,
        Some((_, fencing, expires_at)) if expires_at <= now => fencing + 1,
        Some((current, fencing, _)) if current == holder => fencing,
        Some(_) => return Ok(None),
    };
    conn.prepare_cached(
        "INSERT INTO squeueha_leaders (name, holder, fencing, expires_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET holder = ?2, fencing = ?3, expires_at = ?4",
    )?
    .execute(params![name, holder, fencing, expires])?;
    Ok(Some((fencing, expires)))
}

pub(crate) fn resign(conn: &Connection, name: &str, holder: &str, fencing: i64) -> Result<bool> {
    // Expire rather than delete, so the next leader's token is still larger.
    Ok(conn
        .prepare_cached(
            "UPDATE squeueha_leaders SET expires_at = 0
             WHERE name = ?1 AND holder = ?2 AND fencing = ?3",
        )?
        .execute(params![name, holder, fencing])?
        > 0)
}

pub(crate) fn leader(
    conn: &Connection,
    name: &str,
    now: Millis,
) -> Result<Option<(String, i64, Millis)>> {
    Ok(conn
        .prepare_cached(
            "SELECT holder, fencing, expires_at FROM squeueha_leaders
             WHERE name = ?1 AND expires_at > ?2",
        )?
        .query_row(params![name, now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?)
}

pub(crate) fn check_fencing(
    conn: &Connection,
    name: &str,
    fencing: i64,
    now: Millis,
) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM squeueha_leaders WHERE name = ?1 AND fencing = ?2 AND expires_at > ?3",
        )?
        .query_row(params![name, fencing, now], |_| Ok(()))
        .optional()?
        .is_some())
}

#[cfg(test)]
mod plans {
    //! The claim stays fast as the table grows only if these statements seek their partial index.
    use rusqlite::Connection;

    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(|r| r.unwrap())
            .collect::<Vec<_>>();
        rows.join(" | ")
    }

    #[test]
    fn hot_statements_use_their_partial_indexes() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        let claim = plan(
            &conn,
            "SELECT id FROM squeueha_jobs WHERE queue = 'q' AND state = 0
             ORDER BY priority DESC, due_at, id LIMIT 32",
        );
        assert!(claim.contains("squeueha_jobs_ready"), "{claim}");
        assert!(
            !claim.contains("TEMP B-TREE"),
            "claim must not sort: {claim}"
        );
        for sql in [
            "SELECT 1 FROM squeueha_jobs WHERE state <> 0 AND state IN (1, 2) AND queue = 'q' AND due_at <= 5 LIMIT 1",
            "SELECT min(due_at) FROM squeueha_jobs WHERE state <> 0 AND state = 1 AND queue = 'q'",
            "SELECT count(*) FROM squeueha_jobs WHERE state <> 0 AND state = 1 AND queue = 'q'",
        ] {
            let p = plan(&conn, sql);
            assert!(p.contains("squeueha_jobs_timed"), "{sql}: {p}");
        }
    }
}
