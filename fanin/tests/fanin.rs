//! Fan-in behaviour on real databases: every test runs on a SQLite file (`sqlite::name`) and on
//! a PostgreSQL schema of its own (`postgres::name`, skipped without `HOROS_PG_URL`), through the
//! same conformance harness as squeueha's.
#![allow(clippy::unwrap_used)]

#[path = "../../squeueha/tests/common/mod.rs"]
mod common;

use common::{Backend, Db};

use std::sync::Arc;
use std::time::Duration;

use fanin::{
    Completion, Error, FailurePolicy, FanIn, FanInConfig, FragmentOutcome, FragmentRef,
    FragmentResult, ParentSpec, ParentState, Recorded,
};
use squeueha::{Config, Job, NewJob};

on_both_backends! {
    sync: [
        duplicates_count_once_and_results_come_in_order,
        random_interleavings_with_duplicates_and_retries_complete_exactly_once,
        fail_fast_cancels_pending_and_closes_the_parent,
        partial_policy_completes_with_failed_list,
        three_levels_of_nesting_complete_bottom_up_exactly_once,
        ten_thousand_fragments,
        bad_input_is_typed_and_changes_nothing,
        nack_retries_then_fails_the_fragment_on_its_last_attempt,
        reconcile_records_fragments_dead_lettered_by_lease_expiry,
        same_job_twice_in_one_batch_counts_once,
        large_results_of_a_duplicated_job_keep_the_recorded_file,
        a_deleted_parent_leaves_no_fragment_result_child_or_unclaimed_job,
        a_lease_for_another_slot_and_a_closed_parent_are_refused,
        a_file_with_newer_fanin_tables_is_refused,
    ],
    async: [],
}

const VIS: Duration = Duration::from_secs(60);

fn open(b: Backend, cfg: FanInConfig) -> (Db, FanIn) {
    let db = Db::new(b);
    let q = db.open(Config::default());
    (db, FanIn::open(q, cfg).unwrap())
}

fn fragments(n: u32) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect()
}

fn index_of(job: &Job) -> u32 {
    u32::from_le_bytes(job.payload[..4].try_into().unwrap())
}

fn result_for(i: u32) -> Vec<u8> {
    format!("result-{i}").into_bytes()
}

fn completions(fan: &FanIn, queue: &str) -> Vec<Completion> {
    let mut out = Vec::new();
    loop {
        let jobs = fan.queue().poll_batch(queue, 100, VIS).unwrap();
        if jobs.is_empty() {
            return out;
        }
        for j in jobs {
            out.push(j.json().unwrap());
            fan.queue().ack(j.lease).unwrap();
        }
    }
}

fn duplicates_count_once_and_results_come_in_order(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(
            ParentSpec::new("page", "tiles")
                .jobs(fragments(5))
                .then("next", serde_json::json!({"page": 1})),
        )
        .unwrap();
    assert_eq!(fan.queue().stats("tiles").unwrap().ready, 5);
    let mut jobs = fan.queue().poll_batch("tiles", 5, VIS).unwrap();
    jobs.reverse(); // complete out of order
    let mut finished = 0;
    for job in &jobs {
        let r = fan
            .complete(job, FragmentResult::Bytes(result_for(index_of(job))))
            .unwrap();
        if matches!(r, Recorded::ParentFinished(_)) {
            finished += 1;
        }
        // A retry after a lost ack: same fragment again.
        assert_eq!(
            fan.complete(job, FragmentResult::Bytes(b"other".to_vec()))
                .unwrap(),
            Recorded::Duplicate
        );
    }
    assert_eq!(finished, 1);
    let results = fan.results(parent).unwrap();
    let expected: Vec<FragmentOutcome> = (0..5)
        .map(|i| FragmentOutcome::Done(result_for(i)))
        .collect();
    assert_eq!(results, expected);
    let next = completions(&fan, "next");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].parent_id, parent);
    assert_eq!(next[0].state, ParentState::Completed);
    assert_eq!(next[0].data["page"], 1);
    let p = fan.progress(parent).unwrap();
    assert_eq!((p.done, p.pending, p.state), (5, 0, ParentState::Completed));
    assert_eq!(fan.queue().stats("tiles").unwrap().pending(), 0);
}

