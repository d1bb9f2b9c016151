//! Every queue operation against a real database: the behaviour of both backends (each test
//! `fn name(b: Backend)` runs as `sqlite::name` and `postgres::name`), then SQLite's own.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use squeueha::{Config, DedupWindow, Error, JobState, Nacked, NewJob};

use crate::common::{Backend, fence_passes, open, open_with};
use horos_testkit::wait_until;

const VIS: Duration = Duration::from_secs(30);

on_both_backends! {
    sync: [
        enqueue_claim_ack_roundtrip_with_json,
        priority_then_fifo_order_and_queue_isolation,
        stale_lease_is_refused_after_expiry_and_reclaim,
        extend_keeps_job_invisible,
        nack_backoff_then_dead_letter_list_requeue_purge,
        expired_lease_on_last_attempt_goes_to_dead_letters,
        dead_letters_page_on_from_a_cursor,
        release_does_not_count_the_attempt,
        delayed_job_becomes_visible_later,
        dedup_by_key_and_by_payload_hash,
        dedup_window_expires,
        retention_keeps_done_jobs_until_purged,
        batched_ack_reports_stale_without_aborting,
        stats_and_queue_listing,
        in_process_wakeup_beats_the_poll_interval,
        leader_election_with_fencing_in_process,
        invalid_arguments_are_typed,
        ack_and_poll_acks_the_previous_batch_and_claims_the_next,
        same_holder_after_a_lapse_gets_a_new_fencing_token,
        extreme_arguments_do_not_panic,
        cancel_deletes_only_work_that_has_not_started,
        small_and_large_jobs_of_one_batch_go_through_every_outcome,
        jobs_of_one_batch_acked_from_many_threads_are_each_acked_once,
        retained_jobs_of_a_batch_acked_in_parts_are_each_kept_once,
        ack_and_poll_with_part_of_a_batch_or_a_stale_lease_claims_once,
    ],
    async: [
        async_api_roundtrip_and_wakeup,
        a_watch_tells_of_work_without_claiming_it,
        a_cancelled_async_claim_releases_its_jobs,
    ],
}
/// A payload above this many bytes is leased in its own row on PostgreSQL, a smaller one in its
/// claimed batch's lease row: a batch with both goes through every outcome.
const SMALL: usize = 10;
const LARGE: usize = 5_000;

fn payload(size: usize, tag: u8) -> Vec<u8> {
    (0..size).map(|i| tag ^ (i % 251) as u8).collect()
}

