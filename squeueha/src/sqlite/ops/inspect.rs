//! Reads: one job, stats, queue names, the next due timer.

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;
use crate::job::{JobInfo, JobState, Millis};
use crate::sqlite::state::{DELAYED, IN_FLIGHT, job_state, state};
use crate::stats::QueueStats;

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
                state: job_state(r.get(2)?),
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

pub(crate) fn stats(conn: &Connection, queue: &str, now: Millis) -> Result<QueueStats> {
    let count = |sql: &str| -> Result<u64> {
        Ok(conn
            .prepare_cached(sql)?
            .query_row(params![queue], |r| r.get::<_, i64>(0))?
            .max(0) as u64)
    };
    // Each count reads one partial index, never the whole table.
    let ready = count(concat!(
        "SELECT count(*) FROM squeueha_jobs WHERE queue = ?1 AND state = ",
        state!(ready)
    ))?;
    let in_flight = count(concat!(
        "SELECT count(*) FROM squeueha_jobs WHERE state <> ",
        state!(ready),
        " AND state = ",
        state!(in_flight),
        " AND queue = ?1"
    ))?;
    let delayed = count(concat!(
        "SELECT count(*) FROM squeueha_jobs WHERE state <> ",
        state!(ready),
        " AND state = ",
        state!(delayed),
        " AND queue = ?1"
    ))?;
    let done = count(concat!(
        "SELECT count(*) FROM squeueha_jobs WHERE state <> ",
        state!(ready),
        " AND state = ",
        state!(done),
        " AND queue = ?1"
    ))?;
    let dead = count("SELECT count(*) FROM squeueha_dead WHERE queue = ?1")?;
    let oldest: Option<i64> = conn
        .prepare_cached(concat!(
            "SELECT min(enqueued_at) FROM squeueha_jobs WHERE queue = ?1 AND state = ",
            state!(ready)
        ))?
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
    for state in [IN_FLIGHT, DELAYED] {
        let due: Option<Millis> = conn
            .prepare_cached(concat!(
                "SELECT min(due_at) FROM squeueha_jobs WHERE state <> ",
                state!(ready),
                " AND state = ?2 AND queue = ?1"
            ))?
            .query_row(params![queue, state], |r| r.get(0))?;
        next = match (next, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(next)
}

// Leader election: one row per name; the fencing token grows each time leadership changes hands.