/// A tiny deterministic PRNG so every interleaving is reproducible from its seed.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_interleavings_with_duplicates_and_retries_complete_exactly_once(b: Backend) {
    for seed in 1..=12u64 {
        let (_d, fan) = open(b, FanInConfig::default());
        let n = 40 + (seed as u32 * 7) % 30;
        let parent = fan
            .create_parent(
                ParentSpec::new(format!("seed-{seed}"), "frag")
                    // Enough attempts that simulated crashes never exhaust them.
                    .jobs(fragments(n).into_iter().map(|j| j.max_attempts(1000)))
                    .then("done", serde_json::json!(seed)),
            )
            .unwrap();
        let fan = Arc::new(fan);
        let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let fan = fan.clone();
                let finished = finished.clone();
                std::thread::spawn(move || {
                    let mut rng = XorShift(seed * 1000 + t + 1);
                    let deadline = std::time::Instant::now() + Duration::from_secs(60);
                    while fan.progress(parent).unwrap().state == ParentState::Pending {
                        assert!(std::time::Instant::now() < deadline, "seed {seed} stalled");
                        // Short visibility: slow workers lose their lease and another one redoes
                        // the fragment, so reports race.
                        let vis = Duration::from_millis(5 + rng.below(30));
                        let jobs = fan
                            .queue()
                            .poll_batch_wait(
                                "frag",
                                1 + rng.below(4) as usize,
                                vis,
                                Duration::from_millis(50),
                            )
                            .unwrap();
                        for job in jobs {
                            std::thread::sleep(Duration::from_millis(rng.below(15)));
                            match rng.below(10) {
                                // Crash before reporting: the job comes back after its lease.
                                0 => continue,
                                // Transient failure: nack and retry later.
                                1 if !job.is_last_attempt() => {
                                    fan.queue()
                                        .nack(
                                            job.lease,
                                            "transient",
                                            Some(Duration::from_millis(5)),
                                        )
                                        .ok();
                                    continue;
                                }
                                _ => {}
                            }
                            let reports = if rng.below(4) == 0 { 2 } else { 1 };
                            for _ in 0..reports {
                                let r = fan
                                    .complete(
                                        &job,
                                        FragmentResult::Bytes(result_for(index_of(&job))),
                                    )
                                    .unwrap();
                                if matches!(r, Recorded::ParentFinished(_)) {
                                    finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            finished.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "seed {seed}"
        );
        let results = fan.results(parent).unwrap();
        assert_eq!(results.len(), n as usize);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(
                r,
                &FragmentOutcome::Done(result_for(i as u32)),
                "seed {seed} idx {i}"
            );
        }
        let next = completions(&fan, "done");
        assert_eq!(
            next.len(),
            1,
            "seed {seed}: next stage enqueued exactly once"
        );
    }
}

fn fail_fast_cancels_pending_and_closes_the_parent(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(
            ParentSpec::new("doc", "frag")
                .jobs(fragments(6))
                .then("next", serde_json::Value::Null),
        )
        .unwrap();
    let jobs = fan.queue().poll_batch("frag", 2, VIS).unwrap();
    assert_eq!(
        fan.fail(&jobs[0], "unreadable tile").unwrap(),
        Recorded::ParentFinished(ParentState::Failed)
    );
    // The 4 queued fragments were cancelled; the in-flight one reports into a closed parent.
    assert_eq!(fan.queue().stats("frag").unwrap().ready, 0);
    assert_eq!(
        fan.complete(&jobs[1], FragmentResult::Bytes(vec![1]))
            .unwrap(),
        Recorded::ParentClosed
    );
    let p = fan.progress(parent).unwrap();
    assert_eq!(
        (p.state, p.failed, p.cancelled, p.done),
        (ParentState::Failed, 1, 5, 0)
    );
    let next = completions(&fan, "next");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].state, ParentState::Failed);
    assert_eq!(next[0].failed, vec![index_of(&jobs[0])]);
    assert_eq!(fan.queue().dead_letters("frag", 10).unwrap().len(), 1);
}

fn partial_policy_completes_with_failed_list(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(
            ParentSpec::new("doc", "frag")
                .jobs(fragments(4))
                .policy(FailurePolicy::Partial)
                .then("next", serde_json::Value::Null),
        )
        .unwrap();
    for job in fan.queue().poll_batch("frag", 4, VIS).unwrap() {
        if index_of(&job) == 2 {
            fan.fail(&job, "bad").unwrap();
        } else {
            fan.complete(&job, FragmentResult::Bytes(result_for(index_of(&job))))
                .unwrap();
        }
    }
    let next = completions(&fan, "next");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].state, ParentState::Completed);
    assert_eq!(next[0].failed, vec![2]);
    assert_eq!(
        fan.results(parent).unwrap()[2],
        FragmentOutcome::Failed("bad".into())
    );
}