fn small_and_large_jobs_of_one_batch_go_through_every_outcome(b: Backend) {
    let (_dir, q) = open(b);
    let sizes = [SMALL, LARGE, SMALL, LARGE, SMALL, LARGE];
    let ids: Vec<i64> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            q.enqueue("m", NewJob::new(payload(n, i as u8)))
                .unwrap()
                .id()
        })
        .collect();
    let first = q.poll_batch("m", 10, VIS).unwrap();
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), ids);
    for (i, j) in first.iter().enumerate() {
        assert_eq!(j.payload, payload(sizes[i], i as u8), "job {i}");
        assert_eq!(j.attempts, 1);
        assert_eq!(q.get(j.id).unwrap().unwrap().state, JobState::InFlight);
    }
    assert_eq!(q.stats("m").unwrap().in_flight, 6);

    // Acked: one of each size, in one call.
    let report = q.ack_batch(&[first[0].lease, first[1].lease]).unwrap();
    assert_eq!((report.acked, report.stale.len()), (2, 0));
    assert!(q.get(ids[0]).unwrap().is_none() && q.get(ids[1]).unwrap().is_none());
    // Retried (one of each), buried (small), released (large).
    for j in &first[2..4] {
        let out = q.nack(j.lease, "flaky", Some(Duration::ZERO)).unwrap();
        assert!(matches!(out, Nacked::Retry { .. }));
        let info = q.get(j.id).unwrap().unwrap();
        assert_eq!(info.state, JobState::Ready);
        assert_eq!(info.last_error.as_deref(), Some("flaky"));
    }
    q.bury(first[4].lease, "poison").unwrap();
    q.release(first[5].lease, Duration::ZERO).unwrap();
    let stats = q.stats("m").unwrap();
    assert_eq!((stats.ready, stats.in_flight, stats.dead), (3, 0, 1));
    assert_eq!(
        q.dead_letters("m", 10).unwrap()[0].payload,
        payload(SMALL, 4)
    );
    for j in &first {
        assert!(matches!(q.ack(j.lease), Err(Error::StaleLease { .. })));
        assert!(matches!(
            q.extend(j.lease, VIS),
            Err(Error::StaleLease { .. })
        ));
    }

    // Claimed again with a short lease, extended (the large one only), then expired: the others
    // come back to the next claim with their attempt counted, their payloads whole.
    let second = q.poll_batch("m", 10, Duration::from_millis(100)).unwrap();
    assert_eq!(
        second
            .iter()
            .map(|j| (j.id, j.attempts))
            .collect::<Vec<_>>(),
        [(ids[2], 2), (ids[3], 2), (ids[5], 1)]
    );
    q.extend(second[1].lease, VIS).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let third = q.poll_batch("m", 10, VIS).unwrap();
    let mut back: Vec<(i64, u32)> = third.iter().map(|j| (j.id, j.attempts)).collect();
    back.sort_unstable();
    assert_eq!(back, [(ids[2], 3), (ids[5], 2)]);
    for j in &third {
        let i = ids.iter().position(|&id| id == j.id).unwrap();
        assert_eq!(j.payload, payload(sizes[i], i as u8));
    }
    assert!(matches!(
        q.ack(second[2].lease),
        Err(Error::StaleLease { .. })
    ));
    q.ack(second[1].lease).unwrap();
    let (report, more) = q
        .ack_and_poll(
            &third.iter().map(|j| j.lease).collect::<Vec<_>>(),
            "m",
            10,
            VIS,
        )
        .unwrap();
    assert_eq!(report.acked, third.len());
    let rest: Vec<squeueha::Lease> = more.iter().map(|j| j.lease).collect();
    q.ack_batch(&rest).unwrap().all_acked().unwrap();
    let stats = q.stats("m").unwrap();
    assert_eq!((stats.ready, stats.in_flight, stats.delayed), (0, 0, 0));
}

