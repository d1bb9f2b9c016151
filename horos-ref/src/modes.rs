//! `[allocator]`: which of the managed lanes the shared GPU serves. gpu-alloc's allocator decides
//! at each tick from the lanes' queues; this module only carries its switches out — close the
//! leaving lane's gate, wait for its batch in progress (never a switch mid-batch), stop its
//! server, start the other one, open its gate — and reports every switch, with its reason, to the
//! logs and the coordinator's status page.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use horos_coordinator::{DecisionLog, ModeBoard};
use horos_feeder::LaneGate;
use horos_gpu_alloc::allocator::{
    Action, Allocator, AllocatorConfig, GpuState, GpuView, Policy, QueueStat, TickInput,
};
use horos_gpu_alloc::catalogue::{Catalogue, ModeSpec};
use squeueha::Queue;
use tokio::task::JoinHandle;

use crate::servers::LaneServer;

/// One lane the GPU may serve.
pub struct ModeLane {
    /// Its queue (the mode's name).
    pub queue: String,
    /// Its feeder gate.
    pub gate: Arc<LaneGate>,
    /// Its server.
    pub server: LaneServer,
    /// GPU-unavailable seconds of a switch to it.
    pub swap_in_s: f64,
    /// GPU-seconds per job.
    pub job_s: f64,
    /// Jobs per batch.
    pub batch_size: usize,
}

/// Where the allocator reports: the coordinator's decision log and modes board, when it runs.
#[derive(Clone, Default)]
pub struct Report {
    /// Decisions with their reasons.
    pub log: Option<DecisionLog>,
    /// What the GPU serves.
    pub board: Option<ModeBoard>,
}

impl Report {
    fn decision(&self, gpu: u32, action: &str, reason: String) {
        tracing::info!(gpu, action, %reason, "allocator");
        if let Some(l) = &self.log {
            l.record(&format!("gpu{gpu}"), action, reason);
        }
    }

    fn mode(&self, gpu: u32, mode: &str, state: &str) {
        if let Some(b) = &self.board {
            b.set(gpu, mode, state);
        }
    }
}

/// The allocator loop over `lanes`, `lanes[active]` serving at start (its server started, its
/// gate open; every other gate closed, its server stopped). Runs until `stop`.
pub fn spawn(
    gpu: u32,
    lanes: Vec<ModeLane>,
    active: usize,
    policy: AllocatorConfig,
    queue: Queue,
    report: Report,
    stop: tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(run(gpu, lanes, active, policy, queue, report, stop))
}

struct Switch {
    to: usize,
    started: Instant,
    task: JoinHandle<Result<(), String>>,
}

