//! The executor that `horos-ref run` uses, replayed in virtual time on gpu-alloc's shipped
//! traces, against gpu-alloc's simulator with the same policy: the same switches, and the same
//! makespan within 2 %.

use horos_gpu_alloc::allocator::{Action, Allocator, AllocatorConfig};
use horos_gpu_alloc::catalogue::Catalogue;
use horos_gpu_alloc::simulator::{SimConfig, Trace, simulate};
use horos_gpu_alloc::traces;
use horos_modes::replay::{ReplayError, replay};

/// The simulator's makespan and its switches as (gpu, to), in the order decided.
fn simulated_switches(
    trace: &Trace,
    catalogue: &Catalogue,
    sim: &SimConfig,
) -> (f64, Vec<(u32, String)>) {
    let mut policy = Allocator::new(AllocatorConfig::default(), catalogue.clone());
    let report =
        simulate(trace, catalogue, &mut policy, sim).expect("the simulator runs the trace");
    let switches = report
        .switches
        .iter()
        .filter_map(|d| match &d.decision.action {
            Action::Switch { to, .. } => Some((d.decision.gpu, to.clone())),
            Action::Keep => None,
        })
        .collect();
    (report.makespan_s, switches)
}

#[test]
fn the_executor_replays_each_shipped_trace_as_the_simulator_does() {
    let catalogue = Catalogue::default();
    let sim = SimConfig::default();
    for trace in traces::shipped() {
        let (sim_makespan, sim_switches) = simulated_switches(&trace, &catalogue, &sim);
        let r = replay(&trace, &catalogue, &sim, AllocatorConfig::default()).unwrap();
        let ratio = r.makespan_s / sim_makespan;
        println!(
            "{}: executor makespan {:.0} s, simulator {:.0} s ({ratio:.4}); switches {} vs {}",
            trace.name,
            r.makespan_s,
            sim_makespan,
            r.switches.len(),
            sim_switches.len()
        );
        assert!(
            (ratio - 1.0).abs() <= 0.02,
            "{}: the executor's makespan is {ratio:.4} x the simulator's",
            trace.name
        );
        let replayed: Vec<(u32, String)> =
            r.switches.iter().map(|s| (s.gpu, s.to.clone())).collect();
        assert_eq!(
            replayed, sim_switches,
            "{}: the executor switched otherwise than the simulator",
            trace.name
        );
    }
}

#[test]
fn a_trace_with_a_class_outside_the_catalogue_is_refused() {
    let mut trace = traces::bursty_vision(1);
    trace.jobs[0].class = "audio".into();
    let e = replay(
        &trace,
        &Catalogue::default(),
        &SimConfig::default(),
        AllocatorConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(e, ReplayError::UnknownClass(c) if c == "audio"));
}

#[test]
fn with_sleep_the_replayed_servers_wake_instead_of_loading_and_lose_less_time_to_swaps() {
    let catalogue = Catalogue::default();
    let trace = traces::phase_change(0x5EED_0003);
    let off = SimConfig::default();
    let on = SimConfig {
        sleep: true,
        ..SimConfig::default()
    };
    let policy = |sim: &SimConfig| AllocatorConfig {
        sleep: sim.sleep,
        ..AllocatorConfig::default()
    };
    let r_off = replay(&trace, &catalogue, &off, policy(&off)).unwrap();
    let r_on = replay(&trace, &catalogue, &on, policy(&on)).unwrap();
    assert_eq!((r_off.sleeps, r_off.wakes), (0, 0));
    assert!(r_on.wakes > 0 && r_on.sleeps >= r_on.wakes, "{r_on:?}");
    assert!(r_on.host_peak_mb <= on.host_memory_mb);
    assert!(
        r_on.swap_s < 0.5 * r_off.swap_s,
        "swap GPU-seconds {} with sleep, {} without",
        r_on.swap_s,
        r_off.swap_s
    );
    // The simulator with sleep sees every sleeper, the executor only what it stopped: the
    // makespans still agree within 2 %.
    let mut alloc = Allocator::new(policy(&on), catalogue.clone());
    let s = simulate(&trace, &catalogue, &mut alloc, &on).unwrap();
    let ratio = r_on.makespan_s / s.makespan_s;
    assert!((ratio - 1.0).abs() <= 0.02, "{ratio}");
}

#[test]
fn with_sleep_the_executor_sees_its_sleepers_and_switches_as_the_simulator_does() {
    // The executor counts the lanes it left as asleep and plans a switch back as a wake, as
    // the simulator's allocator does: on steady-mix the same switches in the same order.
    let catalogue = Catalogue::default();
    let trace = traces::steady_mix(0x5EED_0001);
    let on = SimConfig {
        sleep: true,
        ..SimConfig::default()
    };
    let policy = AllocatorConfig {
        sleep: true,
        ..AllocatorConfig::default()
    };
    let mut alloc = Allocator::new(policy.clone(), catalogue.clone());
    let s = simulate(&trace, &catalogue, &mut alloc, &on).unwrap();
    let simulated: Vec<(u32, String)> = s
        .switches
        .iter()
        .filter_map(|d| match &d.decision.action {
            Action::Switch { to, .. } => Some((d.decision.gpu, to.clone())),
            Action::Keep => None,
        })
        .collect();
    let r = replay(&trace, &catalogue, &on, policy).unwrap();
    let replayed: Vec<(u32, String)> = r.switches.iter().map(|w| (w.gpu, w.to.clone())).collect();
    assert!(s.wakes > 0);
    assert_eq!(replayed, simulated);
    assert_eq!(r.wakes, s.wakes);
}
