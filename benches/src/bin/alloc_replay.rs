//! Bench binary: the allocator as `horos-ref run` executes it (horos-modes' executor, servers and
//! feeder simulated, in virtual time) against gpu-alloc's simulator with the same policy and
//! against the simulator's lower bound, on the shipped traces and on random draws of each
//! generator.
//!
//! `cargo run --release -p horos-benches --bin alloc-replay [-- --seeds 20] [--markdown]
//! [--sleep on|off|both]`
//!
//! `--sleep on` runs everything with sleep on (servers put to sleep rather than stopped, the
//! allocator counting a switch back as a wake); `--sleep both` adds a section comparing sleep
//! on and off; `off` (the default) is the run without sleep.
//!
//! Deterministic: the same figures on any machine.

use horos_gpu_alloc::allocator::{Allocator, AllocatorConfig};
use horos_gpu_alloc::catalogue::Catalogue;
use horos_gpu_alloc::simulator::{SimConfig, Trace, lower_bound, lower_bound_sleep, simulate};
use horos_gpu_alloc::traces;
use horos_modes::replay::replay;

/// One trace's figures.
struct Row {
    trace: String,
    lower_bound_s: f64,
    simulator_s: f64,
    executor_s: f64,
    swap_share: f64,
    swaps: usize,
    max_wait_s: f64,
    same_switches: bool,
    /// Executor's GPU-seconds lost to swaps (sleeps included).
    swap_s: f64,
    /// Executor's wakes.
    wakes: usize,
}