fn jobs_of_one_batch_acked_from_many_threads_are_each_acked_once(b: Backend) {
    let (_dir, q) = open(b);
    let jobs: Vec<NewJob> = (0..40u8)
        .map(|i| NewJob::new(payload(if i % 5 == 0 { LARGE } else { SMALL }, i)))
        .collect();
    q.enqueue_batch("t", &jobs).unwrap();
    let batch = q.poll_batch("t", 40, VIS).unwrap();
    assert_eq!(batch.len(), 40);
    let acked: usize = std::thread::scope(|s| {
        let handles: Vec<_> = batch
            .chunks(5)
            .map(|part| {
                let q = q.clone();
                s.spawn(move || {
                    part.iter()
                        .map(|j| q.ack(j.lease).map(|()| 1))
                        .sum::<squeueha::Result<usize>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .sum()
    });
    assert_eq!(acked, 40);
    let stats = q.stats("t").unwrap();
    assert_eq!((stats.ready, stats.in_flight, stats.dead), (0, 0, 0));
    assert!(q.poll_batch("t", 40, VIS).unwrap().is_empty());
    for j in &batch {
        assert!(matches!(q.ack(j.lease), Err(Error::StaleLease { .. })));
    }
}

fn cancel_deletes_only_work_that_has_not_started(b: Backend) {
    let (_dir, q) = open(b);
    let ready = q.enqueue("c", NewJob::new(b"r".to_vec())).unwrap().id();
    let delayed = q
        .enqueue(
            "c",
            NewJob::new(b"d".to_vec()).delay(Duration::from_secs(600)),
        )
        .unwrap()
        .id();
    let running = q.enqueue("c", NewJob::new(b"f".to_vec())).unwrap().id();
    assert!(q.cancel(ready).unwrap());
    assert!(q.cancel(delayed).unwrap());
    assert!(q.get(ready).unwrap().is_none() && q.get(delayed).unwrap().is_none());
    let claimed = q.poll_batch("c", 10, VIS).unwrap();
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        [running],
        "cancelled jobs are never delivered"
    );
    assert!(!q.cancel(running).unwrap(), "in flight: left to its holder");
    q.ack(claimed[0].lease).unwrap();
    assert!(!q.cancel(running).unwrap(), "finished: nothing to cancel");
    assert!(!q.cancel(ready).unwrap(), "already cancelled");
    assert!(!q.cancel(i64::MAX).unwrap(), "unknown");
}

fn enqueue_claim_ack_roundtrip_with_json(b: Backend) {
    let (_dir, q) = open(b);
    let id = q
        .enqueue(
            "ocr",
            NewJob::json(&serde_json::json!({"page": 3})).unwrap(),
        )
        .unwrap()
        .id();
    let jobs = q.poll_batch("ocr", 10, VIS).unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.id, id);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.json::<serde_json::Value>().unwrap()["page"], 3);
    assert_eq!(q.get(id).unwrap().unwrap().state, JobState::InFlight);
    // Invisible while leased.
    assert!(q.poll_batch("ocr", 10, VIS).unwrap().is_empty());
    q.ack(job.lease).unwrap();
    assert!(q.get(id).unwrap().is_none());
    // A second ack of the same lease is refused.
    assert!(matches!(q.ack(job.lease), Err(Error::StaleLease { .. })));
}

fn priority_then_fifo_order_and_queue_isolation(b: Backend) {
    let (_dir, q) = open(b);
    let jobs: Vec<NewJob> = [(0, "a"), (5, "b"), (0, "c"), (9, "d"), (5, "e")]
        .iter()
        .map(|(p, s)| NewJob::new(s.as_bytes().to_vec()).priority(*p))
        .collect();
    q.enqueue_batch("work", &jobs).unwrap();
    q.enqueue("other", NewJob::new(b"z".to_vec()).priority(100))
        .unwrap();
    let mut order = Vec::new();
    loop {
        let batch = q.poll_batch("work", 2, VIS).unwrap();
        if batch.is_empty() {
            break;
        }
        for j in batch {
            order.push(String::from_utf8(j.payload.clone()).unwrap());
            q.ack(j.lease).unwrap();
        }
    }
    assert_eq!(order, ["d", "b", "e", "a", "c"]);
    assert_eq!(q.stats("other").unwrap().ready, 1);
}

fn stale_lease_is_refused_after_expiry_and_reclaim(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue("a", NewJob::new(b"x".to_vec())).unwrap();
    let first = q.poll_batch("a", 1, Duration::from_millis(50)).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    let second = q.poll_batch("a", 1, VIS).unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempts, 2);
    assert_ne!(first[0].lease.token, second[0].lease.token);
    assert!(matches!(
        q.ack(first[0].lease),
        Err(Error::StaleLease { job_id }) if job_id == first[0].id
    ));
    assert!(matches!(
        q.extend(first[0].lease, VIS),
        Err(Error::StaleLease { .. })
    ));
    assert!(matches!(
        q.nack(first[0].lease, "late", None),
        Err(Error::StaleLease { .. })
    ));
    q.ack(second[0].lease).unwrap();
}

