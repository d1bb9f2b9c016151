//! The queue's SQL on PostgreSQL. Every function runs through a [`Ctx`]: a pooled connection in
//! autocommit, or a transaction (the store's own, or the caller's [`PgQueueTx`](crate::PgQueueTx)).
//! State codes as on SQLite: 0 ready, 1 in flight, 2 delayed, 3 done. A small job in flight (see
//! `LEASED_PAYLOAD_MAX`) is not a row of `squeueha_jobs` but an element of its claimed batch's
//! lease row (`squeueha_leases`), where the claim moved it: its row is written once in its life
//! (deleted by the claim), not updated by the claim and deleted by the ack.

use ::postgres::{GenericClient, Row};
use sha2::{Digest, Sha256};

use super::Ctx;
use crate::config::{Config, DedupWindow};
use crate::error::{Error, Result};
use crate::job::{DeadJob, Dedup, Enqueued, JobInfo, JobState, Millis, NewJob, millis};
use crate::stats::QueueStats;

pub(super) const READY: i32 = 0;
pub(super) const DELAYED: i32 = 2;

fn job_state(code: i32) -> JobState {
    match code {
        0 => JobState::Ready,
        1 => JobState::InFlight,
        2 => JobState::Delayed,
        _ => JobState::Done,
    }
}

fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