fn three_levels_of_nesting_complete_bottom_up_exactly_once(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    // document -> 3 pages -> tiles (2, 3, 1) ; page 2 of the doc is itself split into 2 blocks.
    let doc = fan
        .create_parent(
            ParentSpec::new("doc", "unused")
                .children(3)
                .then("doc-done", serde_json::json!("manual.pdf")),
        )
        .unwrap();
    let mut leaves = 0;
    for (page, tiles) in [(0u32, 2u32), (1, 3)] {
        fan.create_parent(
            ParentSpec::new(format!("page-{page}"), "tiles")
                .jobs(fragments(tiles))
                .child_of(FragmentRef {
                    parent: doc,
                    index: page,
                }),
        )
        .unwrap();
        leaves += tiles;
    }
    let page2 = fan
        .create_parent(
            ParentSpec::new("page-2", "unused")
                .children(2)
                .child_of(FragmentRef {
                    parent: doc,
                    index: 2,
                }),
        )
        .unwrap();
    for block in 0..2 {
        fan.create_parent(
            ParentSpec::new(format!("block-{block}"), "tiles")
                .jobs(fragments(2))
                .child_of(FragmentRef {
                    parent: page2,
                    index: block,
                }),
        )
        .unwrap();
        leaves += 2;
    }
    // A slot can only be filled once.
    assert!(matches!(
        fan.create_parent(ParentSpec::new("dup", "tiles").jobs(fragments(1)).child_of(
            FragmentRef {
                parent: doc,
                index: 0
            }
        )),
        Err(Error::WrongFragmentKind { .. })
    ));
    let mut finished_states = Vec::new();
    loop {
        let jobs = fan.queue().poll_batch("tiles", 3, VIS).unwrap();
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            leaves -= 1;
            if let Recorded::ParentFinished(s) =
                fan.complete(&job, FragmentResult::Bytes(vec![1])).unwrap()
            {
                finished_states.push(s);
            }
        }
    }
    assert_eq!(leaves, 0);
    assert_eq!(fan.progress(doc).unwrap().state, ParentState::Completed);
    assert_eq!(fan.progress(page2).unwrap().state, ParentState::Completed);
    let doc_results = fan.results(doc).unwrap();
    assert!(
        doc_results
            .iter()
            .all(|r| matches!(r, FragmentOutcome::Child(_)))
    );
    let next = completions(&fan, "doc-done");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].parent_id, doc);
    // doc, page-0, page-1, page-2, block-0, block-1
    assert_eq!(fan.parents(ParentState::Completed, 100).unwrap().len(), 6);
    assert!(fan.parents(ParentState::Pending, 100).unwrap().is_empty());
}

