//! Transactions: the queue's operations and the caller's own SQL in one transaction (a release,
//! the caller's tables beside the queue, statements prepared again after a schema change), and
//! ids that stay unique across handles and rolled-back reservations, on both backends.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use squeueha::{Config, Error, NewJob, Queue};

use crate::common::{Backend, Db, open, open_with};

const VIS: Duration = Duration::from_secs(30);

on_both_backends! {
    sync: [
        release_inside_a_transaction,
        ids_stay_unique_across_handles_and_rolled_back_reservations,
        a_caller_statement_whose_table_changed_is_prepared_again,
        caller_tables_change_with_the_queue_in_one_transaction,
        a_cancel_scoped_to_a_queue_leaves_other_queues_jobs,
    ],
    async: [],
}

fn release_inside_a_transaction(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue("a", NewJob::new(vec![1])).unwrap();
    let job = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    let release = |lease| match b {
        Backend::Sqlite => q.transaction(|tx| tx.release(lease, Duration::ZERO)),
        #[cfg(feature = "postgres")]
        Backend::Postgres => q.pg_transaction(|tx| tx.release(lease, Duration::ZERO)),
        #[cfg(not(feature = "postgres"))]
        Backend::Postgres => unreachable!(),
    };
    release(job.lease).unwrap();
    let again = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    assert_eq!(again.attempts, 1);
    assert!(matches!(release(job.lease), Err(Error::StaleLease { .. })));
}