pub(super) fn unsigned(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

pub(super) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn check_queue_name(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.len() > 200 {
        return Err(Error::InvalidArgument(format!(
            "queue name must be 1..=200 bytes, got {} bytes",
            queue.len()
        )));
    }
    Ok(())
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

/// Enqueues `jobs`. Jobs with a dedup key need a transaction (`ctx` is one, or the batch has no
/// key and is one statement); the caller checks that.
pub(crate) fn enqueue<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
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
    if jobs.iter().all(|j| matches!(j.dedup, Dedup::None)) {
        return enqueue_plain(ctx, queue, jobs, cfg, now);
    }
    let ids: Vec<i64> = ctx
        .query(
            "SELECT nextval('squeueha_jobs_id_seq') FROM generate_series(1, $1::bigint)",
            &[&limit(jobs.len())],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if ids.len() != jobs.len() {
        return Err(Error::InvalidArgument("job ids not allocated".into()));
    }
    // Dedup windows: a key older than the cutoff is replaced (a new job); a younger one refuses.
    let cutoff = match cfg.dedup_window {
        DedupWindow::Permanent => i64::MIN,
        DedupWindow::Window(w) => now.saturating_sub(millis(w)),
    };
    let mut out = Vec::with_capacity(jobs.len());
    let mut new = Vec::with_capacity(jobs.len());
    for (job, id) in jobs.iter().zip(ids) {
        if let Some(key) = dedup_key(job) {
            let fresh = ctx.query_opt(
                "INSERT INTO squeueha_dedup (queue, key, job_id, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (queue, key) DO UPDATE SET job_id = EXCLUDED.job_id,
                     created_at = EXCLUDED.created_at
                 WHERE squeueha_dedup.created_at <= $5
                 RETURNING job_id",
                &[&queue, &key, &id, &now, &cutoff],
            )?;
            if fresh.is_none() {
                let existing = ctx
                    .query_opt(
                        "SELECT job_id FROM squeueha_dedup WHERE queue = $1 AND key = $2",
                        &[&queue, &key],
                    )?
                    .map(|r| r.get::<_, i64>(0))
                    .ok_or_else(|| Error::NotFound(format!("dedup key {key}")))?;
                out.push(Enqueued::Duplicate(existing));
                continue;
            }
        }
        out.push(Enqueued::New(id));
        new.push((job, id));
    }
    if new.is_empty() {
        return Ok(out);
    }
    let mut col_id = Vec::with_capacity(new.len());
    let mut col_state = Vec::with_capacity(new.len());
    let mut col_priority = Vec::with_capacity(new.len());
    let mut col_due = Vec::with_capacity(new.len());
    let mut col_attempts = Vec::with_capacity(new.len());
    let mut col_payload: Vec<&[u8]> = Vec::with_capacity(new.len());
    for (job, id) in new {
        let (state, due) = if job.delay.is_zero() {
            (READY, now)
        } else {
            (DELAYED, now.saturating_add(millis(job.delay)))
        };
        let max_attempts = job.max_attempts.unwrap_or(cfg.default_max_attempts).max(1);
        col_id.push(id);
        col_state.push(state);
        col_priority.push(job.priority);
        col_due.push(due);
        col_attempts.push(i32::try_from(max_attempts).unwrap_or(i32::MAX));
        col_payload.push(&job.payload);
    }
    let any_ready = col_state.contains(&READY);
    let origin = ctx.origin;
    ctx.query(
        "WITH ins AS (
             INSERT INTO squeueha_jobs
                 (id, queue, state, priority, due_at, max_attempts, enqueued_at, payload)
             SELECT t.id, $1, t.state, t.priority, t.due_at, t.max_attempts, $2, t.payload
             FROM unnest($3::bigint[], $4::int[], $5::int[], $6::bigint[], $7::int[], $8::bytea[])
                  AS t(id, state, priority, due_at, max_attempts, payload)
             RETURNING 1
         )
         SELECT (SELECT count(*) FROM ins),
                CASE WHEN $9::bool THEN (SELECT 1 FROM (SELECT pg_notify(
                    'squeueha_' || left(md5(current_schema()), 16), $10 || '/' || $1)) n) END",
        &[
            &queue,
            &now,
            &col_id,
            &col_state,
            &col_priority,
            &col_due,
            &col_attempts,
            &col_payload,
            &any_ready,
            &origin,
        ],
    )?;
    Ok(out)
}

/// A batch without dedup keys in one statement (one round trip): ids from the sequence in the
/// batch's order (the rows are numbered after `ORDER BY ord`), returned in that order.
fn enqueue_plain<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
    jobs: &[NewJob],
    cfg: &Config,
    now: Millis,
) -> Result<Vec<Enqueued>> {
    let mut col_state = Vec::with_capacity(jobs.len());
    let mut col_priority = Vec::with_capacity(jobs.len());
    let mut col_due = Vec::with_capacity(jobs.len());
    let mut col_attempts = Vec::with_capacity(jobs.len());
    let mut col_payload: Vec<&[u8]> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let (state, due) = if job.delay.is_zero() {
            (READY, now)
        } else {
            (DELAYED, now.saturating_add(millis(job.delay)))
        };
        let max_attempts = job.max_attempts.unwrap_or(cfg.default_max_attempts).max(1);
        col_state.push(state);
        col_priority.push(job.priority);
        col_due.push(due);
        col_attempts.push(i32::try_from(max_attempts).unwrap_or(i32::MAX));
        col_payload.push(&job.payload);
    }
    let any_ready = col_state.contains(&READY);
    let origin = ctx.origin;
    let ids: Vec<i64> = ctx
        .query(
            "WITH ins AS (
                 INSERT INTO squeueha_jobs
                     (id, queue, state, priority, due_at, max_attempts, enqueued_at, payload)
                 SELECT nextval('squeueha_jobs_id_seq'), $1, t.state, t.priority, t.due_at,
                        t.max_attempts, $2, t.payload
                 FROM unnest($3::int[], $4::int[], $5::bigint[], $6::int[], $7::bytea[])
                      WITH ORDINALITY AS t(state, priority, due_at, max_attempts, payload, ord)
                 ORDER BY t.ord
                 RETURNING id
             )
             SELECT id, CASE WHEN $8::bool THEN (SELECT 1 FROM (SELECT pg_notify(
                        'squeueha_' || left(md5(current_schema()), 16), $9 || '/' || $1)) n) END
             FROM ins ORDER BY id",
            &[
                &queue,
                &now,
                &col_state,
                &col_priority,
                &col_due,
                &col_attempts,
                &col_payload,
                &any_ready,
                &origin,
            ],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if ids.len() != jobs.len() {
        return Err(Error::InvalidArgument(format!(
            "{} of {} jobs inserted",
            ids.len(),
            jobs.len()
        )));
    }
    Ok(ids.into_iter().map(Enqueued::New).collect())
}

/// Deletes a ready or delayed job; in-flight jobs are left to their holder.
pub(crate) fn cancel<C: GenericClient>(ctx: &mut Ctx<'_, C>, job_id: i64) -> Result<bool> {
    Ok(ctx.execute(
        "DELETE FROM squeueha_jobs WHERE id = $1 AND state IN (0, 2)",
        &[&job_id],
    )? > 0)
}

/// Deletes a ready or delayed job of `queue` only; another queue's job with that id is left.
pub(crate) fn cancel_in<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
    job_id: i64,
) -> Result<bool> {
    Ok(ctx.execute(
        "DELETE FROM squeueha_jobs WHERE id = $1 AND queue = $2 AND state IN (0, 2)",
        &[&job_id, &queue],
    )? > 0)
}

