//! The queue's own tables: namespace `squeueha` of the migrator (`crate::migrate`), whose versions
//! earlier releases recorded in `squeueha_migrations` (still kept up to date, so that they refuse a
//! newer file).

use rusqlite::Connection;

use crate::error::Result;
use crate::migrate::{Migration, Migrations};

/// Never edit a released step: append a new one.
const STEPS: &[Migration] = &[Migration {
    version: 1,
    sql: r#"
    -- state: 0 ready, 1 in flight, 2 delayed, 3 done (retained).
    -- due_at: ready -> when it became ready (FIFO order within a priority);
    --         in flight -> lease expiry; delayed -> when it becomes ready; done -> finish time.
    -- Job ids come from squeueha_meta.next_job_id, allocated once per enqueue batch: never reused
    -- (so dedup keys, dead letters and callers' references always mean the job they meant) without
    -- AUTOINCREMENT's extra write per row.
    CREATE TABLE squeueha_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO squeueha_meta (key, value) VALUES ('next_job_id', 1);
    CREATE TABLE squeueha_jobs (
        id           INTEGER PRIMARY KEY,
        queue        TEXT    NOT NULL,
        state        INTEGER NOT NULL,
        priority     INTEGER NOT NULL,
        due_at       INTEGER NOT NULL,
        lease_token  INTEGER,
        attempts     INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        enqueued_at  INTEGER NOT NULL,
        last_error   TEXT,
        payload      BLOB    NOT NULL
    );
    -- Only claimable rows: in-flight and delayed rows never sit in front of ready ones, so a claim
    -- reads exactly the rows it takes whatever the table size.
    -- (The rowid, i.e. the id, ends every index entry: FIFO ties break by id.)
    CREATE INDEX squeueha_jobs_ready ON squeueha_jobs (queue, priority DESC, due_at)
        WHERE state = 0;
    -- Everything else by state: lease expiries (1) and delays (2) promoted to ready when due,
    -- retained done jobs (3) purged when old. One index, so an enqueue maintains two, not four.
    -- Queries name `state <> 0` verbatim so the planner can prove they may use it.
    CREATE INDEX squeueha_jobs_timed ON squeueha_jobs (state, queue, due_at) WHERE state <> 0;

    CREATE TABLE squeueha_dead (
        id           INTEGER PRIMARY KEY,
        queue        TEXT    NOT NULL,
        priority     INTEGER NOT NULL,
        attempts     INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        enqueued_at  INTEGER NOT NULL,
        died_at      INTEGER NOT NULL,
        last_error   TEXT,
        payload      BLOB    NOT NULL
    );
    CREATE INDEX squeueha_dead_queue ON squeueha_dead (queue, died_at);

    CREATE TABLE squeueha_dedup (
        queue      TEXT    NOT NULL,
        key        TEXT    NOT NULL,
        job_id     INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (queue, key)
    ) WITHOUT ROWID;
    CREATE INDEX squeueha_dedup_age ON squeueha_dedup (created_at);

    CREATE TABLE squeueha_leaders (
        name        TEXT PRIMARY KEY,
        holder      TEXT    NOT NULL,
        fencing     INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) WITHOUT ROWID;
    "#,
}];

/// The queue's schema.
pub(crate) const MIGRATIONS: Migrations =
    Migrations::new("squeueha", STEPS).with_legacy_table("squeueha_migrations");

/// The newest version of the queue's own schema (namespace `squeueha`) this build knows.
pub const SCHEMA_VERSION: i64 = 1;

pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    MIGRATIONS.apply(conn)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn schema_version_is_the_last_step() {
        assert_eq!(super::MIGRATIONS.latest(), super::SCHEMA_VERSION);
    }
}
