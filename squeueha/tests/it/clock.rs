//! `now_ms` is the clock the queue stamps jobs with.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use squeueha::{NewJob, Queue, now_ms};

#[test]
fn jobs_are_stamped_with_now_ms() {
    let dir = tempfile::tempdir().unwrap();
    let q = Queue::open(dir.path().join("q.db")).unwrap();
    let before = now_ms();
    let id = q.enqueue("a", NewJob::new(b"x".to_vec())).unwrap().id();
    let after = now_ms();
    let at = q.get(id).unwrap().unwrap().enqueued_at;
    assert!(before <= at && at <= after, "{before} <= {at} <= {after}");
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let wall = i64::try_from(wall.as_millis()).unwrap();
    assert!((wall - after).abs() < Duration::from_secs(5).as_millis() as i64);
}
