//! Retention: old done jobs and expired dedup keys.

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::job::Millis;
use crate::sqlite::state::state;

pub(crate) fn purge_done(conn: &Connection, before: Millis) -> Result<usize> {
    Ok(conn
        .prepare_cached(concat!(
            "DELETE FROM squeueha_jobs WHERE state <> ",
            state!(ready),
            " AND state = ",
            state!(done),
            " AND due_at <= ?1"
        ))?
        .execute(params![before])?)
}

pub(crate) fn purge_dedup(conn: &Connection, before: Millis) -> Result<usize> {
    Ok(conn
        .prepare_cached("DELETE FROM squeueha_dedup WHERE created_at <= ?1")?
        .execute(params![before])?)
}
