//! Poison pills against a real fakeai server process that crashes on `POISON`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;

use common::*;
use horos_fakeai::FakeConfig;
use horos_testkit::runtime;

fn crash_config() -> FakeConfig {
    FakeConfig {
        slots: 8,
        crash_marker: Some("POISON".into()),
        ..FakeConfig::default()
    }
}

/// A batch of 16 with the given poison positions: every innocent job completes exactly once with
/// its answer stored, every poison job is dead-lettered with its reason, innocents lose no attempt,
/// and each poison job was isolated within ⌈log2 16⌉ + 1 reruns.
fn run_case(test: &str, poison_at: &[usize]) {
    run_case_with(test, 16, 16, 0, poison_at);
}

/// `n` jobs, batches of `batch`, refilling up to `refill` more jobs per round.
fn run_case_with(test: &str, n: usize, batch: usize, refill: usize, poison_at: &[usize]) {
    let control = FakeControl::start(test, crash_config());
    let setup = setup_refill(control.clone(), control.url(), batch, refill);
    let rt = runtime();
    let reqs: Vec<_> = (0..n)
        .map(|i| chat(&prompt(i, poison_at.contains(&i))))
        .collect();
    let ids = enqueue(&setup.queue, &reqs, 5);
    let poison_ids: HashSet<i64> = poison_at.iter().map(|&i| ids[i]).collect();

    let reports = rt.block_on(drain(&setup, 80));

    // Innocent jobs: stored once, with their own answer (fakeai echoes the prompt).
    let completed: usize = reports.iter().map(|r| r.completed).sum();
    assert_eq!(completed, n - poison_at.len(), "{reports:#?}");
    assert_eq!(setup.sink.count().unwrap(), (n - poison_at.len()) as u64);
    for (i, id) in ids.iter().enumerate() {
        let text = setup.sink.result_text(*id).unwrap();
        if poison_ids.contains(id) {
            assert_eq!(text, None, "poison job {i} has a result");
        } else {
            assert_eq!(text.as_deref(), Some(prompt(i, false).as_str()), "job {i}");
        }
    }

    // Poison jobs: dead-lettered with the reason, after one claim (bisection burns no attempt).
    let dead = setup.queue.dead_letters("think", 100).unwrap();
    let dead_ids: HashSet<i64> = dead.iter().map(|d| d.id).collect();
    assert_eq!(dead_ids, poison_ids, "{dead:#?}");
    for d in &dead {
        let reason = d.last_error.as_deref().unwrap_or("");
        assert!(reason.contains("poison pill"), "{reason}");
        assert_eq!(d.attempts, 1, "{d:?}");
    }

    // Reruns: within the bound for each poison job, and in total.
    // At most `batch` jobs are in flight when a crash is seen: they are the suspects.
    let bound = bisection_bound(batch);
    let poisons: Vec<_> = reports.iter().flat_map(|r| r.poisoned.clone()).collect();
    assert_eq!(poisons.len(), poison_at.len());
    for p in &poisons {
        assert!(p.reruns <= bound, "{p:?} > {bound}");
    }
    for r in &reports {
        assert!(r.reruns <= bound * r.poisoned.len().max(1), "{r:#?}");
    }
    let reruns: usize = reports.iter().map(|r| r.reruns).sum();
    assert!(
        reruns <= bound * poison_at.len(),
        "{reruns} reruns: {reports:#?}"
    );
    eprintln!(
        "poison at {poison_at:?}: reruns per poison {:?} (bound {bound}), {reruns} in all, {} batches",
        poisons.iter().map(|p| p.reruns).collect::<Vec<_>>(),
        reports.len()
    );
    assert!(
        reports.iter().all(|r| r.dead == 0 && r.retried == 0),
        "{reports:#?}"
    );
    assert!(reports.iter().any(|r| r.crashed));
    // The server was restarted after each crash and is serving again.
    assert!(control.restarts.load(std::sync::atomic::Ordering::SeqCst) >= poison_at.len());
    assert!(rt.block_on(horos_feeder::ServerControl::healthy(&*control)));

    // Nothing is left anywhere.
    let stats = setup.queue.stats("think").unwrap();
    assert_eq!((stats.ready, stats.delayed, stats.in_flight), (0, 0, 0));
    assert_eq!(stats.dead, poison_at.len() as u64);
}

#[test]
fn one_poison_in_sixteen_is_isolated() {
    horos_fakeai::run_child_if_requested();
    for at in [0, 9, 15] {
        run_case("one_poison_in_sixteen_is_isolated", &[at]);
    }
}

#[test]
fn two_poisons_in_sixteen_are_isolated() {
    horos_fakeai::run_child_if_requested();
    for at in [[3, 12], [6, 7], [0, 15]] {
        run_case("two_poisons_in_sixteen_are_isolated", &at);
    }
}

#[test]
fn poisons_are_isolated_in_refill_mode() {
    horos_fakeai::run_child_if_requested();
    for at in [vec![5, 33], vec![0, 1, 39]] {
        run_case_with("poisons_are_isolated_in_refill_mode", 40, 8, 64, &at);
    }
}
