//! Finishing jobs: acks (deleted, or kept as done when retention is on).

use rusqlite::Connection;

use crate::config::Config;
use crate::error::Result;
use crate::job::{Lease, Millis};
use crate::sqlite::state::DONE;
use crate::storage::AckReport;

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
                    "UPDATE squeueha_jobs SET state = {DONE}, due_at = ?2, lease_token = NULL
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
