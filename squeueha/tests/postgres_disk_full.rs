//! A full disk on the database's side: the queue's tables in a tablespace on a 6 MB tmpfs the
//! test mounts, filled by enqueues until PostgreSQL refuses. The refusal is a typed
//! `Error::DiskFull`; the jobs committed before it are all there; once space is freed (a filler
//! table dropped), every one of them is claimed and acked, and enqueues work again.
//!
//! Needs root (to mount the tmpfs and hand it to the server's user) and a server on this machine
//! (`HOROS_PG_URL` on 127.0.0.1). Skipped otherwise; failed with `HOROS_REQUIRE_POSTGRES=1` /
//! `HOROS_REQUIRE_MOUNT=1`.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Backend, Db};
use squeueha::{Config, Error, NewJob, Queue};

const VIS: Duration = Duration::from_secs(30);

/// The tmpfs and the tablespace on it, removed however the test ends.
struct Space {
    dir: tempfile::TempDir,
    name: String,
    base: String,
}

impl Drop for Space {
    fn drop(&mut self) {
        if let Ok(mut c) = squeueha::pg::Client::connect(&self.base, squeueha::pg::NoTls) {
            let _ = c.batch_execute(&format!("DROP TABLESPACE IF EXISTS {}", self.name));
        }
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_tablespace_is_a_typed_error_and_loses_nothing() {
    let Some(b) = Backend::postgres("a_full_tablespace_is_a_typed_error_and_loses_nothing") else {
        return;
    };
    let base = std::env::var("HOROS_PG_URL").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=6m", "tmpfs"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        horos_testkit::skip_or_fail(
            "HOROS_REQUIRE_MOUNT",
            "cannot mount a tmpfs here (not root?)",
        );
        return;
    }
    let name = format!("sqh_full_{}", std::process::id());
    let space = Space {
        dir,
        name: name.clone(),
        base: base.clone(),
    };
    // The server runs as `postgres` when the set-up script ran as root.
    let _ = Command::new("chown")
        .args(["postgres:"])
        .arg(space.dir.path())
        .status();
    let mut admin = squeueha::pg::Client::connect(&base, squeueha::pg::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE TABLESPACE {name} LOCATION '{}'",
            space.dir.path().display()
        ))
        .unwrap();

    // The test's schema, its tables created in the small tablespace.
    let db = Db::new(b);
    let target = format!("{}%20-c%20default_tablespace%3D{name}", db.target);
    let q = common::off_runtime(|| Queue::open_with(&target, Config::default()).unwrap());
    q.transaction(|tx| tx.execute_batch("CREATE TABLE filler (b BYTEA)"))
        .unwrap();
    // Most of the space goes to a filler that can be dropped later (incompressible bytes).
    let noise = |n: usize, seed: u64| -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    for i in 0..40 {
        let r = q.transaction(|tx| {
            tx.execute(
                "INSERT INTO filler (b) VALUES (?1)",
                squeueha::params![noise(100_000, i)],
            )
        });
        if matches!(r, Err(Error::DiskFull(_))) {
            break;
        }
        r.unwrap();
    }

    // Enqueues until the disk is full: a typed error, not a panic or a generic one.
    let mut enqueued = 0u64;
    let err = loop {
        match q.enqueue("big", NewJob::new(noise(20_000, 1_000 + enqueued))) {
            Ok(_) => enqueued += 1,
            Err(e) => break e,
        }
        assert!(enqueued < 10_000, "the tablespace never filled up");
    };
    assert!(matches!(err, Error::DiskFull(_)), "{err:?}");
    assert!(
        enqueued > 0,
        "no room even for one job: the filler took it all"
    );
    // Nothing committed before is lost.
    assert_eq!(q.stats("big").unwrap().ready, enqueued);

    // Room again: every job is claimed and acked, and enqueues work.
    q.transaction(|tx| tx.execute_batch("DROP TABLE filler"))
        .unwrap();
    let mut acked = 0u64;
    loop {
        let jobs = q.poll_batch("big", 32, VIS).unwrap();
        if jobs.is_empty() {
            break;
        }
        for j in jobs {
            q.ack(j.lease).unwrap();
            acked += 1;
        }
    }
    assert_eq!(acked, enqueued);
    q.enqueue("big", NewJob::new(vec![1])).unwrap();
    drop(q);
    drop(db);
    eprintln!("{enqueued} jobs enqueued before the disk was full; all claimed and acked after");
}