pub(crate) fn get<C: GenericClient>(ctx: &mut Ctx<'_, C>, id: i64) -> Result<Option<JobInfo>> {
    if let Some(r) = ctx.query_opt(
        "SELECT id, queue, payload, priority, attempts, max_attempts, last_error, enqueued_at, state
         FROM squeueha_jobs WHERE id = $1",
        &[&id],
    )? {
        return Ok(Some(info_row(&r, job_state(r.get(8)))));
    }
    // A small job in flight: in its batch's lease (few rows, one per claimed batch).
    if let Some(r) = ctx.query_opt(
        "SELECT x.id, s.queue, x.payload, x.priority, x.attempts, x.max_attempts, x.last_error,
                x.enqueued_at
         FROM squeueha_leases s, unnest(s.jobs) x WHERE $1 = ANY(s.ids) AND x.id = $1",
        &[&id],
    )? {
        return Ok(Some(info_row(&r, JobState::InFlight)));
    }
    Ok(ctx
        .query_opt(
            "SELECT id, queue, payload, priority, attempts, max_attempts, last_error, enqueued_at
             FROM squeueha_dead WHERE id = $1",
            &[&id],
        )?
        .map(|r| info_row(&r, JobState::Dead)))
}

/// A job's row read as (id, queue, payload, priority, attempts, max_attempts, last_error,
/// enqueued_at).
fn info_row(r: &Row, state: JobState) -> JobInfo {
    JobInfo {
        id: r.get(0),
        queue: r.get(1),
        state,
        payload: r.get(2),
        priority: r.get(3),
        attempts: unsigned(r.get(4)),
        max_attempts: unsigned(r.get(5)),
        last_error: r.get(6),
        enqueued_at: r.get(7),
    }
}

fn dead_row(r: &Row) -> DeadJob {
    DeadJob {
        id: r.get(0),
        queue: r.get(1),
        payload: r.get(2),
        priority: r.get(3),
        attempts: unsigned(r.get(4)),
        last_error: r.get(5),
        enqueued_at: r.get(6),
        died_at: r.get(7),
    }
}

pub(crate) fn list_dead<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
    after: (Millis, i64),
    n: usize,
) -> Result<Vec<DeadJob>> {
    Ok(ctx
        .query(
            "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
             FROM squeueha_dead WHERE queue = $1 AND (died_at, id) > ($2, $3)
             ORDER BY died_at, id LIMIT $4",
            &[&queue, &after.0, &after.1, &limit(n)],
        )?
        .iter()
        .map(dead_row)
        .collect())
}

pub(crate) fn list_dead_newest<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
    n: usize,
) -> Result<Vec<DeadJob>> {
    Ok(ctx
        .query(
            "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
             FROM squeueha_dead WHERE queue = $1 ORDER BY died_at DESC, id DESC LIMIT $2",
            &[&queue, &limit(n)],
        )?
        .iter()
        .map(dead_row)
        .collect())
}

/// The dead letter whose job had id `id`, if there is one.
pub(crate) fn get_dead<C: GenericClient>(ctx: &mut Ctx<'_, C>, id: i64) -> Result<Option<DeadJob>> {
    Ok(ctx
        .query_opt(
            "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
             FROM squeueha_dead WHERE id = $1",
            &[&id],
        )?
        .as_ref()
        .map(dead_row))
}

/// Puts a dead job back as a new job with fresh attempts; run in a transaction.
pub(crate) fn requeue_dead<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    id: i64,
    cfg: &Config,
    now: Millis,
) -> Result<(String, i64)> {
    let row = ctx
        .query_opt(
            "DELETE FROM squeueha_dead WHERE id = $1
             RETURNING queue, priority, max_attempts, payload",
            &[&id],
        )?
        .ok_or_else(|| Error::NotFound(format!("dead job {id}")))?;
    let queue: String = row.get(0);
    let job = NewJob::new(row.get::<_, Vec<u8>>(3))
        .priority(row.get(1))
        .max_attempts(unsigned(row.get(2)));
    let new_id = enqueue(ctx, &queue, &[job], cfg, now)?
        .first()
        .map(|e| e.id())
        .ok_or_else(|| Error::NotFound(format!("dead job {id}")))?;
    Ok((queue, new_id))
}

pub(crate) fn purge_dead<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
    older_than: Option<Millis>,
) -> Result<usize> {
    let cutoff = older_than.unwrap_or(i64::MAX);
    Ok(count(ctx.execute(
        "DELETE FROM squeueha_dead WHERE queue = $1 AND died_at <= $2",
        &[&queue, &cutoff],
    )?))
}

pub(crate) fn purge_done<C: GenericClient>(ctx: &mut Ctx<'_, C>, before: Millis) -> Result<usize> {
    Ok(count(ctx.execute(
        "DELETE FROM squeueha_jobs WHERE state <> 0 AND state = 3 AND due_at <= $1",
        &[&before],
    )?))
}

