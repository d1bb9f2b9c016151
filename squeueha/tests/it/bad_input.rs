//! Bad input and hostile environments: each gives a typed error, loses nothing else, and leaves the
//! queue usable.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use squeueha::{Config, Error, NewJob, Queue};

const VIS: Duration = Duration::from_secs(30);

#[test]
fn non_sqlite_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    let junk =
        b"this is not a database, just some text that happens to be long enough. ".repeat(80);
    std::fs::write(&path, &junk).unwrap();
    let err = Queue::open(&path).unwrap_err();
    assert!(
        matches!(err, Error::NotADatabase { ref path } if path.ends_with("notes.db")),
        "{err:?}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        junk,
        "the file was not modified"
    );
}

#[test]
fn corrupted_pages_give_typed_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    {
        let q = Queue::open(&path).unwrap();
        let jobs: Vec<NewJob> = (0..2000u32)
            .map(|i| NewJob::new(vec![i as u8; 200]))
            .collect();
        q.enqueue_batch("a", &jobs).unwrap();
        q.maintain().unwrap();
    }
    // Scribble over the middle of the file (b-tree pages), keeping the header intact.
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    for b in &mut bytes[len / 3..len / 3 + 16384] {
        *b = 0xA5;
    }
    std::fs::write(&path, bytes).unwrap();
    let _ = std::fs::remove_file(dir.path().join("q.db-wal"));
    let outcome = Queue::open(&path).and_then(|q| {
        let _ = q.poll_batch("a", 100, VIS)?;
        q.stats("a")
    });
    match outcome {
        Err(Error::Corrupt(_) | Error::NotADatabase { .. }) => {}
        other => panic!("expected a typed corruption error, got {other:?}"),
    }
}

#[test]
fn missing_directory_is_a_typed_error() {
    let err = Queue::open("/nonexistent-dir-for-squeueha/q.db").unwrap_err();
    assert!(matches!(err, Error::CannotOpen { .. }), "{err:?}");
}

use crate::common::Backend;

on_both_backends! {
    sync: [oversized_payload_is_refused_and_nothing_else_is_lost],
    async: [],
}

fn oversized_payload_is_refused_and_nothing_else_is_lost(b: Backend) {
    let cfg = Config {
        max_payload_bytes: 1024,
        ..Config::default()
    };
    let (_db, q) = crate::common::open_with(b, cfg);
    q.enqueue("a", NewJob::new(vec![1; 10])).unwrap();
    let err = q.enqueue("a", NewJob::new(vec![0; 4096])).unwrap_err();
    assert!(matches!(
        err,
        Error::PayloadTooLarge {
            size: 4096,
            limit: 1024
        }
    ));
    // A batch with one oversized job enqueues nothing.
    let batch = [NewJob::new(vec![2; 10]), NewJob::new(vec![0; 2000])];
    assert!(matches!(
        q.enqueue_batch("a", &batch),
        Err(Error::PayloadTooLarge { .. })
    ));
    let jobs = q.poll_batch("a", 10, VIS).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].payload, vec![1; 10]);
    q.ack(jobs[0].lease).unwrap();
}

/// A tmpfs we mount ourselves (needs CAP_SYS_ADMIN, as root in CI). Unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(options: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            horos_testkit::skip_or_fail(
                "HOROS_REQUIRE_MOUNT",
                "cannot mount a tmpfs here (not root?); run as root to test it",
            );
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, options: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn read_only_directory_is_a_typed_error() {
    let Some(fs) = Tmpfs::mount("ro,size=1m") else {
        return;
    };
    let err = Queue::open(fs.path().join("q.db")).unwrap_err();
    assert!(
        matches!(err, Error::CannotOpen { .. } | Error::ReadOnly(_)),
        "{err:?}"
    );
}

#[test]
fn full_disk_is_a_typed_error_and_loses_nothing() {
    let Some(fs) = Tmpfs::mount("size=1m") else {
        return;
    };
    let q = Queue::open(fs.path().join("q.db")).unwrap();
    let mut accepted = Vec::new();
    let mut full = None;
    for i in 0..10_000u32 {
        let mut payload = i.to_le_bytes().to_vec();
        payload.resize(8 * 1024, 7);
        match q.enqueue("a", NewJob::new(payload)) {
            Ok(e) => accepted.push(e.id()),
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    let err = full.expect("the 1 MiB file system filled up");
    assert!(matches!(err, Error::DiskFull(_)), "{err:?}");
    assert!(!accepted.is_empty());
    // Everything accepted before the error is still there.
    assert_eq!(q.stats("a").unwrap().ready as usize, accepted.len());
    // With room again, the queue carries on: drain it all.
    fs.remount("size=16m");
    q.enqueue("a", NewJob::new(b"after".to_vec())).unwrap();
    let mut drained = 0;
    loop {
        let jobs = q.poll_batch("a", 64, VIS).unwrap();
        if jobs.is_empty() {
            break;
        }
        drained += jobs.len();
        q.ack_batch(&jobs.iter().map(|j| j.lease).collect::<Vec<_>>())
            .unwrap()
            .all_acked()
            .unwrap();
    }
    assert_eq!(drained, accepted.len() + 1);
}