async fn run(
    gpu: u32,
    lanes: Vec<ModeLane>,
    mut active: usize,
    policy: AllocatorConfig,
    queue: Queue,
    report: Report,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let lanes: Arc<Vec<ModeLane>> = Arc::new(lanes);
    let catalogue = Catalogue {
        modes: lanes
            .iter()
            .map(|l| ModeSpec {
                name: l.queue.clone(),
                swap_in_s: l.swap_in_s,
                throughput_per_s: 1.0 / l.job_s,
                unit: "jobs".into(),
                batch_size: l.batch_size,
                ..ModeSpec::default()
            })
            .collect(),
        initial: vec![lanes[active].queue.clone()],
    };
    let tick = Duration::from_secs_f64(policy.tick_s.max(0.05));
    let mut allocator = Allocator::new(policy, catalogue);
    let start = Instant::now();
    let mut mode_since_s = 0.0;
    let mut switch: Option<Switch> = None;
    // Jobs seen waiting per lane at the previous tick: increases are arrivals.
    let mut last_pending: BTreeMap<String, u64> = BTreeMap::new();
    let mut arrived_s: BTreeMap<String, f64> = BTreeMap::new();
    report.decision(
        gpu,
        "serve",
        format!(
            "{} at start (first lane in the configuration)",
            lanes[active].queue
        ),
    );
    report.mode(gpu, &lanes[active].queue, "serving");
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            break;
        }
        let now_s = start.elapsed().as_secs_f64();
        if let Some(s) = switch.take_if(|s| s.task.is_finished()) {
            let from = active;
            let outcome = match s.task.await {
                Ok(r) => r,
                Err(e) => Err(e.to_string()),
            };
            match outcome {
                Ok(()) => {
                    active = s.to;
                    mode_since_s = now_s;
                    report.mode(gpu, &lanes[active].queue, "serving");
                    report.decision(
                        gpu,
                        "switched",
                        format!(
                            "{} -> {} in {:.1} s",
                            lanes[from].queue,
                            lanes[s.to].queue,
                            s.started.elapsed().as_secs_f64()
                        ),
                    );
                }
                Err(e) => {
                    // The new server did not come up: serve the old lane again.
                    report.mode(gpu, &lanes[from].queue, "serving");
                    report.decision(
                        gpu,
                        "switch_failed",
                        format!("{} -> {}: {e}", lanes[from].queue, lanes[s.to].queue),
                    );
                    if let Err(e) = bring_up(&lanes[from]).await {
                        report.decision(
                            gpu,
                            "restore_failed",
                            format!("{}: {e}", lanes[from].queue),
                        );
                    }
                }
            }
        }
        let mut queues = BTreeMap::new();
        for lane in lanes.iter() {
            let q = queue.clone();
            let name = lane.queue.clone();
            let stats = match tokio::task::spawn_blocking(move || q.stats(&name)).await {
                Ok(Ok(s)) => s,
                _ => continue,
            };
            let pending = stats.ready;
            let prev = last_pending
                .insert(lane.queue.clone(), pending)
                .unwrap_or(0);
            let arrived = arrived_s.entry(lane.queue.clone()).or_default();
            *arrived += pending.saturating_sub(prev) as f64 * lane.job_s;
            queues.insert(
                lane.queue.clone(),
                QueueStat {
                    pending_jobs: usize::try_from(pending).unwrap_or(usize::MAX),
                    pending_work_s: pending as f64 * lane.job_s,
                    oldest_wait_s: stats.oldest_ready_age_ms.unwrap_or(0).max(0) as f64 / 1000.0,
                    arrived_work_s_total: *arrived,
                },
            );
        }
        let here = &lanes[active];
        let state = match &switch {
            Some(s) => GpuState::Swapping {
                to: lanes[s.to].queue.clone(),
                remaining_s: (lanes[s.to].swap_in_s - s.started.elapsed().as_secs_f64()).max(0.0),
            },
            None if here.gate.is_busy() => GpuState::Busy {
                remaining_s: here.job_s * here.batch_size as f64,
            },
            None => GpuState::Idle,
        };
        let input = TickInput {
            now_s,
            gpus: vec![GpuView {
                index: gpu,
                mode: Some(here.queue.clone()),
                state,
                mode_since_s,
                last_used_s: now_s,
            }],
            queues,
        };
        let plan = allocator.decide(&input);
        if switch.is_some() {
            continue;
        }
        for d in plan.decisions {
            let Action::Switch { to, .. } = &d.action else {
                continue;
            };
            let Some(to) = lanes.iter().position(|l| &l.queue == to) else {
                continue;
            };
            if to == active {
                continue;
            }
            let reason = serde_json::to_string(&d.reason).unwrap_or_default();
            report.decision(
                gpu,
                "switch",
                format!("{} -> {}: {reason}", lanes[active].queue, lanes[to].queue),
            );
            report.mode(
                gpu,
                &lanes[active].queue,
                &format!("switching to {}", lanes[to].queue),
            );
            let l = Arc::clone(&lanes);
            let from = active;
            switch = Some(Switch {
                to,
                started: Instant::now(),
                task: tokio::spawn(async move { carry_out(&l[from], &l[to]).await }),
            });
            break;
        }
    }
    // Whatever was switching finishes its step; the binary stops every server afterwards.
    if let Some(s) = switch {
        let _ = s.task.await;
    }
}

/// Drains `from` (no new batch, the running one ends), stops its server, starts `to`'s and
/// opens its gate.
async fn carry_out(from: &ModeLane, to: &ModeLane) -> Result<(), String> {
    from.gate.close();
    from.gate.wait_idle().await;
    from.server.stop().await?;
    bring_up(to).await
}

async fn bring_up(lane: &ModeLane) -> Result<(), String> {
    lane.server.start().await?;
    lane.gate.open();
    Ok(())
}
