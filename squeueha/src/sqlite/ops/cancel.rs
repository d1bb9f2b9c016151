//! Cancellation of pending work.

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::sqlite::state::state;

/// Deletes a ready or delayed job (cancellation); in-flight jobs are left to their holder.
pub(crate) fn cancel(conn: &Connection, job_id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached(concat!(
            "DELETE FROM squeueha_jobs WHERE id = ?1 AND state IN (",
            state!(ready),
            ", ",
            state!(delayed),
            ")"
        ))?
        .execute(params![job_id])?
        > 0)
}

/// Deletes a ready or delayed job of `queue` only: a job of another queue with that id is left
/// as it is (a caller scoped to its own queue cannot reach another's work).
pub(crate) fn cancel_in(conn: &Connection, queue: &str, job_id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached(concat!(
            "DELETE FROM squeueha_jobs WHERE id = ?1 AND queue = ?2 AND state IN (",
            state!(ready),
            ", ",
            state!(delayed),
            ")"
        ))?
        .execute(params![job_id, queue])?
        > 0)
}
