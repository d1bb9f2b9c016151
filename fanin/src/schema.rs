//! Fan-in tables: namespace `fanin` of squeueha's migrator, whose versions earlier releases recorded
//! in `fanin_migrations` (still kept up to date).

use rusqlite::Connection;
use squeueha::{Migration, Migrations};

use crate::error::Result;

/// Never edit a released step: append a new one.
const STEPS: &[Migration] = &[Migration {
    version: 1,
    sql: r#"
    -- done + failed + cancelled == total is the "last fragment?" test: O(1), whatever N.
    CREATE TABLE fanin_parents (
        id            INTEGER PRIMARY KEY,
        label         TEXT    NOT NULL,
        state         INTEGER NOT NULL,
        policy        INTEGER NOT NULL,
        total         INTEGER NOT NULL,
        done          INTEGER NOT NULL DEFAULT 0,
        failed        INTEGER NOT NULL DEFAULT 0,
        cancelled     INTEGER NOT NULL DEFAULT 0,
        fragment_queue TEXT   NOT NULL,
        up_parent     INTEGER,
        up_index      INTEGER,
        next_queue    TEXT,
        next_data     TEXT,
        next_priority INTEGER,
        created_at    INTEGER NOT NULL,
        finished_at   INTEGER
    );
    CREATE INDEX fanin_parents_state ON fanin_parents (state, id);
    -- state: 0 pending, 1 done, 2 failed, 3 cancelled. kind: 0 job, 1 child parent.
    CREATE TABLE fanin_fragments (
        parent_id   INTEGER NOT NULL,
        idx         INTEGER NOT NULL,
        kind        INTEGER NOT NULL,
        state       INTEGER NOT NULL,
        job_id      INTEGER,
        child_id    INTEGER,
        result      BLOB,
        result_path TEXT,
        error       TEXT,
        PRIMARY KEY (parent_id, idx)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX fanin_fragments_job ON fanin_fragments (job_id) WHERE job_id IS NOT NULL;
    "#,
}];

/// The fan-in schema.
pub(crate) const MIGRATIONS: Migrations =
    Migrations::new("fanin", STEPS).with_legacy_table("fanin_migrations");

/// Brings the fan-in tables to this build's version; a file written by a newer release is
/// refused (`squeueha::Error::SchemaTooNew`).
pub(crate) fn migrate(conn: &Connection) -> Result<()> {
    MIGRATIONS.apply(conn)?;
    Ok(())
}