fn ten_thousand_fragments(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(
            ParentSpec::new("big", "frag")
                .jobs(fragments(10_000))
                .then("next", serde_json::Value::Null),
        )
        .unwrap();
    let mut finished = 0;
    loop {
        let jobs = fan.queue().poll_batch("frag", 256, VIS).unwrap();
        if jobs.is_empty() {
            break;
        }
        let items = jobs
            .iter()
            .map(|j| (j, FragmentResult::Bytes(result_for(index_of(j)))))
            .collect();
        finished += fan
            .complete_batch(items)
            .unwrap()
            .iter()
            .filter(|r| matches!(r, Recorded::ParentFinished(_)))
            .count();
    }
    assert_eq!(finished, 1);
    let results = fan.results(parent).unwrap();
    assert_eq!(results.len(), 10_000);
    assert!(
        results
            .iter()
            .enumerate()
            .all(|(i, r)| *r == FragmentOutcome::Done(result_for(i as u32)))
    );
    assert_eq!(completions(&fan, "next").len(), 1);
}

fn bad_input_is_typed_and_changes_nothing(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let results_dir = dir.path().join("results");
    let (_d, fan) = open(
        b,
        FanInConfig {
            results_dir: Some(results_dir.clone()),
            ..FanInConfig::default()
        },
    );
    let parent = fan
        .create_parent(ParentSpec::new("p", "frag").jobs(fragments(3)))
        .unwrap();
    let before = fan.progress(parent).unwrap();
    let stats_before = fan.queue().stats("frag").unwrap();
    assert!(matches!(
        fan.record(
            FragmentRef {
                parent: 999,
                index: 0
            },
            None,
            FragmentResult::Bytes(vec![])
        ),
        Err(Error::UnknownParent(999))
    ));
    assert!(matches!(
        fan.record(
            FragmentRef { parent, index: 3 },
            None,
            FragmentResult::Bytes(vec![])
        ),
        Err(Error::IndexOutOfRange {
            index: 3,
            total: 3,
            ..
        })
    ));
    for bad in ["../../etc/passwd", "/etc/passwd", "a/../../b", ""] {
        assert!(
            matches!(
                fan.record(
                    FragmentRef { parent, index: 0 },
                    None,
                    FragmentResult::File(bad.into())
                ),
                Err(Error::PathEscapes(_))
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        fan.create_parent(ParentSpec::new("empty", "frag")),
        Err(Error::NoFragments)
    ));
    assert!(matches!(
        fan.progress(12345),
        Err(Error::UnknownParent(12345))
    ));
    // A job that is not a fragment.
    fan.queue().enqueue("other", NewJob::new(vec![1])).unwrap();
    let stray = fan.queue().poll_batch("other", 1, VIS).unwrap().remove(0);
    assert!(matches!(
        fan.complete(&stray, FragmentResult::Bytes(vec![])),
        Err(Error::NotAFragment(_))
    ));
    assert_eq!(fan.progress(parent).unwrap(), before);
    let without_age = |mut s: squeueha::QueueStats| {
        s.oldest_ready_age_ms = None;
        s
    };
    assert_eq!(
        without_age(fan.queue().stats("frag").unwrap()),
        without_age(stats_before)
    );
    assert_eq!(fan.queue().stats("other").unwrap().in_flight, 1);

    // A legitimate file result inside the directory is accepted; large bytes spill to files.
    std::fs::create_dir_all(results_dir.join("p")).unwrap();
    std::fs::write(results_dir.join("p/tile0.txt"), b"from file").unwrap();
    fan.record(
        FragmentRef { parent, index: 0 },
        None,
        FragmentResult::File("p/tile0.txt".into()),
    )
    .unwrap();
    let big = vec![42u8; 300 * 1024];
    fan.record(
        FragmentRef { parent, index: 1 },
        None,
        FragmentResult::Bytes(big.clone()),
    )
    .unwrap();
    let results = fan.results(parent).unwrap();
    assert_eq!(results[0], FragmentOutcome::Done(b"from file".to_vec()));
    assert_eq!(results[1], FragmentOutcome::Done(big));
}

fn nack_retries_then_fails_the_fragment_on_its_last_attempt(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(
            ParentSpec::new("p", "frag")
                .jobs([NewJob::new(vec![0; 4]).max_attempts(2)])
                .policy(FailurePolicy::Partial),
        )
        .unwrap();
    let j = fan.queue().poll_batch("frag", 1, VIS).unwrap().remove(0);
    assert_eq!(fan.nack(&j, "flaky").unwrap(), None);
    fan.queue()
        .poll_batch_wait("frag", 1, VIS, Duration::from_secs(5))
        .map(|mut v| {
            let j = v.remove(0);
            assert_eq!(
                fan.nack(&j, "still broken").unwrap(),
                Some(Recorded::ParentFinished(ParentState::Completed))
            );
        })
        .unwrap();
    assert_eq!(fan.progress(parent).unwrap().failed, 1);
}

fn reconcile_records_fragments_dead_lettered_by_lease_expiry(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(ParentSpec::new("p", "frag").jobs([NewJob::new(vec![0; 4]).max_attempts(1)]))
        .unwrap();
    let _ = fan
        .queue()
        .poll_batch("frag", 1, Duration::from_millis(10))
        .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    // The expiry is noticed by the next claim, which dead-letters the job.
    assert!(fan.queue().poll_batch("frag", 1, VIS).unwrap().is_empty());
    assert_eq!(fan.reconcile().unwrap(), 1);
    assert_eq!(fan.progress(parent).unwrap().state, ParentState::Failed);
    assert_eq!(fan.reconcile().unwrap(), 0);
}

fn same_job_twice_in_one_batch_counts_once(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(ParentSpec::new("p", "frag").jobs(fragments(2)))
        .unwrap();
    let jobs = fan.queue().poll_batch("frag", 2, VIS).unwrap();
    let out = fan
        .complete_batch(vec![
            (&jobs[0], FragmentResult::Bytes(b"a".to_vec())),
            (&jobs[0], FragmentResult::Bytes(b"b".to_vec())),
        ])
        .unwrap();
    assert_eq!(out, vec![Recorded::Recorded, Recorded::Duplicate]);
    let p = fan.progress(parent).unwrap();
    assert_eq!((p.done, p.pending), (1, 1));
    assert_eq!(
        fan.complete(&jobs[1], FragmentResult::Bytes(vec![]))
            .unwrap(),
        Recorded::ParentFinished(ParentState::Completed)
    );
}

fn large_results_of_a_duplicated_job_keep_the_recorded_file(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_d, fan) = open(
        b,
        FanInConfig {
            results_dir: Some(dir.path().join("results")),
            inline_limit: 16,
        },
    );
    let parent = fan
        .create_parent(ParentSpec::new("p", "frag").jobs(fragments(1)))
        .unwrap();
    let job = fan.queue().poll_batch("frag", 1, VIS).unwrap().remove(0);
    let out = fan
        .complete_batch(vec![
            (&job, FragmentResult::Bytes(vec![1; 100])),
            (&job, FragmentResult::Bytes(vec![2; 100])),
        ])
        .unwrap();
    assert_eq!(out[1], Recorded::Duplicate);
    // The recorded result is still readable; the duplicate's file was removed.
    assert!(matches!(&fan.results(parent).unwrap()[0], FragmentOutcome::Done(b) if b.len() == 100));
    let files = std::fs::read_dir(dir.path().join("results/fanin"))
        .unwrap()
        .count();
    assert_eq!(files, 1);
}