fn extend_keeps_job_invisible(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue("a", NewJob::new(b"x".to_vec())).unwrap();
    let job = q
        .poll_batch("a", 1, Duration::from_millis(100))
        .unwrap()
        .remove(0);
    q.extend(job.lease, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert!(q.poll_batch("a", 1, VIS).unwrap().is_empty());
    q.ack(job.lease).unwrap();
}

fn nack_backoff_then_dead_letter_list_requeue_purge(b: Backend) {
    let (_dir, q) = open(b);
    let id = q
        .enqueue("a", NewJob::new(b"bad".to_vec()).max_attempts(2))
        .unwrap()
        .id();
    let j1 = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    // A backoff long enough that a loaded machine (CI runs suites side by side) still polls
    // within it.
    let out = q
        .nack(j1.lease, "boom 1", Some(Duration::from_millis(1000)))
        .unwrap();
    assert!(matches!(out, Nacked::Retry { .. }));
    assert_eq!(q.get(id).unwrap().unwrap().state, JobState::Delayed);
    // Not visible during the backoff.
    assert!(q.poll_batch("a", 1, VIS).unwrap().is_empty());
    std::thread::sleep(Duration::from_millis(1100));
    let j2 = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    assert_eq!(j2.attempts, 2);
    assert!(j2.is_last_attempt());
    assert_eq!(q.nack(j2.lease, "boom 2", None).unwrap(), Nacked::Dead);
    let info = q.get(id).unwrap().unwrap();
    assert_eq!(info.state, JobState::Dead);
    let dead = q.dead_letters("a", 10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].last_error.as_deref(), Some("boom 2"));
    assert_eq!(dead[0].payload, b"bad");
    assert_eq!(q.stats("a").unwrap().dead, 1);
    let one = q.dead_letter(id).unwrap().unwrap();
    assert_eq!(
        (one.id, one.queue.as_str(), one.payload.as_slice()),
        (id, "a", &b"bad"[..])
    );
    assert_eq!(one.last_error.as_deref(), Some("boom 2"));
    assert!(q.dead_letter(12345).unwrap().is_none());

    let new_id = q.requeue_dead(id).unwrap();
    assert_ne!(new_id, id);
    assert!(q.dead_letters("a", 10).unwrap().is_empty());
    assert!(q.dead_letter(id).unwrap().is_none());
    let again = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    assert_eq!(again.id, new_id);
    assert_eq!(again.attempts, 1);
    q.bury(again.lease, "poison").unwrap();
    assert_eq!(q.purge_dead("a", None).unwrap(), 1);
    assert!(q.dead_letters("a", 10).unwrap().is_empty());
    assert!(matches!(q.requeue_dead(12345), Err(Error::NotFound(_))));
}

