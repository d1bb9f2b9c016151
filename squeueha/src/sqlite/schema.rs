//! Versioned schema migrations. Each migration runs once, in order, inside `BEGIN IMMEDIATE`, and is
//! recorded in `squeueha_migrations` (not `PRAGMA user_version`: other crates share the file).

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::error::{Error, Result};

/// `(version, SQL)`. Never edit a released entry: append a new one.
const MIGRATIONS: &[(i64, &str)] = &[(
    1,
    r#"
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
)];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 1;

pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS squeueha_migrations (
             version    INTEGER PRIMARY KEY,
             applied_at INTEGER NOT NULL
         )",
    )?;
    let current: i64 = tx
        .query_row("SELECT max(version) FROM squeueha_migrations", [], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .optional()?
        .flatten()
        .unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO squeueha_migrations (version, applied_at) VALUES (?1, ?2)",
            (version, crate::job::now_millis()),
        )?;
    }
    tx.commit()?;
    Ok(())
}
