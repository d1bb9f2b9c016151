//! What only the SQLite backend has: its WAL and checkpoints, `synchronous`, its schema table,
//! and the caller's transaction on a SQLite connection (`Queue::transaction`, shared commits).
//! The behaviour both backends share is in `operations.rs`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use squeueha::{Config, Error, NewJob, Queue};

use crate::common::{Backend, open, open_with};

const VIS: Duration = Duration::from_secs(30);

#[test]
fn wal_is_verified_and_schema_created() {
    let (dir, q) = open(Backend::Sqlite);
    let conn = rusqlite::Connection::open(&dir.target).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let v: i64 = conn
        .query_row("SELECT max(version) FROM squeueha_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(v, squeueha::SCHEMA_VERSION);
    drop(q);
    // Reopening applies nothing twice.
    let q = Queue::open(&dir.target).unwrap();
    assert_eq!(q.stats("x").unwrap().pending(), 0);
}

#[test]
fn synchronous_full_is_applied() {
    let cfg = Config {
        synchronous: squeueha::Synchronous::Full,
        ..Config::default()
    };
    let (_dir, q) = open_with(Backend::Sqlite, cfg);
    q.enqueue("a", NewJob::new(vec![1])).unwrap();
    let jobs = q.poll_batch("a", 1, VIS).unwrap();
    assert_eq!(jobs.len(), 1);
}

#[test]
fn transaction_is_atomic_with_caller_tables() {
    let (_dir, q) = open(Backend::Sqlite);
    q.transaction(|tx| -> squeueha::Result<()> {
        tx.connection()?
            .execute_batch("CREATE TABLE results (id INTEGER PRIMARY KEY, v TEXT)")?;
        Ok(())
    })
    .unwrap();
    q.enqueue("a", NewJob::new(vec![1])).unwrap();
    let job = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    // A failing transaction leaves everything as it was.
    let failed: Result<(), Error> = q.transaction(|tx| {
        tx.connection()?
            .execute("INSERT INTO results (v) VALUES ('x')", [])?;
        tx.ack(job.lease)?;
        tx.enqueue("next", NewJob::new(vec![2]))?;
        Err(Error::InvalidArgument("caller changed its mind".into()))
    });
    assert!(failed.is_err());
    assert_eq!(q.stats("next").unwrap().ready, 0);
    assert_eq!(q.stats("a").unwrap().in_flight, 1);
    q.transaction(|tx| -> squeueha::Result<()> {
        tx.connection()?
            .execute("INSERT INTO results (v) VALUES ('x')", [])?;
        tx.ack(job.lease)?;
        tx.enqueue("next", NewJob::new(vec![2]))?;
        Ok(())
    })
    .unwrap();
    assert_eq!(q.stats("next").unwrap().ready, 1);
    assert_eq!(q.stats("a").unwrap().pending(), 0);
}

#[test]
fn maintenance_checkpoints_the_wal() {
    let (_dir, q) = open_with(
        Backend::Sqlite,
        Config {
            checkpoint_interval: None,
            ..Config::default()
        },
    );
    let batch: Vec<NewJob> = (0..500u32)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    q.enqueue_batch("a", &batch).unwrap();
    let report = q.maintain().unwrap();
    assert!(report.wal_pages > 0);
    assert_eq!(report.checkpointed_pages, report.wal_pages);
}

#[test]
fn background_checkpointer_keeps_the_wal_bounded() {
    let cfg = Config {
        checkpoint_interval: Some(Duration::from_millis(50)),
        checkpoint_wal_bytes: 1024 * 1024,
        journal_size_limit: 1024 * 1024,
        ..Config::default()
    };
    let (dir, q) = open_with(Backend::Sqlite, cfg);
    for _ in 0..20 {
        let batch: Vec<NewJob> = (0..500u32)
            .map(|i| NewJob::new(vec![i as u8; 512]))
            .collect();
        q.enqueue_batch("a", &batch).unwrap();
        for j in q.poll_batch("a", 500, VIS).unwrap() {
            q.ack(j.lease).unwrap();
        }
    }
    // About 10 MB went through the WAL; the checkpointer lets it restart from the beginning and
    // journal_size_limit truncates it at a later write (one every 300 ms here, until it has, for
    // at most 30 s: a busy disk can hold the checkpoints back).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        q.enqueue("a", NewJob::new(vec![1])).unwrap();
        let wal = std::fs::metadata(format!("{}-wal", dir.target))
            .unwrap()
            .len();
        if wal <= 2 * 1024 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "WAL is still {wal} bytes"
        );
    }
}
#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    drop(Queue::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO squeueha_migrations (version, applied_at) VALUES (99, 0)",
        [],
    )
    .unwrap();
    drop(conn);
    assert!(matches!(
        Queue::open(&path),
        Err(Error::SchemaTooNew { found: 99, .. })
    ));
}

/// Concurrent async transactions share commits, and a failing or panicking one takes only itself
/// down: the
/// others' jobs are acked, their rows written and their next jobs enqueued, each caller gets its
/// own value, and the failing caller gets its own error with none of its writes kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_transactions_commit_together_and_fail_alone() {
    let (_dir, q) = open(Backend::Sqlite);
    q.transaction(|tx| -> squeueha::Result<()> {
        tx.connection()?
            .execute_batch("CREATE TABLE results (id INTEGER PRIMARY KEY, v INTEGER)")?;
        Ok(())
    })
    .unwrap();
    for i in 0..40u8 {
        q.enqueue("a", NewJob::new(vec![i])).unwrap();
    }
    let jobs = q.poll_batch("a", 40, VIS).unwrap();
    let aq = squeueha::AsyncQueue::new(q.clone());
    let mut calls = Vec::new();
    for job in jobs {
        let aq = aq.clone();
        let v = i64::from(job.payload[0]);
        let lease = job.lease;
        calls.push(tokio::spawn(async move {
            aq.transaction(move |tx| -> Result<i64, Error> {
                tx.connection()?
                    .execute("INSERT INTO results (v) VALUES (?1)", [v])?;
                tx.ack(lease)?;
                tx.enqueue("next", NewJob::new(vec![1]))?;
                if v == 13 {
                    return Err(Error::InvalidArgument("thirteen".into()));
                }
                if v == 7 {
                    panic!("seven panics");
                }
                Ok(v * 2)
            })
            .await
        }));
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (13, Err(Error::InvalidArgument(m))) => assert_eq!(m, "thirteen"),
            (13, other) => panic!("job 13: {other:?}"),
            (7, Err(Error::Task(_))) => {}
            (7, other) => panic!("job 7 panicked, yet: {other:?}"),
            (i, Ok(v)) => assert_eq!(*v, i as i64 * 2),
            (i, Err(e)) => panic!("job {i}: {e}"),
        }
    }
    assert_eq!(q.stats("next").unwrap().ready, 38);
    assert_eq!(q.stats("a").unwrap().in_flight, 2);
    let rows: i64 = q
        .read(|c| {
            Ok(c.query_row(
                "SELECT count(*) FROM results WHERE v NOT IN (7, 13)",
                [],
                |r| r.get(0),
            )?)
        })
        .unwrap();
    let failed: i64 = q
        .read(|c| {
            Ok(
                c.query_row("SELECT count(*) FROM results WHERE v IN (7, 13)", [], |r| {
                    r.get(0)
                })?,
            )
        })
        .unwrap();
    assert_eq!((rows, failed), (38, 0));
}
