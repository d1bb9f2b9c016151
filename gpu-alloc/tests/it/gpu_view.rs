//! One view of the GPUs under random schedules (issue 47): a model pool confined to the GPUs an
//! allocator gives it, lanes booking the others in the same ledger, and a schedule of GPUs
//! given and taken back, loads (pinned models among them), unloads and housekeeping. After
//! every step the GPU view's invariants hold (`view::audit` over the plan, the ledger's
//! capacities, its leases and the memory the simulated GPUs report used). A failing schedule is printed whole, shortest first.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use horos_gpu_alloc::ledger::{LeaseRequest, VramLedger};
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::{ModelPool, PoolConfig, SimBackendFactory};
use horos_gpu_alloc::view::{GpuPlan, Snapshot, audit};

use crate::pool::model;
use horos_testkit::rng::XorShift;

const GPUS: u32 = 3;
const GPU_MB: u64 = 4000;
const LANE_MB: u64 = 1500;
const MODELS: [(&str, u64, bool); 5] = [
    ("pinned", 600, true),
    ("small", 800, false),
    ("mid", 1600, false),
    ("large", 2600, false),
    ("split", 5000, false),
];

#[derive(Debug, Clone, Copy)]
enum Step {
    ToPool(u32),
    ToLane(u32),
    Load(usize),
    Unload(usize),
    Maintain,
}

fn schedule(seed: u64, len: usize) -> Vec<Step> {
    let mut r = XorShift::new(seed);
    (0..len)
        .map(|_| match r.below(10) {
            0 | 1 => Step::ToPool(r.below(GPUS as u64) as u32),
            2 | 3 => Step::ToLane(r.below(GPUS as u64) as u32),
            4..=7 => Step::Load(r.below(MODELS.len() as u64) as usize),
            8 => Step::Unload(r.below(MODELS.len() as u64) as usize),
            _ => Step::Maintain,
        })
        .collect()
}

