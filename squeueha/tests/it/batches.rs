//! Batches: every job of a batch keeps its own settings (priority, state, attempts, delay,
//! dedup key) through the multi-row inserts, on both backends.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use squeueha::{Config, JobState, NewJob};

use crate::common::{Backend, open};

const VIS: Duration = Duration::from_secs(30);

on_both_backends! {
    sync: [
        a_mixed_batch_stores_each_jobs_own_settings,
        a_large_batch_keeps_every_jobs_settings_across_multi_row_inserts,
    ],
    async: [],
}

fn a_mixed_batch_stores_each_jobs_own_settings(b: Backend) {
    // Consecutive jobs that share some settings and differ in others, a duplicate in between:
    // each row must carry its own priority, state and attempts (the insert re-binds only what
    // changes from one job to the next).
    let (_d, q) = open(b);
    let jobs = vec![
        NewJob::new(b"a".to_vec()).priority(3),
        NewJob::new(b"b".to_vec()).priority(3).max_attempts(7),
        NewJob::new(b"c".to_vec())
            .priority(9)
            .delay(Duration::from_secs(60)),
        NewJob::new(b"d".to_vec()).dedup_key("k"),
        NewJob::new(b"e".to_vec()).dedup_key("k").priority(5),
        NewJob::new(b"f".to_vec()),
        NewJob::new(b"g".to_vec()).priority(-2).max_attempts(1),
    ];
    let ids = q.enqueue_batch("mixed", &jobs).unwrap();
    assert!(!ids[4].is_new() && ids[4].id() == ids[3].id());
    let want = [
        (b"a", 3, JobState::Ready, 5),
        (b"b", 3, JobState::Ready, 7),
        (b"c", 9, JobState::Delayed, 5),
        (b"d", 0, JobState::Ready, 5),
        (b"f", 0, JobState::Ready, 5),
        (b"g", -2, JobState::Ready, 1),
    ];
    let new_ids: Vec<i64> = ids.iter().filter(|e| e.is_new()).map(|e| e.id()).collect();
    assert_eq!(new_ids.len(), want.len());
    let default_attempts = Config::default().default_max_attempts;
    for (id, (payload, priority, state, attempts)) in new_ids.iter().zip(want) {
        let j = q.get(*id).unwrap().unwrap();
        let attempts = if attempts == 5 {
            default_attempts
        } else {
            attempts
        };
        assert_eq!(
            (j.payload.as_slice(), j.priority, j.state, j.max_attempts),
            (payload.as_slice(), priority, state, attempts),
            "job {id}"
        );
    }
    // The claim order follows the stored priorities.
    let claimed = q.poll_batch("mixed", 10, VIS).unwrap();
    let order: Vec<&[u8]> = claimed.iter().map(|j| j.payload.as_slice()).collect();
    assert_eq!(order, [&b"a"[..], b"b", b"d", b"f", b"g"]);
}

fn a_large_batch_keeps_every_jobs_settings_across_multi_row_inserts(b: Backend) {
    // Runs of jobs without a dedup key are inserted 32 rows per statement; a duplicate in the
    // middle goes through the single-row path. Every row must still carry its own settings.
    let (_d, q) = open(b);
    let earlier = q
        .enqueue("big", NewJob::new(b"first".to_vec()).dedup_key("k"))
        .unwrap();
    let jobs: Vec<NewJob> = (0..100)
        .map(|i| {
            let mut j = NewJob::new(format!("job {i}").into_bytes()).priority(i % 3);
            if i % 10 == 0 {
                j = j.delay(Duration::from_secs(60));
            }
            if i % 7 == 0 {
                j = j.max_attempts(2);
            }
            if i == 40 {
                j = j.dedup_key("k");
            }
            j
        })
        .collect();
    let out = q.enqueue_batch("big", &jobs).unwrap();
    assert_eq!(out.len(), 100);
    assert!(!out[40].is_new() && out[40].id() == earlier.id());
    let new_ids: Vec<i64> = out.iter().filter(|e| e.is_new()).map(|e| e.id()).collect();
    assert_eq!(new_ids.len(), 99);
    assert!(
        new_ids.windows(2).all(|w| w[0] < w[1]),
        "ids increase: {new_ids:?}"
    );
    let default_attempts = Config::default().default_max_attempts;
    for (i, e) in out.iter().enumerate() {
        if i == 40 {
            continue;
        }
        let j = q.get(e.id()).unwrap().unwrap();
        let i = i as i32;
        assert_eq!(j.payload, format!("job {i}").into_bytes());
        assert_eq!(j.priority, i % 3, "job {i}");
        assert_eq!(
            j.state,
            if i % 10 == 0 {
                JobState::Delayed
            } else {
                JobState::Ready
            },
            "job {i}"
        );
        assert_eq!(
            j.max_attempts,
            if i % 7 == 0 { 2 } else { default_attempts },
            "job {i}"
        );
    }
    // 99 new jobs, 9 of them delayed (the duplicate, job 40, was one of the ten), plus the
    // earlier job: 91 ready, claimed by priority, FIFO within one.
    let claimed = q.poll_batch("big", 200, VIS).unwrap();
    assert_eq!(claimed.len(), 91);
    assert!(claimed.windows(2).all(|w| w[0].priority >= w[1].priority));
    let top: Vec<i64> = claimed
        .iter()
        .filter(|j| j.priority == 2)
        .map(|j| j.id)
        .collect();
    assert!(
        top.windows(2).all(|w| w[0] < w[1]),
        "FIFO within a priority"
    );
}