fn a_deleted_parent_leaves_no_fragment_result_child_or_unclaimed_job(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_d, fan) = open(
        b,
        FanInConfig {
            results_dir: Some(dir.path().join("results")),
            inline_limit: 16,
        },
    );
    let other = fan
        .create_parent(ParentSpec::new("other", "other-frag").jobs(fragments(1)))
        .unwrap();
    let top = fan
        .create_parent(ParentSpec::new("doc", "unused").children(1))
        .unwrap();
    let child = fan
        .create_parent(
            ParentSpec::new("page", "tiles")
                .jobs(fragments(3))
                .child_of(FragmentRef {
                    parent: top,
                    index: 0,
                }),
        )
        .unwrap();
    let mut jobs = fan.queue().poll_batch("tiles", 2, VIS).unwrap();
    let held = jobs.pop().unwrap();
    fan.complete(&jobs[0], FragmentResult::Bytes(vec![7; 100]))
        .unwrap();
    let files = fan
        .queue()
        .transaction(|tx| fan.delete_parent_in(tx, top))
        .unwrap();
    assert_eq!(files.len(), 1);
    assert!(files[0].starts_with(dir.path().join("results")) && files[0].exists());
    for p in [top, child] {
        assert!(matches!(fan.progress(p), Err(Error::UnknownParent(id)) if id == p));
    }
    // The unclaimed fragment job is gone; the claimed one's report finds no fragment.
    assert_eq!(fan.queue().stats("tiles").unwrap().ready, 0);
    assert!(matches!(
        fan.complete(&held, FragmentResult::Bytes(b"late".to_vec())),
        Err(Error::NotAFragment(_))
    ));
    // Another parent is untouched; an unknown one deletes nothing.
    assert_eq!(fan.progress(other).unwrap().total, 1);
    let none = fan
        .queue()
        .transaction(|tx| fan.delete_parent_in(tx, 424_242))
        .unwrap();
    assert!(none.is_empty());
}