pub(crate) fn purge_dedup<C: GenericClient>(ctx: &mut Ctx<'_, C>, before: Millis) -> Result<usize> {
    Ok(count(ctx.execute(
        "DELETE FROM squeueha_dedup WHERE created_at <= $1",
        &[&before],
    )?))
}

pub(crate) fn stats<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
    now: Millis,
) -> Result<QueueStats> {
    let r = ctx
        .query_opt(
            "SELECT count(*) FILTER (WHERE state = 0),
                    count(*) FILTER (WHERE state = 1)
                    + (SELECT coalesce(sum(cardinality(ids)), 0)::bigint FROM squeueha_leases
                       WHERE queue = $1),
                    count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 3),
                    (SELECT count(*) FROM squeueha_dead WHERE queue = $1),
                    min(enqueued_at) FILTER (WHERE state = 0)
             FROM squeueha_jobs WHERE queue = $1",
            &[&queue],
        )?
        .ok_or_else(|| Error::NotFound(format!("stats of {queue}")))?;
    let n = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
    let oldest: Option<i64> = r.get(5);
    Ok(QueueStats {
        queue: queue.to_owned(),
        ready: n(0),
        in_flight: n(1),
        delayed: n(2),
        done: n(3),
        dead: n(4),
        oldest_ready_age_ms: oldest.map(|t| (now - t).max(0)),
    })
}

pub(crate) fn queues<C: GenericClient>(ctx: &mut Ctx<'_, C>) -> Result<Vec<String>> {
    Ok(ctx
        .query(
            "SELECT queue FROM squeueha_jobs UNION SELECT queue FROM squeueha_leases
             UNION SELECT queue FROM squeueha_dead ORDER BY 1",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

pub(crate) fn next_due<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    queue: &str,
) -> Result<Option<Millis>> {
    Ok(ctx
        .query_opt(
            "SELECT least(
                 (SELECT min(due_at) FROM squeueha_jobs
                  WHERE state <> 0 AND state IN (1, 2) AND queue = $1),
                 (SELECT min(expires_at) FROM squeueha_leases WHERE queue = $1))",
            &[&queue],
        )?
        .and_then(|r| r.get(0)))
}

/// One upsert: only an expired leadership, or its own holder renewing, passes. A lapsed term
/// (even the same holder's) gets a new token.
pub(crate) fn try_lead<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    name: &str,
    holder: &str,
    ttl_ms: i64,
    now: Millis,
) -> Result<Option<(i64, Millis)>> {
    let expires = now.saturating_add(ttl_ms.max(1));
    Ok(ctx
        .query_opt(
            "INSERT INTO squeueha_leaders AS l (name, holder, fencing, expires_at)
             VALUES ($1, $2, 1, $4)
             ON CONFLICT (name) DO UPDATE SET holder = $2, expires_at = $4,
                 fencing = CASE WHEN l.expires_at <= $3 THEN l.fencing + 1 ELSE l.fencing END
             WHERE l.expires_at <= $3 OR l.holder = $2
             RETURNING fencing, expires_at",
            &[&name, &holder, &now, &expires],
        )?
        .map(|r| (r.get(0), r.get(1))))
}

pub(crate) fn resign<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    name: &str,
    holder: &str,
    fencing: i64,
) -> Result<bool> {
    Ok(ctx.execute(
        "UPDATE squeueha_leaders SET expires_at = 0
         WHERE name = $1 AND holder = $2 AND fencing = $3",
        &[&name, &holder, &fencing],
    )? > 0)
}

pub(crate) fn leader<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    name: &str,
    now: Millis,
) -> Result<Option<(String, i64, Millis)>> {
    Ok(ctx
        .query_opt(
            "SELECT holder, fencing, expires_at FROM squeueha_leaders
             WHERE name = $1 AND expires_at > $2",
            &[&name, &now],
        )?
        .map(|r| (r.get(0), r.get(1), r.get(2))))
}

/// True when `fencing` is the current, unexpired token of `name`; the leadership row stays locked
/// (`FOR SHARE`) until the transaction ends, so no successor takes over before it commits.
pub(crate) fn check_fencing<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    name: &str,
    fencing: i64,
    now: Millis,
) -> Result<bool> {
    Ok(ctx
        .query_opt(
            "SELECT 1 FROM squeueha_leaders WHERE name = $1 AND fencing = $2 AND expires_at > $3
             FOR SHARE",
            &[&name, &fencing, &now],
        )?
        .is_some())
}
