//! The queue's tables on PostgreSQL, versioned in `squeueha_schema` (namespace `squeueha`, the
//! same table and rules as on SQLite: a database whose version is newer than this build's is
//! refused and left unchanged). Migrations run under a transaction-level advisory lock, so nodes
//! opening the same database at once apply each step once.

use ::postgres::Client;

use crate::error::{Error, Result};
use crate::job::now_ms;

/// Never edit a released step: append a new one.
const STEPS: &[(i64, &str)] = &[
    (
        1,
        r#"
    -- state: 0 ready, 1 in flight (version 1 only), 2 delayed, 3 done (retained); due_at as on SQLite:
    -- ready -> when it became ready; in flight -> lease expiry; delayed -> when it becomes ready;
    -- done -> finish time. Ids come from a sequence: never reused.
    CREATE TABLE squeueha_jobs (
        id           BIGINT  PRIMARY KEY,
        queue        TEXT    NOT NULL,
        state        INTEGER NOT NULL,
        priority     INTEGER NOT NULL,
        due_at       BIGINT  NOT NULL,
        lease_token  BIGINT,
        attempts     INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        enqueued_at  BIGINT  NOT NULL,
        last_error   TEXT,
        payload      BYTEA   NOT NULL
    );
    CREATE SEQUENCE squeueha_jobs_id_seq;
    -- Only claimable rows: a claim reads exactly the rows it takes.
    CREATE INDEX squeueha_jobs_ready ON squeueha_jobs (queue, priority DESC, due_at, id)
        WHERE state = 0;
    -- Timers (leases and delays) and retained jobs.
    CREATE INDEX squeueha_jobs_timed ON squeueha_jobs (state, queue, due_at) WHERE state <> 0;

    CREATE TABLE squeueha_dead (
        id           BIGINT  PRIMARY KEY,
        queue        TEXT    NOT NULL,
        priority     INTEGER NOT NULL,
        attempts     INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        enqueued_at  BIGINT  NOT NULL,
        died_at      BIGINT  NOT NULL,
        last_error   TEXT,
        payload      BYTEA   NOT NULL
    );
    CREATE INDEX squeueha_dead_queue ON squeueha_dead (queue, died_at, id);

    CREATE TABLE squeueha_dedup (
        queue      TEXT   NOT NULL,
        key        TEXT   NOT NULL,
        job_id     BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (queue, key)
    );
    CREATE INDEX squeueha_dedup_age ON squeueha_dedup (created_at);

    CREATE TABLE squeueha_leaders (
        name        TEXT   PRIMARY KEY,
        holder      TEXT   NOT NULL,
        fencing     BIGINT NOT NULL,
        expires_at  BIGINT NOT NULL
    );
    "#,
    ),
    (
        2,
        r#"
    -- One row per claimed batch instead of one update per job: a claim deletes its jobs from
    -- squeueha_jobs and writes them here as one array, an ack takes them out of it. A job row is
    -- then written once in its life (its delete), where a claim that moved it between the ready
    -- and the timers' indexes wrote a new version of every job and two index entries for each.
    -- State 1 (in flight) is no longer stored in squeueha_jobs.
    CREATE TYPE squeueha_leased AS (
        id           BIGINT,
        priority     INTEGER,
        attempts     INTEGER,
        max_attempts INTEGER,
        enqueued_at  BIGINT,
        last_error   TEXT,
        payload      BYTEA
    );
    CREATE TABLE squeueha_leases (
        token      BIGINT NOT NULL,
        queue      TEXT   NOT NULL,
        expires_at BIGINT NOT NULL,
        -- The jobs' ids (the same set as in `jobs`): acks and lookups read these, not the jobs.
        ids        BIGINT[] NOT NULL,
        jobs       squeueha_leased[] NOT NULL,
        PRIMARY KEY (token, queue)
    );
    CREATE INDEX squeueha_leases_expiry ON squeueha_leases (queue, expires_at);
    -- Jobs in flight when the database is upgraded keep their holder and their (latest) expiry.
    -- A lease row's token is even, a large job's own in-flight row's odd (acks tell them apart
    -- by it): jobs whose token is odd stay in their rows.
    INSERT INTO squeueha_leases (token, queue, expires_at, ids, jobs)
        SELECT lease_token, queue, max(due_at), array_agg(id ORDER BY id),
               array_agg(ROW(id, priority, attempts, max_attempts, enqueued_at, last_error,
                             payload)::squeueha_leased ORDER BY id)
        FROM squeueha_jobs WHERE state = 1 AND lease_token % 2 = 0
        GROUP BY lease_token, queue;
    DELETE FROM squeueha_jobs WHERE state = 1 AND lease_token % 2 = 0;
    "#,
    ),
    (
        3,
        r#"
    -- A lease row's jobs are compressed with LZ4 where the server has it (built --with-lz4, as
    -- Debian's and most others are): several times quicker than the default pglz, and every claim
    -- compresses one. Elsewhere the default stays.
    DO $lz4$ BEGIN
        ALTER TABLE squeueha_leases ALTER COLUMN jobs SET COMPRESSION lz4;
    EXCEPTION WHEN feature_not_supported THEN NULL;
    END $lz4$;
    -- A function that version 2 once had (a claim aborted itself through it): gone.
    DROP FUNCTION IF EXISTS squeueha_ack_not_whole();
    "#,
    ),
];

/// The newest version of the queue's schema on PostgreSQL.
pub(crate) const PG_SCHEMA_VERSION: i64 = 3;

/// An advisory lock key of the queue's migrations ("squeueha" in ASCII, truncated).
const MIGRATION_LOCK: i64 = 0x7371_7565_7565_6861;

/// Applies the steps above the database's version in one transaction.
pub(crate) fn migrate(client: &mut Client) -> Result<i64> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(crate::migrate::PG_CREATE_VERSIONS)?;
    let found: i64 = tx
        .query_opt(
            "SELECT version FROM squeueha_schema WHERE namespace = 'squeueha'",
            &[],
        )?
        .map(|r| r.get(0))
        .unwrap_or(0);
    if found > PG_SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            namespace: "squeueha".into(),
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    for (version, sql) in STEPS.iter().filter(|(v, _)| *v > found) {
        tx.batch_execute(sql)?;
        tx.execute(
            "INSERT INTO squeueha_schema (namespace, version, applied_at) VALUES ('squeueha', $1, $2)
             ON CONFLICT (namespace) DO UPDATE SET version = $1, applied_at = $2",
            &[version, &now_ms()],
        )
        ?;
    }
    tx.commit()?;
    Ok(PG_SCHEMA_VERSION.max(found))
}

#[cfg(test)]
mod tests {
    #[test]
    fn schema_version_is_the_last_step() {
        assert_eq!(
            super::STEPS.last().map(|s| s.0),
            Some(super::PG_SCHEMA_VERSION)
        );
    }
}