fn a_lease_for_another_slot_and_a_closed_parent_are_refused(b: Backend) {
    let (_d, fan) = open(b, FanInConfig::default());
    let parent = fan
        .create_parent(ParentSpec::new("p", "frag").jobs(fragments(2)))
        .unwrap();
    let jobs = fan.queue().poll_batch("frag", 2, VIS).unwrap();
    let (a, b) = (&jobs[0], &jobs[1]);
    let slot_of_a = fan.fragment_of(a.id).unwrap().unwrap();
    assert!(matches!(
        fan.record(slot_of_a, Some(b.lease), FragmentResult::Bytes(vec![])),
        Err(Error::LeaseNotForSlot { .. })
    ));
    // Nothing changed: b's job is still in flight, a's slot still pending.
    assert_eq!(fan.queue().stats("frag").unwrap().in_flight, 2);
    assert_eq!(fan.progress(parent).unwrap().pending, 2);

    let doc = fan
        .create_parent(
            ParentSpec::new("doc", "frag")
                .children(1)
                .jobs(fragments(1)),
        )
        .unwrap();
    let j = fan.queue().poll_batch("frag", 1, VIS).unwrap().remove(0);
    fan.fail(&j, "broken").unwrap();
    let late = fan.create_parent(
        ParentSpec::new("late page", "frag")
            .jobs(fragments(1))
            .child_of(FragmentRef {
                parent: doc,
                index: 0,
            }),
    );
    assert!(
        matches!(late, Err(Error::ParentClosed(p)) if p == doc),
        "{late:?}"
    );
}

fn a_file_with_newer_fanin_tables_is_refused(b: Backend) {
    let (db, fan) = open(b, FanInConfig::default());
    fan.queue()
        .transaction(|tx| {
            tx.execute(
                "UPDATE squeueha_schema SET version = 7 WHERE namespace = 'fanin'",
                squeueha::params![],
            )
        })
        .unwrap();
    drop(fan);
    let q = db.open(Config::default());
    let err = FanIn::open(q, FanInConfig::default()).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Queue(squeueha::Error::SchemaTooNew { namespace, found: 7, supported: 1 })
                if namespace == "fanin"
        ),
        "{err:?}"
    );
}