fn expired_lease_on_last_attempt_goes_to_dead_letters(b: Backend) {
    let (_dir, q) = open(b);
    let id = q
        .enqueue("a", NewJob::new(b"x".to_vec()).max_attempts(1))
        .unwrap()
        .id();
    let _ = q.poll_batch("a", 1, Duration::from_millis(20)).unwrap();
    std::thread::sleep(Duration::from_millis(40));
    assert!(q.poll_batch("a", 1, VIS).unwrap().is_empty());
    let dead = q.dead_letters("a", 10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id);
    assert!(
        dead[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("lease expired")
    );
}

fn dead_letters_page_on_from_a_cursor(b: Backend) {
    let (_dir, q) = open(b);
    // Five jobs buried in one batch: most share their death's millisecond.
    q.enqueue_batch("a", &vec![NewJob::new(b"x".to_vec()); 5])
        .unwrap();
    q.enqueue("b", NewJob::new(b"other queue".to_vec()))
        .unwrap();
    let jobs = q.poll_batch("a", 5, VIS).unwrap();
    for j in &jobs {
        q.bury(j.lease, "poison").unwrap();
    }
    let b = q.poll_batch("b", 1, VIS).unwrap().remove(0);
    q.bury(b.lease, "poison").unwrap();
    let all = q.dead_letters("a", 10).unwrap();
    assert_eq!(all.len(), 5);
    let mut paged = Vec::new();
    let mut after = (i64::MIN, i64::MIN);
    loop {
        let page = q.dead_letters_after("a", after, 2).unwrap();
        let Some(last) = page.last() else { break };
        after = (last.died_at, last.id);
        paged.extend(page.iter().map(|d| d.id));
    }
    assert_eq!(paged, all.iter().map(|d| d.id).collect::<Vec<_>>());
    // Only what died after a time.
    let last = all.last().unwrap();
    assert!(
        q.dead_letters_after("a", (last.died_at, last.id), 10)
            .unwrap()
            .is_empty()
    );
    let since = q
        .dead_letters_after("a", (last.died_at, i64::MIN), 10)
        .unwrap();
    assert!(since.iter().any(|d| d.id == last.id));
    assert!(since.iter().all(|d| d.died_at >= last.died_at));
}

fn release_does_not_count_the_attempt(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue("a", NewJob::new(b"x".to_vec()).max_attempts(1))
        .unwrap();
    for _ in 0..3 {
        let j = q.poll_batch("a", 1, VIS).unwrap().remove(0);
        assert_eq!(j.attempts, 1);
        q.release(j.lease, Duration::ZERO).unwrap();
    }
    assert_eq!(q.stats("a").unwrap().ready, 1);
}

fn delayed_job_becomes_visible_later(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue(
        "a",
        NewJob::new(b"later".to_vec()).delay(Duration::from_millis(1500)),
    )
    .unwrap();
    assert_eq!(q.stats("a").unwrap().delayed, 1);
    assert!(q.poll_batch("a", 1, VIS).unwrap().is_empty());
    // poll_batch_wait wakes when the delay is due, well before its timeout.
    let t = std::time::Instant::now();
    let jobs = q
        .poll_batch_wait("a", 1, VIS, Duration::from_secs(30))
        .unwrap();
    assert_eq!(jobs.len(), 1);
    assert!(t.elapsed() < Duration::from_secs(20));
}

fn dedup_by_key_and_by_payload_hash(b: Backend) {
    let (_dir, q) = open(b);
    let a = q
        .enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("doc-1"))
        .unwrap();
    let b = q
        .enqueue("a", NewJob::new(b"2".to_vec()).dedup_key("doc-1"))
        .unwrap();
    assert!(a.is_new());
    assert_eq!(b, squeueha::Enqueued::Duplicate(a.id()));
    // Same key in another queue is another job.
    assert!(
        q.enqueue("b", NewJob::new(b"1".to_vec()).dedup_key("doc-1"))
            .unwrap()
            .is_new()
    );
    let h1 = q
        .enqueue("a", NewJob::new(b"same".to_vec()).dedup_by_payload())
        .unwrap();
    let h2 = q
        .enqueue("a", NewJob::new(b"same".to_vec()).dedup_by_payload())
        .unwrap();
    assert_eq!(h2, squeueha::Enqueued::Duplicate(h1.id()));
    assert_eq!(q.stats("a").unwrap().ready, 2);
    // The key outlives the job (windowed dedup, 24 h by default).
    for j in q.poll_batch("a", 10, VIS).unwrap() {
        q.ack(j.lease).unwrap();
    }
    assert!(
        !q.enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("doc-1"))
            .unwrap()
            .is_new()
    );
}

fn dedup_window_expires(b: Backend) {
    let cfg = Config {
        dedup_window: DedupWindow::Window(Duration::from_millis(50)),
        ..Config::default()
    };
    let (_dir, q) = open_with(b, cfg);
    assert!(
        q.enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("k"))
            .unwrap()
            .is_new()
    );
    std::thread::sleep(Duration::from_millis(70));
    assert!(
        q.enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("k"))
            .unwrap()
            .is_new()
    );
    // Permanent dedup ignores age; purge_dedup forgets.
    let (_d2, p) = open_with(
        b,
        Config {
            dedup_window: DedupWindow::Permanent,
            ..Config::default()
        },
    );
    p.enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("k"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !p.enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("k"))
            .unwrap()
            .is_new()
    );
    assert_eq!(p.purge_dedup(Duration::ZERO).unwrap(), 1);
    assert!(
        p.enqueue("a", NewJob::new(b"1".to_vec()).dedup_key("k"))
            .unwrap()
            .is_new()
    );
}

fn retention_keeps_done_jobs_until_purged(b: Backend) {
    let cfg = Config {
        retain_done: Some(Duration::from_secs(3600)),
        ..Config::default()
    };
    let (_dir, q) = open_with(b, cfg);
    let id = q.enqueue("a", NewJob::new(b"x".to_vec())).unwrap().id();
    let j = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    q.ack(j.lease).unwrap();
    assert_eq!(q.get(id).unwrap().unwrap().state, JobState::Done);
    assert_eq!(q.stats("a").unwrap().done, 1);
    assert!(q.poll_batch("a", 1, VIS).unwrap().is_empty());
    assert_eq!(q.purge_done(Duration::ZERO).unwrap(), 1);
    assert!(q.get(id).unwrap().is_none());
}

