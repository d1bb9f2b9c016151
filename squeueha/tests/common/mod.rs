//! The conformance harness: the same test body runs on SQLite (a file in a temporary directory)
//! and on PostgreSQL (a fresh schema per test in the database of `HOROS_PG_URL`, dropped at the
//! end). Without `HOROS_PG_URL` the PostgreSQL runs skip with a message; with
//! `HOROS_REQUIRE_POSTGRES=1` they fail instead.
#![allow(clippy::unwrap_used, dead_code)]

use squeueha::{Config, Queue};

/// Runs `f` off any async runtime: the synchronous PostgreSQL driver blocks on a runtime of its
/// own, which it may not start on a thread that drives async tasks.
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

/// Which storage a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The PostgreSQL backend when it can run here; `None` (after a message) when it cannot and
    /// is not required.
    pub fn postgres(test: &str) -> Option<Backend> {
        let why = if !cfg!(feature = "postgres") {
            "squeueha was built without the feature `postgres`"
        } else if std::env::var("HOROS_PG_URL").is_err() {
            "HOROS_PG_URL is not set (scripts/setup_postgres.sh prints it)"
        } else {
            return Some(Backend::Postgres);
        };
        horos_testkit::skip_or_fail(
            "HOROS_REQUIRE_POSTGRES",
            &format!("{test} cannot run on PostgreSQL: {why}"),
        );
        None
    }
}

/// One test's database: a temporary SQLite file, or a PostgreSQL schema of its own.
pub struct Db {
    pub backend: Backend,
    dir: Option<tempfile::TempDir>,
    /// The path (SQLite) or URL (PostgreSQL) to open.
    pub target: String,
    #[cfg(feature = "postgres")]
    schema: Option<String>,
}

impl Db {
    pub fn new(backend: Backend) -> Db {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let target = dir.path().join("q.db").to_str().unwrap().to_owned();
                Db {
                    backend,
                    dir: Some(dir),
                    target,
                    #[cfg(feature = "postgres")]
                    schema: None,
                }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => off_runtime(pg::new_schema),
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => unreachable!("skipped by Backend::postgres"),
        }
    }

    /// A handle on this database (call again for a second handle, as a second node would have).
    pub fn open(&self, cfg: Config) -> Queue {
        off_runtime(|| Queue::open_with(&self.target, cfg).unwrap())
    }
}

#[cfg(feature = "postgres")]
mod pg {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::{Backend, Db};

    static NEXT: AtomicU32 = AtomicU32::new(0);

    fn base_url() -> String {
        std::env::var("HOROS_PG_URL").unwrap()
    }

    pub(super) fn new_schema() -> Db {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let schema = format!(
            "sqh_t{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            nanos
        );
        let mut client = squeueha::pg::Client::connect(&base_url(), squeueha::pg::NoTls).unwrap();
        client
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap();
        let base = base_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        Db {
            backend: Backend::Postgres,
            dir: None,
            target: format!("{base}{sep}options=-c%20search_path%3D{schema}"),
            schema: Some(schema),
        }
    }

    impl Drop for Db {
        fn drop(&mut self) {
            let Some(schema) = self.schema.take() else {
                return;
            };
            // Best effort: a leftover schema only costs space.
            super::off_runtime(|| {
                if let Ok(mut client) =
                    squeueha::pg::Client::connect(&base_url(), squeueha::pg::NoTls)
                {
                    let _ =
                        client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
                }
            });
        }
    }
}

pub fn open_with(b: Backend, cfg: Config) -> (Db, Queue) {
    let db = Db::new(b);
    let q = db.open(cfg);
    (db, q)
}

pub fn open(b: Backend) -> (Db, Queue) {
    open_with(b, Config::default())
}

/// True when `token` is the current fencing token of `name`, checked inside a transaction of the
/// queue's backend.
pub fn fence_passes(q: &Queue, name: &str, token: i64) -> bool {
    match q.backend() {
        #[cfg(feature = "postgres")]
        "postgres" => q
            .pg_transaction(|tx| tx.check_fencing(name, token))
            .unwrap(),
        _ => q.transaction(|tx| tx.check_fencing(name, token)).unwrap(),
    }
}

/// Generates, for each listed test `fn name(b: Backend)`, `sqlite::name` and `postgres::name`
/// (the latter skipped without a server); `async` ones run on a two-thread tokio runtime.
#[macro_export]
macro_rules! on_both_backends {
    (sync: [$($name:ident),* $(,)?], async: [$($aname:ident),* $(,)?] $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::common::Backend::Sqlite)
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $aname() {
                    super::$aname($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(b) = $crate::common::Backend::postgres(stringify!($name)) {
                        super::$name(b)
                    }
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $aname() {
                    if let Some(b) = $crate::common::Backend::postgres(stringify!($aname)) {
                        super::$aname(b).await
                    }
                }
            )*
        }
    };
}
