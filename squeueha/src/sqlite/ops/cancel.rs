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