fn ids_stay_unique_across_handles_and_rolled_back_reservations(backend: Backend) {
    let db = Db::new(backend);
    // Two handles: two writers, as two processes (or nodes) would have.
    let a = db.open(Config::default());
    let b = db.open(Config::default());
    // `a` reserves ids inside a transaction that rolls back: they must never be handed out.
    let failed: Result<(), Error> = match backend {
        Backend::Sqlite => a.transaction(|tx| {
            tx.enqueue("q", NewJob::new(vec![0]))?;
            Err(Error::InvalidArgument("roll back".into()))
        }),
        #[cfg(feature = "postgres")]
        Backend::Postgres => a.pg_transaction(|tx| {
            tx.enqueue("q", NewJob::new(vec![0]))?;
            Err(Error::InvalidArgument("roll back".into()))
        }),
        #[cfg(not(feature = "postgres"))]
        Backend::Postgres => unreachable!(),
    };
    assert!(failed.is_err());
    let mut ids = Vec::new();
    for i in 0..3000u32 {
        let q = if i % 3 == 0 { &a } else { &b };
        ids.push(
            q.enqueue("q", NewJob::new(i.to_le_bytes().to_vec()))
                .unwrap()
                .id(),
        );
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
    assert_eq!(a.stats("q").unwrap().ready, 3000);
}

/// The caller's statements are kept prepared per connection (PostgreSQL) or in SQLite's
/// statement cache: once the table's columns change, the same text runs again with the new
/// columns (PostgreSQL refuses the stale plan once, and the statement is then prepared again),
/// and with the cache off every call prepares.
fn a_caller_statement_whose_table_changed_is_prepared_again(b: Backend) {
    use squeueha::params;
    for cache in [256, 0] {
        let cfg = Config {
            pool_size: 1,
            caller_statement_cache: cache,
            ..Config::default()
        };
        let (_db, q) = open_with(b, cfg);
        q.transaction(|tx| tx.execute_batch("CREATE TABLE wide (a BIGINT)"))
            .unwrap();
        q.transaction(|tx| tx.execute("INSERT INTO wide (a) VALUES (?1)", params![1]))
            .unwrap();
        let width = |q: &Queue| {
            q.query("SELECT * FROM wide", params![])
                .map(|rows| rows[0].values().len())
        };
        assert_eq!(width(&q).unwrap(), 1);
        assert_eq!(width(&q).unwrap(), 1);
        q.transaction(|tx| tx.execute_batch("ALTER TABLE wide ADD COLUMN b BIGINT"))
            .unwrap();
        let after = width(&q);
        if b == Backend::Postgres && cache > 0 {
            assert!(after.is_err(), "the stale plan: {after:?}");
        } else {
            assert_eq!(after.unwrap(), 2);
        }
        assert_eq!(width(&q).unwrap(), 2, "cache {cache}");
        // The queue is unharmed.
        q.enqueue("w", NewJob::new(vec![1])).unwrap();
        assert_eq!(q.poll_batch("w", 1, VIS).unwrap().len(), 1);
    }
}

/// The caller's own table beside the queue, through the backend-neutral transaction: one
/// statement text for both backends, every value kind round-trips, and a failing closure keeps
/// neither its rows nor its queue operations.
fn caller_tables_change_with_the_queue_in_one_transaction(b: Backend) {
    use squeueha::{Value, params};
    let (_db, q) = open(b);
    q.transaction(|tx| {
        let ddl = if tx.backend() == "postgres" {
            "CREATE TABLE mine (id BIGINT PRIMARY KEY, n INTEGER, r DOUBLE PRECISION, t TEXT, b BYTEA)"
        } else {
            "CREATE TABLE mine (id INTEGER PRIMARY KEY, n INTEGER, r REAL, t TEXT, b BLOB)"
        };
        tx.execute_batch(ddl)
    })
    .unwrap();
    q.enqueue("in", NewJob::new(vec![1])).unwrap();
    let job = q.poll_batch("in", 1, VIS).unwrap().remove(0);
    let failed: Result<(), Error> = q.transaction(|tx| {
        tx.execute(
            "INSERT INTO mine (id, n, r, t, b) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![1, 7, 0.5, "seven", vec![7u8, 0, 7]],
        )?;
        tx.ack(job.lease)?;
        tx.enqueue("out", NewJob::new(vec![2]))?;
        Err(Error::InvalidArgument("changed its mind".into()))
    });
    assert!(matches!(failed, Err(Error::InvalidArgument(_))));
    assert!(
        q.query("SELECT id FROM mine", params![])
            .unwrap()
            .is_empty()
    );
    assert_eq!(q.stats("out").unwrap().ready, 0);
    assert_eq!(q.stats("in").unwrap().in_flight, 1);
    q.transaction(|tx| {
        tx.execute(
            "INSERT INTO mine (id, n, r, t, b) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![1, 7, 0.5, "seven", vec![7u8, 0, 7]],
        )?;
        // NULLs of every column type.
        tx.execute(
            "INSERT INTO mine (id, n, r, t, b) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![2, 2, None::<f64>, None::<String>, None::<Vec<u8>>],
        )?;
        tx.ack(job.lease)?;
        tx.enqueue("out", NewJob::new(vec![2]))?;
        Ok::<_, Error>(())
    })
    .unwrap();
    let rows = q
        .query("SELECT id, n, r, t, b FROM mine ORDER BY id", params![])
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0].values(),
        &[
            Value::Integer(1),
            Value::Integer(7),
            Value::Real(0.5),
            Value::Text("seven".into()),
            Value::Blob(vec![7, 0, 7])
        ]
    );
    assert_eq!(rows[1].get::<i64>(1).unwrap(), 2);
    // A parameter used twice (in places of one type: PostgreSQL gives a parameter one type).
    let both = q
        .query_opt(
            "SELECT count(*) FROM mine WHERE id = ?1 OR id = ?1 + 1",
            params![1],
        )
        .unwrap()
        .unwrap();
    assert_eq!(both.get::<i64>(0).unwrap(), 2);
    assert_eq!(rows[1].get::<Option<String>>(3).unwrap(), None);
    // A column read as the wrong type is a typed error, not a panic.
    assert!(matches!(
        rows[0].get::<i64>(3),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(q.stats("out").unwrap().ready, 1);
    assert_eq!(q.stats("in").unwrap().pending(), 0);
}

/// `cancel_in` deletes a pending job of its own queue only: the same id asked through another
/// queue's name is left where it is, and a job in flight is left to its holder.
fn a_cancel_scoped_to_a_queue_leaves_other_queues_jobs(b: Backend) {
    let (_dir, q) = open(b);
    let lane = q
        .enqueue("lane:chat", NewJob::new(b"l".to_vec()))
        .unwrap()
        .id();
    let own = q
        .enqueue("coord:chat", NewJob::new(b"c".to_vec()))
        .unwrap()
        .id();
    let cancel = |queue: &str, id: i64| q.transaction(|tx| tx.cancel_in(queue, id)).unwrap();
    assert!(
        !cancel("coord:chat", lane),
        "another queue's job is not reachable"
    );
    assert!(q.get(lane).unwrap().is_some(), "and it is still there");
    assert!(cancel("coord:chat", own));
    assert!(q.get(own).unwrap().is_none());
    let claimed = q.poll_batch("lane:chat", 1, VIS).unwrap();
    assert_eq!(claimed[0].id, lane);
    assert!(!cancel("lane:chat", lane), "in flight: left to its holder");
}
