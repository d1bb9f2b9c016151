//! Claims: due timers promoted, then the highest-priority, oldest ready jobs leased.

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::job::{Job, Lease, Millis};
use crate::sqlite::state::{state, timer_states};

use super::check_queue_name;

/// Makes due timers effective for `queue`: delayed jobs whose time has come become ready, expired
/// leases become ready again, or dead when their attempts are used up.
pub(crate) fn promote_due(conn: &Connection, queue: &str, now: Millis) -> Result<usize> {
    let any: Option<i64> = conn
        .prepare_cached(concat!(
            "SELECT 1 FROM squeueha_jobs WHERE ",
            timer_states!(),
            " AND queue = ?1 AND due_at <= ?2 LIMIT 1"
        ))?
        .query_row(params![queue, now], |r| r.get(0))
        .optional()?;
    if any.is_none() {
        return Ok(0);
    }
    conn.prepare_cached(
        concat!("INSERT INTO squeueha_dead
             (id, queue, priority, attempts, max_attempts, enqueued_at, died_at, last_error, payload)
         SELECT id, queue, priority, attempts, max_attempts, enqueued_at, ?2,
                'lease expired on attempt ' || attempts || ' of ' || max_attempts
                || ' (worker crashed or too slow)'
                || coalesce('; last error: ' || last_error, ''),
                payload
         FROM squeueha_jobs
         WHERE state <> ", state!(ready), " AND state = ", state!(in_flight), " AND queue = ?1 AND due_at <= ?2
               AND attempts >= max_attempts"),
    )?
    .execute(params![queue, now])?;
    conn.prepare_cached(concat!(
        "DELETE FROM squeueha_jobs
         WHERE state <> ",
        state!(ready),
        " AND state = ",
        state!(in_flight),
        " AND queue = ?1 AND due_at <= ?2
               AND attempts >= max_attempts"
    ))?
    .execute(params![queue, now])?;
    let promoted = conn
        .prepare_cached(concat!(
            "UPDATE squeueha_jobs SET state = ",
            state!(ready),
            ", lease_token = NULL
             WHERE ",
            timer_states!(),
            " AND queue = ?1 AND due_at <= ?2"
        ))?
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
    let mut stmt = conn.prepare_cached(concat!(
        "UPDATE squeueha_jobs
         SET state = ",
        state!(in_flight),
        ", lease_token = ?3, due_at = ?4, attempts = attempts + 1
         WHERE id IN (SELECT id FROM squeueha_jobs WHERE queue = ?1 AND state = ",
        state!(ready),
        "
                      ORDER BY priority DESC, due_at, id LIMIT ?2)
         RETURNING id, priority, attempts, max_attempts, enqueued_at, payload"
    ))?;
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
