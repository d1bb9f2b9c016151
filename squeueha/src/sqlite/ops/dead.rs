//! The dead-letter table: burying, listing, requeueing and purging.

use rusqlite::{Connection, OptionalExtension, params};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{DeadJob, Millis, NewJob};
use crate::sqlite::IdBlock;

use super::enqueue;

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

/// Dead letters of `queue` that died after `after` (a `(died_at, id)` cursor), oldest first.
pub(crate) fn list_dead(
    conn: &Connection,
    queue: &str,
    after: (Millis, i64),
    limit: usize,
) -> Result<Vec<DeadJob>> {
    // The range on died_at uses the (queue, died_at) index; the id breaks ties within a ms.
    let mut stmt = conn.prepare_cached(
        "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
         FROM squeueha_dead WHERE queue = ?1 AND died_at >= ?2 AND (died_at > ?2 OR id > ?3)
         ORDER BY died_at, id LIMIT ?4",
    )?;
    let rows = stmt.query_map(
        params![
            queue,
            after.0,
            after.1,
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        dead_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The newest `limit` dead letters of `queue`, newest death first.
pub(crate) fn list_dead_newest(
    conn: &Connection,
    queue: &str,
    limit: usize,
) -> Result<Vec<DeadJob>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
         FROM squeueha_dead WHERE queue = ?1 ORDER BY died_at DESC, id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        params![queue, i64::try_from(limit).unwrap_or(i64::MAX)],
        dead_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The dead letter whose job had id `id`, if there is one.
pub(crate) fn get_dead(conn: &Connection, id: i64) -> Result<Option<DeadJob>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, queue, payload, priority, attempts, last_error, enqueued_at, died_at
             FROM squeueha_dead WHERE id = ?1",
        )?
        .query_row(params![id], dead_row)
        .optional()?)
}

/// A row of `squeueha_dead` selected as above.
fn dead_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeadJob> {
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
