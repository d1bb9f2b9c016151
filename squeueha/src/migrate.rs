//! Versioned, namespaced schema migrations for every crate that keeps tables in a squeueha file.
//!
//! Each crate registers its own numbered [`Migration`]s under a namespace of its own
//! ([`Migrations`]). The file records one row per namespace in [`VERSIONS_TABLE`]: the version its
//! tables are at. Opening applies the steps above that version, in order, in one `BEGIN IMMEDIATE`
//! transaction; a file whose version is above the newest step this build knows (written by a newer
//! release) is refused with [`Error::SchemaTooNew`] and left unchanged.

use rusqlite::{Connection, OptionalExtension};

use crate::error::{Error, Result};
use crate::job::now_ms;

/// The table holding one `(namespace, version, applied_at)` row per namespace.
///
/// Its shape is a stable format: a crate that cannot depend on squeueha may keep its version row
/// here with the same rules (refuse a version above its own, apply the steps above the recorded
/// one).
pub const VERSIONS_TABLE: &str = "squeueha_schema";

const CREATE_VERSIONS: &str = "CREATE TABLE IF NOT EXISTS squeueha_schema (
    namespace  TEXT    PRIMARY KEY,
    version    INTEGER NOT NULL,
    applied_at INTEGER NOT NULL
) WITHOUT ROWID";

/// [`VERSIONS_TABLE`] on PostgreSQL.
pub(crate) const PG_CREATE_VERSIONS: &str = "CREATE TABLE IF NOT EXISTS squeueha_schema (
    namespace  TEXT   PRIMARY KEY,
    version    BIGINT NOT NULL,
    applied_at BIGINT NOT NULL
)";

/// One numbered step of a namespace's schema.
///
/// Never edit a released step: append a new one. Version 1 of a crate whose tables existed before
/// it was versioned must be idempotent (`CREATE TABLE IF NOT EXISTS ...`), so that files written
/// by that earlier release are adopted unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version the file is at once this step ran: 1 for the first, then 2, 3, ...
    pub version: i64,
    /// The SQL of the step (one or more statements).
    pub sql: &'static str,
}

/// A namespace's migrations: the steps that build its tables, in order.
///
/// ```
/// use squeueha::{Migration, Migrations};
///
/// const SCHEMA: Migrations = Migrations::new(
///     "my_crate",
///     &[Migration { version: 1, sql: "CREATE TABLE my_crate_items (id INTEGER PRIMARY KEY)" }],
/// );
///
/// # fn main() -> squeueha::Result<()> {
/// let conn = rusqlite::Connection::open_in_memory()?;
/// assert_eq!(SCHEMA.apply(&conn)?, 1);
/// assert_eq!(SCHEMA.apply(&conn)?, 1); // nothing applied twice
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    namespace: &'static str,
    steps: &'static [Migration],
    postgres_steps: &'static [Migration],
    legacy_table: Option<&'static str>,
}

impl Migrations {
    /// The steps of `namespace` (`version` 1, 2, 3, ... in order).
    pub const fn new(namespace: &'static str, steps: &'static [Migration]) -> Self {
        Migrations {
            namespace,
            steps,
            postgres_steps: &[],
            legacy_table: None,
        }
    }

    /// The same versions written for PostgreSQL (its types and DDL differ from SQLite's), used
    /// by [`apply_in_tx`](Self::apply_in_tx) on a PostgreSQL queue. Step `n` of both lists must
    /// build the same tables.
    pub const fn with_postgres(self, steps: &'static [Migration]) -> Self {
        Migrations {
            postgres_steps: steps,
            ..self
        }
    }

