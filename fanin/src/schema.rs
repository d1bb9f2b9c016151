//! Fan-in tables, versioned like squeueha's (own migrations table in the same file).

use rusqlite::{Connection, OptionalExtension};

use crate::error::Result;

const MIGRATIONS: &[(i64, &str)] = &[(
    1,
    r#"
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
)];

pub(crate) fn migrate(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS fanin_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )?;
    let current: i64 = conn
        .query_row("SELECT max(version) FROM fanin_migrations", [], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .optional()?
        .flatten()
        .unwrap_or(0);
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        conn.execute_batch(sql)?;
        conn.execute(
            "INSERT INTO fanin_migrations (version, applied_at) VALUES (?1, strftime('%s','now'))",
            [version],
        )?;
    }
    Ok(())
}
