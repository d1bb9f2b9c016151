//! The queue's SQL, one file per operation. Every function runs on a connection that is already
//! inside the caller's transaction, so the public API and [`QueueTx`](crate::QueueTx) share one
//! implementation. State codes are named (`crate::sqlite::state`), never written as numbers.

mod cancel;
mod claim;
mod complete;
mod dead;
mod enqueue;
mod housekeeping;
mod inspect;
mod leader;
mod retry;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::job::Lease;

pub(crate) use cancel::{cancel, cancel_in};
pub(crate) use claim::claim;
pub(crate) use complete::ack_many;
pub(crate) use dead::{bury, get_dead, list_dead, list_dead_newest, purge_dead, requeue_dead};
pub(crate) use enqueue::{enqueue, validate};
pub(crate) use housekeeping::{purge_dedup, purge_done};
pub(crate) use inspect::{get, next_due, queues, stats};
pub(crate) use leader::{check_fencing, leader, resign, try_lead};
pub(crate) use retry::{extend, nack, release};

pub(crate) fn check_queue_name(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.len() > 200 {
        return Err(Error::InvalidArgument(format!(
            "queue name must be 1..=200 bytes, got {} bytes",
            queue.len()
        )));
    }
    Ok(())
}

/// `changed` rows by a statement guarded by `lease`: none means the lease is stale.
fn held(changed: usize, lease: Lease) -> Result<()> {
    if changed == 0 {
        return Err(Error::StaleLease {
            job_id: lease.job_id,
        });
    }
    Ok(())
}

/// Fails with `StaleLease` unless `lease` is the job's current lease.
pub(crate) fn check_lease(conn: &Connection, lease: Lease) -> Result<()> {
    conn.prepare_cached("SELECT 1 FROM squeueha_jobs WHERE id = ?1 AND lease_token = ?2")?
        .query_row(params![lease.job_id, lease.token], |_| Ok(()))
        .optional()?
        .ok_or(Error::StaleLease {
            job_id: lease.job_id,
        })
}

#[cfg(test)]
mod plans {
    //! The claim stays fast as the table grows only if these statements seek their partial index.
    use rusqlite::Connection;

    use crate::sqlite::state::{state, timer_states};

    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(|r| r.unwrap())
            .collect::<Vec<_>>();
        rows.join(" | ")
    }

    #[test]
    fn hot_statements_use_their_partial_indexes() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::sqlite::schema::migrate(&mut conn).unwrap();
        let claim = plan(
            &conn,
            concat!(
                "SELECT id FROM squeueha_jobs WHERE queue = 'q' AND state = ",
                state!(ready),
                "
             ORDER BY priority DESC, due_at, id LIMIT 32"
            ),
        );
        assert!(claim.contains("squeueha_jobs_ready"), "{claim}");
        assert!(
            !claim.contains("TEMP B-TREE"),
            "claim must not sort: {claim}"
        );
        for sql in [
            concat!(
                "SELECT 1 FROM squeueha_jobs WHERE ",
                timer_states!(),
                " AND queue = 'q' AND due_at <= 5 LIMIT 1"
            ),
            concat!(
                "SELECT min(due_at) FROM squeueha_jobs WHERE state <> ",
                state!(ready),
                " AND state = ",
                state!(in_flight),
                " AND queue = 'q'"
            ),
            concat!(
                "SELECT count(*) FROM squeueha_jobs WHERE state <> ",
                state!(ready),
                " AND state = ",
                state!(in_flight),
                " AND queue = 'q'"
            ),
        ] {
            let p = plan(&conn, sql);
            assert!(p.contains("squeueha_jobs_timed"), "{sql}: {p}");
        }
        // Dead letters after a cursor: a range of the (queue, died_at) index, in its order.
        let dead = plan(
            &conn,
            "SELECT id FROM squeueha_dead WHERE queue = 'q' AND died_at >= 5
             AND (died_at > 5 OR id > 7) ORDER BY died_at, id LIMIT 10",
        );
        assert!(dead.contains("squeueha_dead_queue"), "{dead}");
        assert!(dead.contains("died_at>"), "not a range: {dead}");
        assert!(!dead.contains("TEMP B-TREE"), "must not sort: {dead}");
    }
}