    /// Earlier releases recorded this namespace's versions in a table of their own, `table`
    /// (`version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL`): the file's version is the
    /// newer of that table's and the namespace's row, and every step applied is recorded there as
    /// well, so that those releases' own checks go on working on the file.
    pub const fn with_legacy_table(self, table: &'static str) -> Self {
        Migrations {
            legacy_table: Some(table),
            ..self
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &'static str {
        self.namespace
    }

    /// The newest version this build knows (0 without steps).
    pub fn latest(&self) -> i64 {
        self.steps.last().map_or(0, |m| m.version)
    }

    fn check_steps(&self) -> Result<()> {
        if self.namespace.is_empty() {
            return Err(Error::InvalidArgument(
                "a migration namespace must not be empty".into(),
            ));
        }
        // Each list numbered 1, 2, 3, ... on its own (PostgreSQL's may be absent).
        let numbered = self.steps.iter().enumerate();
        for (i, step) in numbered.chain(self.postgres_steps.iter().enumerate()) {
            if step.version != i as i64 + 1 {
                return Err(Error::InvalidArgument(format!(
                    "migrations of {}: step {} has version {}, expected {}",
                    self.namespace,
                    i + 1,
                    step.version,
                    i + 1
                )));
            }
        }
        Ok(())
    }

    /// The version the file's tables of this namespace are at (0: none yet).
    pub fn current(&self, conn: &Connection) -> Result<i64> {
        let exists = |table: &str| -> Result<bool> {
            Ok(conn
                .query_row(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table],
                    |_| Ok(()),
                )
                .optional()?
                .is_some())
        };
        let mut version = 0;
        if exists(VERSIONS_TABLE)? {
            let recorded: Option<i64> = conn
                .query_row(
                    "SELECT version FROM squeueha_schema WHERE namespace = ?1",
                    [self.namespace],
                    |r| r.get(0),
                )
                .optional()?;
            version = recorded.unwrap_or(0);
        }
        if let Some(table) = self.legacy_table
            && exists(table)?
        {
            let legacy: Option<i64> =
                conn.query_row(&format!("SELECT max(version) FROM \"{table}\""), [], |r| {
                    r.get(0)
                })?;
            version = version.max(legacy.unwrap_or(0));
        }
        Ok(version)
    }