/// Runs `steps` (the pool confined when `confined`, as `run` sets it up under
/// `[allocator.pool]`); `Err` names the first step after which the view broke.
async fn run(steps: &[Step], confined: bool) -> Result<usize, String> {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Arc::new(SimFleet::new(GPUS, GPU_MB));
    let ledger = Arc::new(VramLedger::open(dir.path().join("vram.db")).unwrap());
    ledger.register_from(fleet.as_ref()).unwrap();
    let pool = ModelPool::new(
        PoolConfig {
            reclaim_delay_ms: 0,
            port_min: 9500,
            port_max: 9599,
            ..PoolConfig::default()
        },
        Arc::new(SimBackendFactory::new(Arc::clone(&fleet), 1000, 0)),
        Arc::clone(&fleet) as Arc<dyn GpuMonitor>,
        Some(Arc::clone(&ledger)),
    );
    for (id, mb, pin) in MODELS {
        let mut spec = model(id, mb);
        spec.pin = pin;
        pool.register(spec);
    }
    if confined {
        pool.confine_to_given_gpus();
    }
    // Every GPU starts as a lane's, its server's memory booked.
    let mut plan: Vec<GpuPlan> = (0..GPUS)
        .map(|gpu| GpuPlan {
            gpu,
            mode: format!("lane{gpu}"),
            switching_to: None,
        })
        .collect();
    let mut lane_leases: Vec<Option<String>> = Vec::new();
    // A lane's server books its memory, then takes it on the GPU (as its process would).
    let book = |gpu: u32| {
        let id = ledger
            .acquire(&LeaseRequest {
                owner: format!("lane:lane{gpu}"),
                pid: None,
                parts: vec![(gpu, LANE_MB)],
                ttl: Duration::from_secs(600),
            })
            .map(|l| l.id)?;
        fleet
            .load(gpu, &format!("lane:lane{gpu}"), LANE_MB, None)
            .unwrap();
        Ok::<_, horos_gpu_alloc::ledger::LedgerError>(id)
    };
    for gpu in 0..GPUS {
        lane_leases.push(Some(book(gpu).unwrap()));
    }
    let mut loaded = 0;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::ToPool(gpu) => {
                if let Some(id) = lane_leases[gpu as usize].take() {
                    fleet.unload(gpu, &format!("lane:lane{gpu}")).unwrap();
                    ledger.release(&id).unwrap();
                    plan[gpu as usize].mode = "pool".into();
                    pool.give_gpu(gpu);
                }
            }
            Step::ToLane(gpu) => {
                if lane_leases[gpu as usize].is_none() {
                    // The pool's mode leaving: no more loads there, its idle models off it,
                    // then the lane's server books its memory.
                    plan[gpu as usize].switching_to = Some(format!("lane{gpu}"));
                    pool.take_gpu(gpu);
                    while pool.evacuate_one_idle(&[gpu]).await.is_some() {}
                    plan[gpu as usize].mode = format!("lane{gpu}");
                    plan[gpu as usize].switching_to = None;
                    lane_leases[gpu as usize] =
                        Some(book(gpu).map_err(|e| {
                            format!("step {i} {step:?}: the lane cannot book: {e}")
                        })?);
                }
            }
            Step::Load(m) => {
                let load = pool.get_or_load(MODELS[m].0, if MODELS[m].2 { i32::MIN } else { 5 });
                // No room is an answer too; a load never waits here.
                if let Ok(Ok(g)) = tokio::time::timeout(Duration::from_secs(5), load).await {
                    drop(g);
                    loaded += 1;
                }
            }
            Step::Unload(m) => {
                let _ = pool.unload(MODELS[m].0).await;
            }
            Step::Maintain => {
                let _ = pool.maintain().await;
            }
        }
        let (capacity, leases) = (ledger.capacities().unwrap(), ledger.leases().unwrap());
        // What the GPUs report used beyond the driver's 300 MB: what was loaded there.
        let used = fleet
            .sample()
            .unwrap()
            .iter()
            .map(|s| (s.index, s.memory_used_mb - 300))
            .collect();
        let breaches = audit(&Snapshot {
            plan: &plan,
            capacity_mb: &capacity,
            leases: &leases,
            used_mb: Some(&used),
            pool_in_plan: true,
        });
        if !breaches.is_empty() {
            return Err(format!(
                "after step {i} {step:?}: {}",
                breaches
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    Ok(loaded)
}

/// The shortest prefix of the first failing schedule, if any schedule fails.
async fn first_failure(
    seeds: u64,
    len: usize,
    confined: bool,
    loaded: &mut usize,
) -> Option<(u64, Vec<Step>, String)> {
    for seed in 0..seeds {
        let steps = schedule(seed, len);
        let outcome = run(&steps, confined).await;
        if let Ok(n) = outcome {
            *loaded += n;
        }
        if let Err(e) = outcome {
            // Shrink: the shortest prefix that still fails, then drop single steps while it does.
            let mut shortest = steps.clone();
            for n in 1..=steps.len() {
                if run(&steps[..n], confined).await.is_err() {
                    shortest = steps[..n].to_vec();
                    break;
                }
            }
            let mut i = 0;
            while i < shortest.len() {
                let mut fewer = shortest.clone();
                fewer.remove(i);
                if run(&fewer, confined).await.is_err() {
                    shortest = fewer;
                } else {
                    i += 1;
                }
            }
            let why = run(&shortest, confined).await.err().unwrap_or(e);
            return Some((seed, shortest, why));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpu_view_holds_through_random_schedules() {
    let mut loaded = 0;
    if let Some((seed, steps, why)) = first_failure(300, 24, true, &mut loaded).await {
        panic!("seed {seed}: {steps:?}\n{why}");
    }
    // The schedules did place models (on the pool's GPUs): the check was not vacuous.
    assert!(loaded > 300, "{loaded} loads over 300 schedules");
}

/// Today's bug, kept as a counter-example: a pool that is not confined to its mode's GPUs loads
/// onto a lane's GPU, and the search finds (and shrinks) a schedule that shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfined_pool_breaks_the_view_and_the_search_shows_how() {
    let (_, steps, why) = first_failure(50, 24, false, &mut 0)
        .await
        .expect("an unconfined pool places a model on a lane's GPU");
    assert!(why.contains("holds memory there"), "{why}");
    assert!(steps.len() <= 2, "shrunk to: {steps:?} ({why})");
    println!("counter-example: {steps:?}: {why}");
}
