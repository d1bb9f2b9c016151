//! Sleep in the simulator (a switch back wakes instead of loading, host RAM is a budget with
//! the oldest sleepers evicted first) and the allocator's anti-thrash rules (the A B A A C
//! case, per-mode bounds).
#![allow(clippy::unwrap_used)]

use horos_gpu_alloc::allocator::{
    Action, Allocator, AllocatorConfig, Decision, GpuState, ModeLimits, Outgoing, Plan, Policy,
    Reason, TickInput,
};
use horos_gpu_alloc::baselines::ArrivalOrder;
use horos_gpu_alloc::catalogue::{Catalogue, ModeSpec, SleepLevel, SleepSpec};
use horos_gpu_alloc::simulator::{Job, SimConfig, SimReport, Trace, simulate};

fn job(t: f64, class: &str, size: f64) -> Job {
    Job {
        arrival_s: t,
        class: class.into(),
        size,
    }
}

fn trace(jobs: Vec<Job>) -> Trace {
    Trace {
        name: "t".into(),
        description: String::new(),
        jobs,
    }
}

/// Switches GPU 0 to each mode of the script at the first tick at or after its time.
struct Script(Vec<(f64, &'static str)>);

impl Policy for Script {
    fn name(&self) -> &str {
        "script"
    }
    fn tick_interval_s(&self) -> f64 {
        1.0
    }
    fn decide(&mut self, input: &TickInput) -> Plan {
        let g = &input.gpus[0];
        let mut d = Decision {
            gpu: 0,
            action: Action::Keep,
            reason: Reason::Static,
        };
        if let Some(&(t, to)) = self.0.first()
            && input.now_s >= t
            && matches!(g.state, GpuState::Idle)
        {
            self.0.remove(0);
            d.action = Action::Switch {
                from: g.mode.clone(),
                to: to.into(),
                drain_first: false,
            };
        }
        Plan {
            now_s: input.now_s,
            decisions: vec![d],
        }
    }
}

fn with_sleep(sleep: bool, host_memory_mb: u64) -> SimConfig {
    SimConfig {
        sleep,
        host_memory_mb,
        ..SimConfig::default()
    }
}

#[test]
fn a_switch_back_to_a_sleeping_mode_costs_its_wake_not_its_cold_start() {
    let cat = Catalogue {
        initial: vec!["think".into()],
        ..Catalogue::default()
    };
    let t = trace(vec![
        job(0.0, "vision", 1.0),
        job(200.0, "think", 600.0),
        job(400.0, "vision", 1.0),
    ]);
    let script = || Script(vec![(0.0, "vision"), (200.0, "think"), (400.0, "vision")]);
    let off = simulate(&t, &cat, &mut script(), &with_sleep(false, 65_536)).unwrap();
    let on = simulate(&t, &cat, &mut script(), &with_sleep(true, 65_536)).unwrap();
    // Off: three cold starts, 70 + 180 + 70 s.
    assert!((off.swap_s - 320.0).abs() < 1e-9, "{}", off.swap_s);
    assert_eq!((off.sleeps, off.wakes), (0, 0));
    // On: think sleeps (1.8 s) and vision loads (70 s); vision sleeps (0.7 s) and think wakes
    // from level 1 (3.6 s); think sleeps (1.8 s) and vision wakes (1.4 s).
    assert!((on.swap_s - 79.3).abs() < 1e-9, "{}", on.swap_s);
    assert_eq!((on.swaps, on.sleeps, on.wakes), (3, 3, 2));
    assert!(on.waits["think"].max_s < 4.3 + 1.0, "{:?}", on.waits);
    assert!(off.waits["think"].max_s >= 180.0, "{:?}", off.waits);
    assert!(
        on.outgoing
            .iter()
            .all(|o| o.choice.choice == Outgoing::Sleep(SleepLevel::One))
    );
}

fn three_sleepy_modes() -> Catalogue {
    let mode = |name: &str| ModeSpec {
        name: name.into(),
        vram_mb: 10_000,
        swap_in_s: 100.0,
        throughput_per_s: 1.0,
        sleep: SleepSpec {
            can_sleep: true,
            ..SleepSpec::default()
        },
        ..ModeSpec::default()
    };
    Catalogue {
        modes: vec![mode("a"), mode("b"), mode("c")],
        initial: vec!["a".into()],
    }
}

#[test]
fn host_ram_is_a_budget_and_the_oldest_sleeper_is_evicted_first() {
    let cat = three_sleepy_modes();
    let t = trace(vec![
        job(0.0, "b", 1.0),
        job(200.0, "c", 1.0),
        job(400.0, "a", 1.0),
    ]);
    let mut p = Script(vec![(0.0, "b"), (200.0, "c"), (400.0, "a")]);
    let r: SimReport = simulate(&t, &cat, &mut p, &with_sleep(true, 15_000)).unwrap();
    // a sleeps at level 1 (10 GB of 15); b must evict a (demoted to level 2) to sleep at level
    // 1; c evicts b; a then wakes from level 2 (4 % of 100 s).
    assert_eq!((r.sleeps, r.evictions, r.wakes), (3, 2, 1));
    assert!(r.host_peak_mb <= 15_000, "{}", r.host_peak_mb);
    assert_eq!(r.outgoing[0].evicted, Vec::<(u32, String)>::new());
    assert_eq!(r.outgoing[1].evicted, vec![(0, "a".to_owned())]);
    assert_eq!(r.outgoing[2].evicted, vec![(0, "b".to_owned())]);
    // Swaps: 1 + 100, 1 + 100, 1 + 4 (sleep 1 % of 100 s each).
    assert!((r.swap_s - 207.0).abs() < 1e-9, "{}", r.swap_s);
    // With no host RAM at all every sleeper goes to level 2 and nothing is evicted.
    let mut p = Script(vec![(0.0, "b"), (200.0, "c"), (400.0, "a")]);
    let r = simulate(&t, &cat, &mut p, &with_sleep(true, 0)).unwrap();
    assert_eq!((r.evictions, r.host_peak_mb), (0, 0));
    assert!(
        r.outgoing
            .iter()
            .all(|o| o.choice.choice == Outgoing::Sleep(SleepLevel::Two))
    );
}

/// One GPU serving a, b or c (20 s swaps, 10 s jobs): a at 0, b at 1, a at 2, a at 3, c at 4.
fn abaac() -> (Catalogue, Trace) {
    let mode = |name: &str| ModeSpec {
        name: name.into(),
        swap_in_s: 20.0,
        throughput_per_s: 1.0,
        ..ModeSpec::default()
    };
    let cat = Catalogue {
        modes: vec![mode("a"), mode("b"), mode("c")],
        initial: vec!["a".into()],
    };
    let t = trace(vec![
        job(0.0, "a", 10.0),
        job(1.0, "b", 10.0),
        job(2.0, "a", 10.0),
        job(3.0, "a", 10.0),
        job(4.0, "c", 10.0),
    ]);
    (cat, t)
}

#[test]
fn a_b_a_a_c_makes_fewer_swaps_than_arrival_order_and_no_job_waits_past_its_bound() {
    let (cat, t) = abaac();
    let fifo = simulate(&t, &cat, &mut ArrivalOrder, &SimConfig::default()).unwrap();
    assert_eq!(fifo.swaps, 3, "arrival order thrashes: a, b, a, c");
    let mut cfg = AllocatorConfig::default();
    cfg.modes.insert(
        "c".into(),
        ModeLimits {
            max_wait_s: Some(300.0),
            ..ModeLimits::default()
        },
    );
    let mut alloc = Allocator::new(cfg.clone(), cat.clone());
    let r = simulate(&t, &cat, &mut alloc, &SimConfig::default()).unwrap();
    assert_eq!(r.swaps, 2, "{:?}", r.switches);
    // Both queued a's are served before the GPU leaves a, never to come back; b and c once
    // each (c first here: its tighter bound).
    let mut order: Vec<&str> = r
        .switches
        .iter()
        .filter_map(|l| match &l.decision.action {
            Action::Switch { to, .. } => Some(to.as_str()),
            Action::Keep => None,
        })
        .collect();
    order.sort_unstable();
    assert_eq!(order, ["b", "c"]);
    assert_eq!(r.waits["a"].count, 3);
    for (class, w) in &r.waits {
        assert!(
            w.max_s <= cfg.max_wait_s(class),
            "{class} waited {} s, bound {}",
            w.max_s,
            cfg.max_wait_s(class)
        );
    }
    // Every switch has its reason.
    assert!(
        r.switches
            .iter()
            .all(|l| !matches!(l.decision.reason, Reason::NoBetterPlan))
    );
}

fn one_gpu_a_b() -> Catalogue {
    let mode = |name: &str| ModeSpec {
        name: name.into(),
        swap_in_s: 20.0,
        throughput_per_s: 1.0,
        ..ModeSpec::default()
    };
    Catalogue {
        modes: vec![mode("a"), mode("b")],
        initial: vec!["a".into()],
    }
}

fn tick_a_b(cfg: AllocatorConfig, b_oldest_s: f64) -> Decision {
    use horos_gpu_alloc::allocator::{GpuView, QueueStat};
    let stat = |jobs, work: f64, oldest| QueueStat {
        pending_jobs: jobs,
        pending_work_s: work,
        oldest_wait_s: oldest,
        arrived_work_s_total: work,
    };
    let mut a = Allocator::new(cfg, one_gpu_a_b());
    let input = TickInput {
        now_s: 0.0,
        gpus: vec![GpuView {
            index: 0,
            mode: Some("a".into()),
            state: GpuState::Idle,
            mode_since_s: -3600.0,
            last_used_s: 0.0,
            asleep: Vec::new(),
        }],
        queues: [
            ("a".to_owned(), stat(2, 20.0, 5.0)),
            ("b".to_owned(), stat(1, 2000.0, b_oldest_s)),
        ]
        .into_iter()
        .collect(),
    };
    a.decide(&input).decisions.remove(0)
}

#[test]
fn the_resident_class_is_served_first_when_that_waits_less_and_the_other_stays_in_bound() {
    // Two 10 s jobs of a queued on a's only GPU, one 2000 s job of b: switching now makes
    // both a's wait for the swap, b's job and the swap back; serving them first delays b's
    // job by one batch.
    let on = AllocatorConfig {
        serve_resident_first: true,
        ..AllocatorConfig::default()
    };
    let d = tick_a_b(on.clone(), 5.0);
    assert_eq!(d.action, Action::Keep, "{d:?}");
    let Reason::ServeResidentFirst {
        class,
        pending_jobs,
        wanted,
        wait_if_kept_s,
        wait_if_switched_s,
    } = &d.reason
    else {
        panic!("{d:?}");
    };
    assert_eq!(
        (class.as_str(), *pending_jobs, wanted.as_str()),
        ("a", 2, "b")
    );
    assert!(wait_if_kept_s < wait_if_switched_s);
    // Off (the default): the switch goes ahead.
    let d = tick_a_b(AllocatorConfig::default(), 5.0);
    assert!(matches!(d.action, Action::Switch { .. }), "{d:?}");
    // b's job close to its bound: no more waiting for a.
    let d = tick_a_b(on, 1100.0);
    assert!(matches!(d.action, Action::Switch { .. }), "{d:?}");
}

#[test]
fn a_server_that_cannot_sleep_is_stopped_and_the_choice_logged_with_its_reason() {
    use horos_gpu_alloc::allocator::OutgoingReason;
    // Embed's encoder server cannot sleep: leaving it stops it, and coming back is a load.
    let cat = Catalogue {
        initial: vec!["embed".into()],
        ..Catalogue::default()
    };
    let t = trace(vec![job(0.0, "fast", 140.0), job(200.0, "embed", 1000.0)]);
    let mut p = Script(vec![(0.0, "fast"), (200.0, "embed")]);
    let r = simulate(&t, &cat, &mut p, &with_sleep(true, 65_536)).unwrap();
    assert_eq!(r.outgoing.len(), 2);
    assert_eq!(r.outgoing[0].mode, "embed");
    assert_eq!(r.outgoing[0].choice.choice, Outgoing::Stop);
    assert_eq!(r.outgoing[0].choice.reason, OutgoingReason::CannotSleep);
    assert_eq!(
        r.outgoing[1].choice.choice,
        Outgoing::Sleep(SleepLevel::One)
    );
    assert_eq!((r.sleeps, r.wakes), (1, 0));
    // Fast loads (60 s; embed stopped, free), then fast sleeps (0.6 s) and embed loads (20 s).
    assert!(
        (r.swap_s - (60.0 + 0.6 + 20.0)).abs() < 1e-9,
        "{}",
        r.swap_s
    );
}
