//! Many threads writing through one `Queue` share commits (group commit): every caller still gets
//! its own outcome, and an operation that returned Ok is committed, visible to every other
//! connection at once.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use squeueha::{Config, Error, NewJob, Queue};

const VIS: Duration = Duration::from_secs(300);

#[test]
fn concurrent_claims_and_acks_complete_every_job_once_and_an_ok_ack_is_visible_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let grouped = Config {
        group_commit: true,
        ..Config::default()
    };
    let q = Queue::open_with(&path, grouped.clone()).unwrap();
    // A second handle: its own writer and pool, so it sees only committed data.
    let other = Queue::open_with(&path, grouped).unwrap();
    const PRODUCERS: usize = 4;
    const PER_PRODUCER: usize = 400;
    const WORKERS: usize = 8;
    let done = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(PRODUCERS + WORKERS));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, start) = (q.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..PER_PRODUCER {
                    let payload = ((p * PER_PRODUCER + i) as u64).to_le_bytes().to_vec();
                    q.enqueue("g", NewJob::new(payload)).unwrap();
                }
            })
        })
        .collect();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, other, done, start) = (q.clone(), other.clone(), done.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut idle = 0;
                while idle < 50 {
                    let jobs = q.poll_batch("g", 8, VIS).unwrap();
                    if jobs.is_empty() {
                        idle += 1;
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    idle = 0;
                    let leases: Vec<_> = jobs.iter().map(|j| j.lease).collect();
                    let report = q.ack_batch(&leases).unwrap();
                    assert_eq!(report.acked, jobs.len(), "{report:?}");
                    for job in &jobs {
                        // Ok means committed: another connection no longer finds the job, and
                        // no poll from any thread can hand it out again.
                        assert!(other.get(job.id).unwrap().is_none(), "job {}", job.id);
                        let n = u64::from_le_bytes(job.payload[..8].try_into().unwrap());
                        done.lock().unwrap().push(n);
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    for w in workers {
        w.join().unwrap();
    }
    let mut done = done.lock().unwrap().clone();
    done.sort_unstable();
    let expected: Vec<u64> = (0..(PRODUCERS * PER_PRODUCER) as u64).collect();
    assert_eq!(done, expected, "every job completed exactly once");
    let stats = other.stats("g").unwrap();
    assert_eq!((stats.ready, stats.in_flight), (0, 0));
}

#[test]
fn a_failing_operation_among_concurrent_ones_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let q = Queue::open_with(
        dir.path().join("q.db"),
        Config {
            pool_size: 4,
            group_commit: true,
            ..Config::default()
        },
    )
    .unwrap();
    for i in 0..64u32 {
        q.enqueue("f", NewJob::new(i.to_le_bytes().to_vec()))
            .unwrap();
    }
    // Stale leases: acked already, so every nack, extend and bury with them fails inside its
    // transaction (a savepoint rolled back when it shares one).
    let stale: Vec<_> = q
        .poll_batch("f", 16, VIS)
        .unwrap()
        .iter()
        .map(|j| j.lease)
        .collect();
    assert_eq!(q.ack_batch(&stale).unwrap().all_acked().unwrap(), 16);
    let threads = 8;
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (q, stale, start) = (q.clone(), stale.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut acked = Vec::new();
                for round in 0..20 {
                    let lease = stale[(t + round) % stale.len()];
                    match (t + round) % 3 {
                        0 => assert!(matches!(
                            q.nack(lease, "boom", None),
                            Err(Error::StaleLease { .. })
                        )),
                        1 => assert!(matches!(
                            q.extend(lease, VIS),
                            Err(Error::StaleLease { .. })
                        )),
                        _ => assert!(matches!(
                            q.bury(lease, "poison"),
                            Err(Error::StaleLease { .. })
                        )),
                    }
                    if t % 2 == 0 {
                        for job in q.poll_batch("f", 2, VIS).unwrap() {
                            q.ack(job.lease).unwrap();
                            acked.push(job.id);
                        }
                    } else {
                        q.enqueue("f2", NewJob::new(vec![t as u8, round as u8]))
                            .unwrap();
                    }
                }
                acked
            })
        })
        .collect();
    let mut acked = HashSet::new();
    for h in handles {
        for id in h.join().unwrap() {
            assert!(acked.insert(id), "job {id} acked twice");
        }
    }
    // 48 jobs were left after the first batch; the even threads claimed up to 4 x 20 x 2 of them.
    let stats = q.stats("f").unwrap();
    assert_eq!(stats.ready as usize + acked.len(), 48);
    assert_eq!((stats.in_flight, stats.dead), (0, 0));
    // Every enqueue of the odd threads committed, none twice.
    assert_eq!(q.stats("f2").unwrap().ready, 4 * 20);
    assert!(q.dead_letters("f", 10).unwrap().is_empty());
}
