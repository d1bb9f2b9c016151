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