fn retained_jobs_of_a_batch_acked_in_parts_are_each_kept_once(b: Backend) {
    let cfg = Config {
        retain_done: Some(Duration::from_secs(3600)),
        ..Config::default()
    };
    let (_dir, q) = open_with(b, cfg);
    let sizes = [SMALL, LARGE, SMALL, SMALL, LARGE];
    let jobs: Vec<NewJob> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| NewJob::new(payload(n, i as u8)))
        .collect();
    q.enqueue_batch("r", &jobs).unwrap();
    let batch = q.poll_batch("r", 5, VIS).unwrap();
    // One small and both large first (part of the batch), then the rest (small) with the next
    // claim.
    let report = q
        .ack_batch(&[batch[0].lease, batch[1].lease, batch[4].lease])
        .unwrap();
    assert_eq!((report.acked, report.stale.len()), (3, 0));
    let rest: Vec<squeueha::Lease> = batch[2..4].iter().map(|j| j.lease).collect();
    let (report, more) = q.ack_and_poll(&rest, "r", 5, VIS).unwrap();
    assert_eq!((report.acked, more.len()), (2, 0));
    for (i, j) in batch.iter().enumerate() {
        let info = q.get(j.id).unwrap().unwrap();
        assert_eq!(info.state, JobState::Done, "job {i}");
        assert_eq!(info.payload, payload(sizes[i], i as u8), "job {i}");
    }
    let stats = q.stats("r").unwrap();
    assert_eq!((stats.done, stats.in_flight, stats.ready), (5, 0, 0));
    // Acked again: stale, and nothing is kept twice.
    let again = q
        .ack_batch(&batch.iter().map(|j| j.lease).collect::<Vec<_>>())
        .unwrap();
    assert_eq!((again.acked, again.stale.len()), (0, 5));
    assert_eq!(q.purge_done(Duration::ZERO).unwrap(), 5);
}

fn ack_and_poll_with_part_of_a_batch_or_a_stale_lease_claims_once(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue_batch("p", &vec![NewJob::new(vec![1]); 10])
        .unwrap();
    let first = q.poll_batch("p", 4, VIS).unwrap();
    // Part of the batch: two of its four leases.
    let (report, second) = q
        .ack_and_poll(&[first[0].lease, first[1].lease], "p", 3, VIS)
        .unwrap();
    assert_eq!((report.acked, report.stale.len(), second.len()), (2, 0, 3));
    assert_eq!(q.stats("p").unwrap().in_flight, 5);
    // The rest of the batch with a lease already acked: that one is stale, the others acked.
    let (report, third) = q
        .ack_and_poll(
            &[first[0].lease, first[2].lease, first[3].lease],
            "p",
            2,
            VIS,
        )
        .unwrap();
    assert_eq!((report.acked, report.stale.clone()), (2, vec![first[0].id]));
    assert_eq!(third.len(), 2);
    let stats = q.stats("p").unwrap();
    // Each call claimed once: 3 + 2 in flight, 10 - 4 - 3 - 2 ready.
    assert_eq!((stats.in_flight, stats.ready), (5, 1));
    let mut all: Vec<squeueha::Lease> = second.iter().map(|j| j.lease).collect();
    all.extend(third.iter().map(|j| j.lease));
    let (report, last) = q.ack_and_poll(&all, "p", 5, VIS).unwrap();
    assert_eq!((report.acked, last.len()), (5, 1));
    q.ack(last[0].lease).unwrap();
    assert_eq!(q.stats("p").unwrap().pending(), 0);
}