    /// Brings the namespace's tables to [`latest`](Self::latest) and returns that version.
    ///
    /// Runs in the caller's transaction when `conn` is inside one (the steps then commit or roll
    /// back with it), otherwise in a `BEGIN IMMEDIATE` transaction of its own. Fails with
    /// [`Error::SchemaTooNew`], changing nothing, when the file is at a newer version than this
    /// build knows.
    pub fn apply(&self, conn: &Connection) -> Result<i64> {
        self.check_steps()?;
        if !conn.is_autocommit() {
            return self.apply_in(conn);
        }
        // Already recorded at the latest version, and no newer legacy row (the usual case at
        // every open): reads only, no write lock, no commit.
        let latest = self.latest();
        let recorded: Option<i64> = conn
            .query_row(
                "SELECT version FROM squeueha_schema WHERE namespace = ?1",
                [self.namespace],
                |r| r.get(0),
            )
            .optional()
            .unwrap_or(None);
        if recorded == Some(latest) && self.current(conn)? == latest {
            return Ok(latest);
        }
        conn.execute_batch("BEGIN IMMEDIATE")?;
        match self.apply_in(conn) {
            Ok(v) => match conn.execute_batch("COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    Err(e.into())
                }
            },
            Err(e) => {
                if !conn.is_autocommit() {
                    // Best effort: a failed ROLLBACK leaves SQLite to roll back at close.
                    let _ = conn.execute_batch("ROLLBACK");
                }
                Err(e)
            }
        }
    }

    /// Brings the namespace's tables to [`latest`](Self::latest) inside a queue transaction, on
    /// either backend: SQLite's steps through [`apply`](Self::apply), PostgreSQL's (see
    /// [`with_postgres`](Self::with_postgres)) under a transaction-level advisory lock, so that
    /// nodes starting at once apply each step once. Fails with [`Error::SchemaTooNew`] on a
    /// database a newer release wrote, and with [`Error::Unsupported`] on PostgreSQL when the
    /// namespace has no PostgreSQL steps.
    pub fn apply_in_tx(&self, tx: &mut crate::QueueTx<'_>) -> Result<i64> {
        if tx.backend() == "sqlite" {
            return self.apply(tx.connection()?);
        }
        self.check_steps()?;
        if self.postgres_steps.len() != self.steps.len() {
            return Err(Error::Unsupported {
                backend: "postgres",
                what: "a migration namespace without PostgreSQL steps (Migrations::with_postgres)",
            });
        }
        // One advisory lock per namespace, keyed by a hash of its name.
        let key = self.namespace.bytes().fold(0x5151_u64, |h, b| {
            h.wrapping_mul(31).wrapping_add(u64::from(b))
        });
        tx.execute(
            "SELECT pg_advisory_xact_lock(?1)",
            crate::params![i64::from_ne_bytes(key.to_ne_bytes())],
        )?;
        tx.execute_batch(PG_CREATE_VERSIONS)?;
        let current: i64 = match tx.query_opt(
            "SELECT version FROM squeueha_schema WHERE namespace = ?1",
            crate::params![self.namespace],
        )? {
            Some(row) => row.get(0)?,
            None => 0,
        };
        let latest = self.latest();
        if current > latest {
            return Err(Error::SchemaTooNew {
                namespace: self.namespace.to_owned(),
                found: current,
                supported: latest,
            });
        }
        for step in self.postgres_steps.iter().filter(|m| m.version > current) {
            tx.execute_batch(step.sql)?;
        }
        if current < latest {
            tx.execute(
                "INSERT INTO squeueha_schema (namespace, version, applied_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (namespace) DO UPDATE SET version = excluded.version,
                     applied_at = excluded.applied_at",
                crate::params![self.namespace, latest, now_ms()],
            )?;
        }
        Ok(latest)
    }

    fn apply_in(&self, conn: &Connection) -> Result<i64> {
        let current = self.current(conn)?;
        let latest = self.latest();
        if current > latest {
            return Err(Error::SchemaTooNew {
                namespace: self.namespace.to_owned(),
                found: current,
                supported: latest,
            });
        }
        conn.execute_batch(CREATE_VERSIONS)?;
        let now = now_ms();
        if let Some(table) = self.legacy_table {
            conn.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS \"{table}\" (
                     version    INTEGER PRIMARY KEY,
                     applied_at INTEGER NOT NULL
                 )"
            ))?;
        }
        for step in self.steps.iter().filter(|m| m.version > current) {
            conn.execute_batch(step.sql)?;
            if let Some(table) = self.legacy_table {
                conn.execute(
                    &format!("INSERT INTO \"{table}\" (version, applied_at) VALUES (?1, ?2)"),
                    (step.version, now),
                )?;
            }
        }
        conn.execute(
            "INSERT INTO squeueha_schema (namespace, version, applied_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (namespace) DO UPDATE SET version = excluded.version,
                 applied_at = CASE WHEN squeueha_schema.version = excluded.version
                                   THEN squeueha_schema.applied_at ELSE excluded.applied_at END",
            (self.namespace, latest, now),
        )?;
        Ok(latest)
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{Migration, Migrations};
    use crate::error::Error;

    const V1: &[Migration] = &[Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS t_items (id INTEGER PRIMARY KEY)",
    }];
    const V2: &[Migration] = &[
        V1[0],
        Migration {
            version: 2,
            sql: "ALTER TABLE t_items ADD COLUMN name TEXT",
        },
    ];

    fn version(conn: &Connection, ns: &str) -> Option<i64> {
        conn.query_row(
            "SELECT version FROM squeueha_schema WHERE namespace = ?1",
            [ns],
            |r| r.get(0),
        )
        .ok()
    }

    #[test]
    fn steps_run_once_in_order_and_an_older_file_upgrades() {
        let conn = Connection::open_in_memory().unwrap();
        assert_eq!(Migrations::new("t", V1).apply(&conn).unwrap(), 1);
        conn.execute("INSERT INTO t_items (id) VALUES (7)", [])
            .unwrap();
        assert_eq!(Migrations::new("t", V2).apply(&conn).unwrap(), 2);
        assert_eq!(Migrations::new("t", V2).apply(&conn).unwrap(), 2);
        let kept: i64 = conn
            .query_row("SELECT id FROM t_items WHERE name IS NULL", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kept, 7);
        assert_eq!(version(&conn, "t"), Some(2));
    }

    #[test]
    fn a_newer_namespace_is_refused_and_nothing_changes() {
        let conn = Connection::open_in_memory().unwrap();
        Migrations::new("t", V2).apply(&conn).unwrap();
        let err = Migrations::new("t", V1).apply(&conn).unwrap_err();
        assert!(
            matches!(&err, Error::SchemaTooNew { namespace, found: 2, supported: 1 } if namespace == "t"),
            "{err:?}"
        );
        assert!(conn.is_autocommit(), "the transaction was closed");
        assert_eq!(version(&conn, "t"), Some(2));
        // Other namespaces are independent.
        assert_eq!(Migrations::new("u", V1).apply(&conn).unwrap(), 1);
    }

    #[test]
    fn a_legacy_table_is_adopted_and_kept_up_to_date() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE old_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO old_migrations VALUES (1, 0);
             CREATE TABLE t_items (id INTEGER PRIMARY KEY);",
        )
        .unwrap();
        let m = Migrations::new("t", V2).with_legacy_table("old_migrations");
        assert_eq!(m.current(&conn).unwrap(), 1);
        assert_eq!(m.apply(&conn).unwrap(), 2);
        let legacy: i64 = conn
            .query_row("SELECT max(version) FROM old_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(legacy, 2);
        // A legacy table at a newer version is refused too.
        conn.execute("INSERT INTO old_migrations VALUES (5, 0)", [])
            .unwrap();
        assert!(matches!(
            m.apply(&conn),
            Err(Error::SchemaTooNew { found: 5, .. })
        ));
    }

    #[test]
    fn an_up_to_date_file_is_only_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let m = Migrations::new("t", V2);
        assert_eq!(m.apply(&Connection::open(&path).unwrap()).unwrap(), 2);
        // A read-only connection cannot take the write lock: applying again must not need it.
        let ro =
            Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        assert_eq!(m.apply(&ro).unwrap(), 2);
    }

    #[test]
    fn steps_out_of_order_are_refused() {
        const BAD: &[Migration] = &[Migration {
            version: 2,
            sql: "SELECT 1",
        }];
        let conn = Connection::open_in_memory().unwrap();
        assert!(matches!(
            Migrations::new("t", BAD).apply(&conn),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn inside_a_callers_transaction_the_steps_roll_back_with_it() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("BEGIN").unwrap();
        Migrations::new("t", V1).apply(&conn).unwrap();
        conn.execute_batch("ROLLBACK").unwrap();
        assert_eq!(Migrations::new("t", V1).current(&conn).unwrap(), 0);
    }

    #[test]
    fn postgres_steps_are_numbered_on_their_own() {
        const BAD: &[Migration] = &[Migration {
            version: 2,
            sql: "CREATE TABLE t_items (id BIGINT PRIMARY KEY)",
        }];
        let conn = Connection::open_in_memory().unwrap();
        let good = Migrations::new("t", V2).with_postgres(V2);
        assert_eq!(good.apply(&conn).unwrap(), 2);
        let bad = Migrations::new("u", V1).with_postgres(BAD);
        assert!(matches!(
            bad.apply(&conn),
            Err(Error::InvalidArgument(m)) if m.contains("version 2, expected 1")
        ));
    }
}
