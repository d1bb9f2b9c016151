//! Leader election with fencing tokens.

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;
use crate::job::Millis;

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
