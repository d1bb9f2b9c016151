//! The database restarted under load: three handles (nodes, each with its own pool and
//! listener) drain 3,000 jobs, each storing its job's result in the same transaction as the ack,
//! while the PostgreSQL server is stopped and started again. Every handle reconnects by itself,
//! nothing is lost and nothing is stored twice (count and checksum).
//!
//! The test runs a cluster of its own (`scripts/setup_postgres.sh` in a temporary directory, on
//! a free port), so the one the other tests share is never restarted under them. Skipped without
//! PostgreSQL (`HOROS_PG_URL` unset), failed with `HOROS_REQUIRE_POSTGRES=1`.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::Backend;
use horos_testkit::{free_port, wait_for};
use squeueha::{Config, Error, NewJob, Queue};

const JOBS: u64 = 3_000;
const NODES: usize = 3;

/// Runs `scripts/NAME` for the cluster in `dir` on `port`.
fn script(name: &str, dir: &Path, port: u16) -> Output {
    Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts")
            .join(name),
    )
    .env("HOROS_PG_DIR", dir)
    .env("HOROS_PG_PORT", port.to_string())
    .output()
    .unwrap()
}

/// Stops the test's cluster however the test ends.
struct Cluster<'a> {
    dir: &'a Path,
    port: u16,
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        let _ = script("stop_postgres.sh", self.dir, self.port);
    }
}

fn start(dir: &Path, port: u16) -> String {
    let out = script("setup_postgres.sh", dir, port);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap();
    line.split_once('=').unwrap().1.trim().to_owned()
}

fn count_and_sum(q: &Queue) -> Result<(i64, i64), Error> {
    q.pg_transaction(|tx| {
        let row = tx.client().query_one(
            "SELECT count(*), coalesce(sum(payload), 0)::BIGINT FROM results",
            &[],
        )?;
        Ok((row.get(0), row.get(1)))
    })
}

#[test]
fn the_database_restarted_under_load_loses_nothing_and_stores_nothing_twice() {
    const TEST: &str = "the_database_restarted_under_load_loses_nothing_and_stores_nothing_twice";
    if Backend::postgres(TEST).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = start(dir.path(), port);
    let _cluster = Cluster {
        dir: dir.path(),
        port,
    };
    let admin = Queue::open_with(&url, Config::default()).unwrap();
    admin
        .pg_transaction(|tx| -> Result<(), Error> {
            tx.client().batch_execute(
                "CREATE TABLE results (job BIGINT PRIMARY KEY, payload BIGINT NOT NULL)",
            )?;
            Ok(())
        })
        .unwrap();
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    for chunk in jobs.chunks(500) {
        admin.enqueue_batch("work", chunk).unwrap();
    }

    let done = Arc::new(AtomicBool::new(false));
    let restarted = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let after_restart: Arc<Vec<AtomicU64>> =
        Arc::new((0..NODES).map(|_| AtomicU64::new(0)).collect());
    let nodes: Vec<_> = (0..NODES)
        .map(|n| {
            let (url, done, restarted, errors, after_restart) = (
                url.clone(),
                Arc::clone(&done),
                Arc::clone(&restarted),
                Arc::clone(&errors),
                Arc::clone(&after_restart),
            );
            std::thread::spawn(move || {
                let q = Queue::open_with(&url, Config::default()).unwrap();
                while !done.load(Ordering::SeqCst) {
                    let batch = match q.poll_batch("work", 16, Duration::from_secs(5)) {
                        Ok(b) => b,
                        Err(_) => {
                            errors.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    };
                    if batch.is_empty() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    for job in batch {
                        let payload =
                            i64::from_le_bytes(job.payload[..8].try_into().unwrap_or([0; 8]));
                        // The result and the ack commit together: a job whose lease went stale
                        // (redelivered after a failure) rolls its insert back.
                        let stored = q.pg_transaction(|tx| -> Result<(), Error> {
                            tx.client().execute(
                                "INSERT INTO results (job, payload) VALUES ($1, $2)",
                                &[&job.id, &payload],
                            )?;
                            tx.ack(job.lease)?;
                            Ok(())
                        });
                        match stored {
                            Ok(()) if restarted.load(Ordering::SeqCst) => {
                                after_restart[n].fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(()) => {}
                            Err(_) => {
                                errors.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                }
            })
        })
        .collect();

    // A third of the way in, the server goes down and comes back.
    wait_for(
        "progress before the restart",
        Duration::from_secs(120),
        || count_and_sum(&admin).map_or(0, |c| c.0) >= (JOBS / 3) as i64,
    );
    let stopped = script("stop_postgres.sh", dir.path(), port);
    assert!(stopped.status.success(), "{stopped:?}");
    std::thread::sleep(Duration::from_millis(500));
    restarted.store(true, Ordering::SeqCst);
    assert_eq!(
        start(dir.path(), port),
        url,
        "the same cluster, started again"
    );

    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (count, _) = count_and_sum(&admin).unwrap_or((0, 0));
        if count >= JOBS as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{count} of {JOBS} stored after the restart; {:?}",
            admin.stats("work")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::SeqCst);
    for node in nodes {
        node.join().unwrap();
    }

    let (count, sum) = count_and_sum(&admin).unwrap();
    eprintln!(
        "stored {count}, {} failed calls while the server was away, per node after the restart {:?}",
        errors.load(Ordering::SeqCst),
        after_restart
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect::<Vec<_>>()
    );
    assert_eq!(count, JOBS as i64, "every job stored once");
    assert_eq!(
        sum,
        (0..JOBS as i64).sum::<i64>(),
        "and each its own payload"
    );
    let s = admin.stats("work").unwrap();
    assert_eq!((s.pending(), s.dead), (0, 0), "{s:?}");
    assert!(
        errors.load(Ordering::SeqCst) > 0,
        "the nodes saw the server go"
    );
    for (n, after) in after_restart.iter().enumerate() {
        assert!(
            after.load(Ordering::SeqCst) > 0,
            "node {n} stored nothing after the restart: it did not reconnect by itself"
        );
    }
}
