//! Giving jobs back: nack (the attempt counts), release (it does not), and lease extension.

use rusqlite::{Connection, OptionalExtension, params};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Lease, Millis, Nacked};
use crate::sqlite::state::{DELAYED, READY, state};

use super::{bury, held};

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
    let Some(delay) = cfg.nack_delay(attempts, max_attempts, delay_ms) else {
        bury(conn, lease.job_id, error, now)?;
        return Ok(Nacked::Dead);
    };
    let at = now.saturating_add(delay.max(0));
    let state = if delay <= 0 { READY } else { DELAYED };
    conn.prepare_cached(
        "UPDATE squeueha_jobs SET state = ?2, due_at = ?3, lease_token = NULL, last_error = ?4
         WHERE id = ?1",
    )?
    .execute(params![lease.job_id, state, at, error])?;
    Ok(Nacked::Retry { at })
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
        .prepare_cached(concat!(
            "UPDATE squeueha_jobs SET due_at = ?3 WHERE id = ?1 AND lease_token = ?2 AND state = ",
            state!(in_flight)
        ))?
        .execute(params![lease.job_id, lease.token, until])?;
    held(changed, lease)?;
    Ok(until)
}