fn measure(trace: &Trace, catalogue: &Catalogue, sim: &SimConfig) -> Result<Row, String> {
    let policy = AllocatorConfig {
        sleep: sim.sleep,
        ..AllocatorConfig::default()
    };
    let lb = if sim.sleep {
        lower_bound_sleep(trace, catalogue, &sim.thermal)
    } else {
        lower_bound(trace, catalogue, &sim.thermal)
    }
    .map_err(|e| e.to_string())?;
    let mut allocator = Allocator::new(policy.clone(), catalogue.clone());
    let s = simulate(trace, catalogue, &mut allocator, sim).map_err(|e| e.to_string())?;
    let r = replay(trace, catalogue, sim, policy).map_err(|e| e.to_string())?;
    let simulated: Vec<(u32, String)> = s
        .switches
        .iter()
        .filter_map(|d| match &d.decision.action {
            horos_gpu_alloc::allocator::Action::Switch { to, .. } => {
                Some((d.decision.gpu, to.clone()))
            }
            horos_gpu_alloc::allocator::Action::Keep => None,
        })
        .collect();
    let replayed: Vec<(u32, String)> = r.switches.iter().map(|w| (w.gpu, w.to.clone())).collect();
    Ok(Row {
        trace: trace.name.clone(),
        lower_bound_s: lb.value_s,
        simulator_s: s.makespan_s,
        executor_s: r.makespan_s,
        swap_share: r.swap_share(),
        swaps: r.swaps,
        max_wait_s: r.max_wait_s.values().copied().fold(0.0, f64::max),
        same_switches: simulated == replayed,
        swap_s: r.swap_s,
        wakes: r.wakes,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seeds: u64 = args
        .iter()
        .position(|a| a == "--seeds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let sleep = args
        .iter()
        .position(|a| a == "--sleep")
        .and_then(|i| args.get(i + 1))
        .map_or("off", String::as_str);
    if !matches!(sleep, "on" | "off" | "both") {
        eprintln!("--sleep takes on, off or both (got {sleep:?})");
        std::process::exit(2);
    }
    let catalogue = Catalogue::default();
    let sim = SimConfig {
        sleep: sleep == "on",
        ..SimConfig::default()
    };
    let bound = AllocatorConfig::default().max_wait_s;
    println!(
        "| trace | lower bound s | simulator s | executor s | executor / simulator | executor / LB | swap share | swaps | max wait s | same switches |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    let print = |r: &Row| {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.4} | {:.3} | {:.2}% | {} | {:.0} | {} |",
            r.trace,
            r.lower_bound_s,
            r.simulator_s,
            r.executor_s,
            r.executor_s / r.simulator_s,
            r.executor_s / r.lower_bound_s,
            100.0 * r.swap_share,
            r.swaps,
            r.max_wait_s,
            if r.same_switches { "yes" } else { "no" }
        )
    };
    for trace in traces::shipped() {
        match measure(&trace, &catalogue, &sim) {
            Ok(r) => {
                print(&r);
                rows.push(r);
            }
            Err(e) => {
                eprintln!("{}: {e}", trace.name);
                std::process::exit(2);
            }
        }
    }
    type Generator = fn(u64) -> Trace;
    let generators: [(&str, Generator); 3] = [
        ("steady-mix", traces::steady_mix),
        ("bursty-vision", traces::bursty_vision),
        ("phase-change", traces::phase_change),
    ];
    println!();
    println!("Random draws (seeds 1..={seeds}): the worst draw per generator for each measure.");
    println!();
    println!(
        "| generator | draws | worst executor / simulator | worst executor / LB | draws > 1.05 x LB | draws with other switches | worst swap share | worst wait s | draws past the {bound:.0} s bound |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut all_within_2pc = rows
        .iter()
        .all(|r| (r.executor_s / r.simulator_s - 1.0).abs() <= 0.02);
    for (name, generate) in generators {
        let mut draws = Vec::new();
        for seed in 1..=seeds {
            match measure(&generate(seed), &catalogue, &sim) {
                Ok(r) => draws.push(r),
                Err(e) => {
                    eprintln!("{name} seed {seed}: {e}");
                    std::process::exit(2);
                }
            }
        }
        let worst = |f: &dyn Fn(&Row) -> f64| draws.iter().map(f).fold(0.0, f64::max);
        let vs_sim = worst(&|r| (r.executor_s / r.simulator_s - 1.0).abs() + 1.0);
        all_within_2pc &= vs_sim <= 1.02;
        println!(
            "| {name} | {} | {:.4} | {:.3} | {} | {} | {:.2}% | {:.0} | {} |",
            draws.len(),
            vs_sim,
            worst(&|r| r.executor_s / r.lower_bound_s),
            draws
                .iter()
                .filter(|r| r.executor_s > 1.05 * r.lower_bound_s)
                .count(),
            draws.iter().filter(|r| !r.same_switches).count(),
            100.0 * worst(&|r| r.swap_share),
            worst(&|r| r.max_wait_s),
            draws.iter().filter(|r| r.max_wait_s > bound).count(),
        );
    }
    println!();
    println!(
        "{} the executor's makespan within 2% of the simulator's on every trace and draw",
        if all_within_2pc { "PASS" } else { "FAIL" }
    );
    if sleep == "both" {
        sleep_comparison(seeds, &catalogue);
    }
    if !all_within_2pc {
        std::process::exit(1);
    }
}

/// Sleep off and on, executor and simulator, on the shipped traces and `seeds` draws of each
/// generator (informative: the targets are reported, not enforced by the exit status).
fn sleep_comparison(seeds: u64, catalogue: &Catalogue) {
    let pair = |trace: &Trace| -> Result<(Row, Row), String> {
        let off = measure(trace, catalogue, &SimConfig::default())?;
        let on = measure(
            trace,
            catalogue,
            &SimConfig {
                sleep: true,
                ..SimConfig::default()
            },
        )?;
        Ok((off, on))
    };
    println!();
    println!("Sleep on and off (executor replay; simulator alongside):");
    println!();
    println!(
        "| trace | executor s off -> on | on / off | simulator s on | executor / simulator (on) | on / LB (sleep-aware) | swap GPU-s off -> on | swaps off -> on | wakes | max wait s off -> on | same switches (on) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for trace in traces::shipped() {
        match pair(&trace) {
            Ok((off, on)) => println!(
                "| {} | {:.0} -> {:.0} | {:.3} | {:.0} | {:.4} | {:.3} | {:.0} -> {:.0} | {} -> {} | {} | {:.0} -> {:.0} | {} |",
                trace.name,
                off.executor_s,
                on.executor_s,
                on.executor_s / off.executor_s,
                on.simulator_s,
                on.executor_s / on.simulator_s,
                on.executor_s / on.lower_bound_s,
                off.swap_s,
                on.swap_s,
                off.swaps,
                on.swaps,
                on.wakes,
                off.max_wait_s,
                on.max_wait_s,
                if on.same_switches { "yes" } else { "no" },
            ),
            Err(e) => eprintln!("{}: {e}", trace.name),
        }
    }
    type Generator = fn(u64) -> Trace;
    let generators: [(&str, Generator); 3] = [
        ("steady-mix", traces::steady_mix),
        ("bursty-vision", traces::bursty_vision),
        ("phase-change", traces::phase_change),
    ];
    println!();
    println!(
        "| generator | draws | executor on / off: best, mean, worst | worst on / LB | draws on > 1.05 x LB | worst executor / simulator (on) | swap GPU-s mean off -> on | worst wait s off -> on |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, generate) in generators {
        let draws: Vec<(Row, Row)> = (1..=seeds)
            .filter_map(|seed| match pair(&generate(seed)) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("{name} seed {seed}: {e}");
                    None
                }
            })
            .collect();
        let n = draws.len().max(1) as f64;
        let ratio = |p: &(Row, Row)| p.1.executor_s / p.0.executor_s;
        let best = draws.iter().map(ratio).fold(f64::INFINITY, f64::min);
        let worst = draws.iter().map(ratio).fold(0.0, f64::max);
        let mean = draws.iter().map(ratio).sum::<f64>() / n;
        let on_lb = draws
            .iter()
            .map(|p| p.1.executor_s / p.1.lower_bound_s)
            .fold(0.0, f64::max);
        let over = draws
            .iter()
            .filter(|p| p.1.executor_s > 1.05 * p.1.lower_bound_s)
            .count();
        let vs_sim = draws
            .iter()
            .map(|p| (p.1.executor_s / p.1.simulator_s - 1.0).abs() + 1.0)
            .fold(0.0, f64::max);
        let swap = |f: fn(&(Row, Row)) -> f64| draws.iter().map(f).sum::<f64>() / n;
        let wait = |f: fn(&(Row, Row)) -> f64| draws.iter().map(f).fold(0.0, f64::max);
        println!(
            "| {name} | {} | {best:.3}, {mean:.3}, {worst:.3} | {on_lb:.3} | {over} | {vs_sim:.4} | {:.0} -> {:.0} | {:.0} -> {:.0} |",
            draws.len(),
            swap(|p| p.0.swap_s),
            swap(|p| p.1.swap_s),
            wait(|p| p.0.max_wait_s),
            wait(|p| p.1.max_wait_s),
        );
    }
}