fn batched_ack_reports_stale_without_aborting(b: Backend) {
    let (_dir, q) = open(b);
    let batch: Vec<NewJob> = (0..5u8).map(|i| NewJob::new(vec![i])).collect();
    q.enqueue_batch("a", &batch).unwrap();
    let jobs = q.poll_batch("a", 5, VIS).unwrap();
    q.ack(jobs[0].lease).unwrap();
    let leases: Vec<_> = jobs.iter().map(|j| j.lease).collect();
    let report = q.ack_batch(&leases).unwrap();
    assert_eq!(report.acked, 4);
    assert_eq!(report.stale, vec![jobs[0].id]);
    assert_eq!(q.stats("a").unwrap().pending(), 0);
}

fn stats_and_queue_listing(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue_batch("a", &[NewJob::new(vec![1]), NewJob::new(vec![2])])
        .unwrap();
    q.enqueue("a", NewJob::new(vec![3]).delay(Duration::from_secs(60)))
        .unwrap();
    q.enqueue("b", NewJob::new(vec![4])).unwrap();
    let _ = q.poll_batch("a", 1, VIS).unwrap();
    let s = q.stats("a").unwrap();
    assert_eq!((s.ready, s.in_flight, s.delayed, s.dead), (1, 1, 1, 0));
    assert!(s.oldest_ready_age_ms.unwrap() >= 0);
    let all = q.all_stats().unwrap();
    assert_eq!(
        all.iter().map(|s| s.queue.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
}

fn in_process_wakeup_beats_the_poll_interval(b: Backend) {
    let (_dir, q) = open(b);
    let consumer = q.clone();
    let handle = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let jobs = consumer
            .poll_batch_wait("a", 1, VIS, Duration::from_secs(10))
            .unwrap();
        (jobs.len(), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    q.enqueue("a", NewJob::new(vec![1])).unwrap();
    let (n, waited) = handle.join().unwrap();
    assert_eq!(n, 1);
    // Woken by the enqueue, not by the 10 s timeout.
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
}
fn leader_election_with_fencing_in_process(b: Backend) {
    let (_dir, q) = open(b);
    let ttl = Duration::from_millis(1500); // the next four calls' time on a busy machine
    let a = q.try_lead("alloc", "a", ttl).unwrap().unwrap();
    assert!(q.try_lead("alloc", "b", ttl).unwrap().is_none());
    let renewed = q.try_lead("alloc", "a", ttl).unwrap().unwrap();
    assert_eq!(renewed.fencing_token, a.fencing_token);
    assert_eq!(q.leader("alloc").unwrap().unwrap().holder, "a");
    std::thread::sleep(ttl + Duration::from_millis(200));
    let b = q.try_lead("alloc", "b", ttl).unwrap().unwrap();
    assert!(b.fencing_token > a.fencing_token);
    // The deposed leader's token no longer passes the fence.
    assert!(!fence_passes(&q, "alloc", a.fencing_token));
    assert!(q.resign(&b).unwrap());
    let c = q.try_lead("alloc", "c", ttl).unwrap().unwrap();
    assert!(c.fencing_token > b.fencing_token);
}
fn invalid_arguments_are_typed(b: Backend) {
    let (_dir, q) = open(b);
    assert!(matches!(
        q.enqueue("", NewJob::new(vec![1])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.poll_batch("a", 0, VIS),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.try_lead("", "x", VIS),
        Err(Error::InvalidArgument(_))
    ));
}

async fn async_api_roundtrip_and_wakeup(b: Backend) {
    let (_db, q) = open(b);
    let q = squeueha::AsyncQueue::new(q);
    let consumer = q.clone();
    let waiter = tokio::spawn(async move {
        consumer
            .poll_batch_wait("a", 4, VIS, Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    q.enqueue("a", NewJob::new(b"hi".to_vec())).await.unwrap();
    let jobs = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the enqueue")
        .unwrap()
        .unwrap();
    assert_eq!(jobs.len(), 1);
    q.ack(jobs[0].lease).await.unwrap();
    assert_eq!(q.stats("a").await.unwrap().pending(), 0);
}

async fn a_watch_tells_of_work_without_claiming_it(b: Backend) {
    let (_db, q) = open(b);
    let q = squeueha::AsyncQueue::new(q);
    let mut watch = q.watch("a");
    watch.mark_seen();
    // An enqueue between `mark_seen` and `wait` is not missed: it is what ends the wait.
    q.enqueue("a", NewJob::new(vec![1])).await.unwrap();
    assert!(watch.wait(Duration::from_secs(60)).await.unwrap());
    // Waiting claimed nothing.
    assert_eq!(q.stats("a").await.unwrap().ready, 1);

    // Nothing new: the idle poll interval ends the wait (a timer, not a change).
    watch.mark_seen();
    assert!(!watch.wait(Duration::from_secs(60)).await.unwrap());

    // A change on another queue does not end it either.
    let other = q.clone();
    let enqueue_b = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        other.enqueue("b", NewJob::new(vec![2])).await.unwrap();
    });
    watch.mark_seen();
    assert!(!watch.wait(Duration::from_secs(60)).await.unwrap());
    enqueue_b.await.unwrap();
    assert_eq!(q.stats("a").await.unwrap().ready, 1);
}
fn ack_and_poll_acks_the_previous_batch_and_claims_the_next(b: Backend) {
    let (_dir, q) = open(b);
    let batch: Vec<NewJob> = (0..10u8).map(|i| NewJob::new(vec![i])).collect();
    q.enqueue_batch("a", &batch).unwrap();
    let mut leases = Vec::new();
    let mut seen = Vec::new();
    loop {
        let (report, jobs) = q.ack_and_poll(&leases, "a", 4, VIS).unwrap();
        assert_eq!(report.acked, leases.len());
        if jobs.is_empty() {
            break;
        }
        seen.extend(jobs.iter().map(|j| j.payload[0]));
        leases = jobs.iter().map(|j| j.lease).collect();
    }
    assert_eq!(seen, (0..10u8).collect::<Vec<_>>());
    assert_eq!(q.stats("a").unwrap().pending(), 0);
}

fn same_holder_after_a_lapse_gets_a_new_fencing_token(b: Backend) {
    let (_dir, q) = open(b);
    let ttl = Duration::from_millis(50);
    let first = q.try_lead("l", "a", ttl).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(80));
    let second = q.try_lead("l", "a", ttl).unwrap().unwrap();
    assert!(second.fencing_token > first.fencing_token);
}

fn extreme_arguments_do_not_panic(b: Backend) {
    let (_dir, q) = open(b);
    q.enqueue("a", NewJob::new(vec![1])).unwrap();
    assert_eq!(q.poll_batch("a", usize::MAX, VIS).unwrap().len(), 1);
    q.enqueue("a", NewJob::new(vec![2])).unwrap();
    let jobs = q
        .poll_batch_wait("a", 1, Duration::MAX, Duration::MAX)
        .unwrap();
    assert_eq!(jobs.len(), 1);
}

async fn a_cancelled_async_claim_releases_its_jobs(b: Backend) {
    let (_db, q) = open(b);
    let q = squeueha::AsyncQueue::new(q);
    let batch: Vec<NewJob> = (0..200u32)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    q.enqueue_batch("a", batch).await.unwrap();
    // Drop claims mid-flight, many times; whatever was claimed must come back at once.
    let mut cancelled = 0;
    // Until a few claims were cut mid-flight (a loaded machine may finish many in time).
    for _ in 0..2000 {
        if cancelled >= 5 {
            break;
        }
        let claim = q.poll_batch("a", 200, VIS);
        match tokio::time::timeout(Duration::from_micros(1), claim).await {
            // The claim won the race: these jobs are ours, give them back ourselves.
            Ok(jobs) => {
                for job in jobs.unwrap() {
                    q.release(job.lease, Duration::ZERO).await.unwrap();
                }
            }
            Err(_) => cancelled += 1,
        }
    }
    assert!(cancelled > 0, "no claim was cancelled mid-flight");
    // The releases run in the background: wait until they are done.
    let s = wait_until("the releases", Duration::from_secs(60), || async {
        let s = q.stats("a").await.unwrap();
        (s.in_flight == 0).then_some(s)
    })
    .await;
    assert_eq!((s.ready, s.in_flight), (200, 0), "{s:?}");
}
