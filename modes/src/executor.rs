//! The allocator loop: at each tick, the GPUs' states and the lanes' backlogs in, the
//! allocator's plan out, its switches carried out GPU by GPU.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use horos_gpu_alloc::allocator::{
    Action, Allocator, GpuState, GpuView, Policy, QueueStat, Reason, TickInput,
};
use horos_gpu_alloc::catalogue::{Catalogue, ModeSpec};
use horos_server_control::{Backoff, ControlError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{Backlog, Instance, LaneState, ModeAction, ModeLane, ModesConfig, Pending, Reporter};

/// The reporter with the logging the executor adds.
pub(crate) struct Report(pub(crate) Arc<dyn Reporter>);

impl Report {
    fn decision(&self, gpu: u32, action: ModeAction, reason: String) {
        tracing::info!(gpu, action = action.as_str(), %reason, "allocator");
        self.0.decision(gpu, action, &reason);
    }

    fn mode(&self, gpu: u32, mode: &str, state: LaneState) {
        self.0.mode(gpu, mode, &state);
    }
}

/// The longest wait before a lane whose server failed to start is tried again.
const RETRY_MAX: Duration = Duration::from_secs(600);

/// When a lane may be tried again on a GPU after failed starts (switch target or restart),
/// and the wait after the next failure: it doubles on each failure, up to [`RETRY_MAX`].
#[derive(Clone)]
struct Retry {
    at_s: f64,
    backoff: Backoff,
}

impl Retry {
    fn new(first: Duration) -> Retry {
        Retry {
            at_s: f64::NEG_INFINITY,
            backoff: Backoff::new(first, RETRY_MAX),
        }
    }

    fn failed(&mut self, now_s: f64) {
        self.at_s = now_s + self.backoff.next_delay().as_secs_f64();
    }
}

/// Work on one GPU's servers in progress: a switch to lane `to`, or the restart of the lane
/// being served (`restore`) after a failed switch.
struct Switch {
    to: usize,
    restore: bool,
    /// When the leaving lane's batch had ended and the swap itself began.
    swap_started: Arc<OnceLock<Instant>>,
    /// Ends with the time the new lane was serving.
    task: JoinHandle<Result<Instant, ControlError>>,
}

/// One GPU as the executor tracks it.
struct Gpu {
    index: u32,
    /// The lane this GPU serves (or is restarting, or is down for).
    serving: usize,
    /// When `serving` began, seconds since the start.
    mode_since_s: f64,
    switch: Option<Switch>,
    /// Per lane: when it may be started on this GPU again.
    retry: Vec<Retry>,
    /// A switch away was held back for a lane kept warm (reported once per hold).
    held_warm: bool,
}

/// The lanes, shared with the switch tasks.
type Lanes = Arc<Vec<ModeLane>>;

pub(crate) async fn run(
    config: ModesConfig,
    lanes: Vec<ModeLane>,
    initial: Vec<usize>,
    backlog: Arc<dyn Backlog>,
    report: Report,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let ModesConfig {
        gpus: indices,
        policy,
        retry_after_failure,
        initial_mode_age_s,
    } = config;
    let lanes: Lanes = Arc::new(lanes);
    let catalogue = Catalogue {
        modes: lanes
            .iter()
            .map(|l| ModeSpec {
                name: l.queue.clone(),
                swap_in_s: l.swap_in_s,
                throughput_per_s: 1.0 / l.job_s.max(1e-9),
                unit: "jobs".into(),
                batch_size: l.batch_size,
                ..ModeSpec::default()
            })
            .collect(),
        initial: initial.iter().map(|&i| lanes[i].queue.clone()).collect(),
    };
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(policy.tick_s.max(0.05)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut allocator = Allocator::new(policy, catalogue);
    let start = Instant::now();
    let secs = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    let mut gpus: Vec<Gpu> = indices
        .iter()
        .zip(&initial)
        .map(|(&index, &serving)| Gpu {
            index,
            serving,
            mode_since_s: -initial_mode_age_s,
            switch: None,
            retry: vec![Retry::new(retry_after_failure); lanes.len()],
            held_warm: false,
        })
        .collect();
    let mut arrivals = Arrivals::default();
    for g in &gpus {
        let lane = &lanes[g.serving].queue;
        report.decision(
            g.index,
            ModeAction::Serve,
            format!("{lane} at start (the initial assignment)"),
        );
        report.mode(g.index, lane, LaneState::Serving);
    }
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            changed = stop.changed() => if changed.is_err() {
                break; // nobody can ask to stop any more: stop now rather than spin
            },
        }
        if *stop.borrow() {
            break;
        }
        // What ends at this very instant (a batch, an arrival) is seen by this tick.
        tokio::task::yield_now().await;
        let now_s = secs(Instant::now());
        for (k, g) in gpus.iter_mut().enumerate() {
            finish_switch(g, k, &lanes, &report, now_s, retry_after_failure, secs).await;
            // The lane served is down (its restart failed): try again when its retry time
            // comes.
            let here = &lanes[g.serving].instances[k];
            if g.switch.is_none() && !here.gate.is_open() && now_s >= g.retry[g.serving].at_s {
                g.switch = Some(restore(&lanes, g.serving, k, &report, g.index));
            }
        }
        let queues = arrivals.read(&lanes, backlog.as_ref()).await;
        let input = TickInput {
            now_s,
            gpus: gpus
                .iter()
                .enumerate()
                .map(|(k, g)| view(g, k, &lanes, now_s))
                .collect(),
            queues,
        };
        let plan = allocator.decide(&input);
        let mut wanted_away = vec![false; gpus.len()];
        for d in plan.decisions {
            let Action::Switch { to, .. } = &d.action else {
                continue;
            };
            let Some(k) = gpus.iter().position(|g| g.index == d.gpu) else {
                continue;
            };
            let Some(to) = lanes.iter().position(|l| &l.queue == to) else {
                continue;
            };
            if gpus[k].switch.is_some() || to == gpus[k].serving || now_s < gpus[k].retry[to].at_s {
                continue;
            }
            let from = gpus[k].serving;
            wanted_away[k] = true;
            if let Some(warm_s) = kept_warm(&lanes[from], from, k, &gpus, &d.reason) {
                if !gpus[k].held_warm {
                    gpus[k].held_warm = true;
                    report.decision(
                        gpus[k].index,
                        ModeAction::KeptWarm,
                        format!(
                            "{} stays for {warm_s:.0} s more (kept warm), not -> {}",
                            lanes[from].queue, lanes[to].queue
                        ),
                    );
                }
                continue;
            }
            let g = &mut gpus[k];
            g.held_warm = false;
            let reason = serde_json::to_string(&d.reason).unwrap_or_default();
            report.decision(
                g.index,
                ModeAction::Switch,
                format!("{} -> {}: {reason}", lanes[from].queue, lanes[to].queue),
            );
            report.mode(
                g.index,
                &lanes[from].queue,
                LaneState::SwitchingTo(lanes[to].queue.clone()),
            );
            let l = Arc::clone(&lanes);
            let swap_started = Arc::new(OnceLock::new());
            let started = Arc::clone(&swap_started);
            g.switch = Some(Switch {
                to,
                restore: false,
                swap_started,
                task: tokio::spawn(async move {
                    carry_out(&l[from].instances[k], &l[to].instances[k], &started).await
                }),
            });
        }
        for (g, wanted) in gpus.iter_mut().zip(wanted_away) {
            g.held_warm &= wanted;
        }
    }
    // Whatever was switching finishes its step; the owner stops every server afterwards.
    for g in gpus {
        if let Some(s) = g.switch {
            let _ = s.task.await;
        }
    }
}

/// Seconds lane `from` should still stay served, when GPU `k` is its last GPU and the switch
/// away is not for a starving lane (the starvation bound outranks keep-alive); `None`: switch.
fn kept_warm(lane: &ModeLane, from: usize, k: usize, gpus: &[Gpu], reason: &Reason) -> Option<f64> {
    let warm_s = lane.keep_warm.as_ref()?.warm_for_s();
    if warm_s <= 0.0 || matches!(reason, Reason::Starvation { .. }) {
        return None;
    }
    let others = gpus
        .iter()
        .enumerate()
        .filter(|(j, g)| *j != k && g.serving == from && g.switch.is_none())
        .count();
    (others == 0).then_some(warm_s)
}

/// Takes in the outcome of GPU `k`'s switch or restore, if it ended.
async fn finish_switch(
    g: &mut Gpu,
    k: usize,
    lanes: &Lanes,
    report: &Report,
    now_s: f64,
    retry_after_failure: Duration,
    secs: impl Fn(Instant) -> f64,
) {
    let Some(s) = g.switch.take_if(|s| s.task.is_finished()) else {
        return;
    };
    let from = g.serving;
    let outcome = match s.task.await {
        Ok(r) => r,
        Err(e) => Err(ControlError::other(e)),
    };
    match (outcome, s.restore) {
        (Ok(at), false) => {
            g.serving = s.to;
            g.mode_since_s = secs(at);
            g.retry[s.to] = Retry::new(retry_after_failure);
            report.mode(g.index, &lanes[s.to].queue, LaneState::Serving);
            let took = s.swap_started.get().map_or(0.0, |t| secs(at) - secs(*t));
            report.decision(
                g.index,
                ModeAction::Switched,
                format!(
                    "{} -> {} (swap {took:.1} s)",
                    lanes[from].queue, lanes[s.to].queue
                ),
            );
        }
        (Ok(_), true) => {
            g.retry[from] = Retry::new(retry_after_failure);
            report.mode(g.index, &lanes[from].queue, LaneState::Serving);
            report.decision(
                g.index,
                ModeAction::Restored,
                format!("{} is serving again", lanes[from].queue),
            );
        }
        (Err(e), false) => {
            // The new server did not come up: not again before its retry time (or the same
            // switch would be chosen and fail every tick), and the old lane's model is loaded
            // again, so the dwell time starts over.
            g.retry[s.to].failed(now_s);
            g.mode_since_s = now_s;
            report.decision(
                g.index,
                ModeAction::SwitchFailed,
                format!(
                    "{} -> {}: {e}; not retried before {:.0} s",
                    lanes[from].queue,
                    lanes[s.to].queue,
                    g.retry[s.to].at_s - now_s
                ),
            );
            g.switch = Some(restore(lanes, from, k, report, g.index));
        }
        (Err(e), true) => {
            g.retry[from].failed(now_s);
            report.mode(g.index, &lanes[from].queue, LaneState::Down);
            report.decision(
                g.index,
                ModeAction::RestoreFailed,
                format!(
                    "{}: {e}; retried in {:.0} s",
                    lanes[from].queue,
                    g.retry[from].at_s - now_s
                ),
            );
        }
    }
}

/// GPU `k` as the allocator sees it.
fn view(g: &Gpu, k: usize, lanes: &Lanes, now_s: f64) -> GpuView {
    let here = &lanes[g.serving];
    let batch_left = |i: &Instance, lane: &ModeLane| {
        i.gate
            .batch_remaining_s()
            .unwrap_or(lane.job_s * lane.batch_size as f64)
    };
    let state = match &g.switch {
        Some(s) => {
            let to = &lanes[s.to];
            match s.swap_started.get() {
                Some(t) => GpuState::Swapping {
                    to: to.queue.clone(),
                    remaining_s: (to.swap_in_s - t.elapsed().as_secs_f64()).max(0.0),
                },
                None if !s.restore && here.instances[k].gate.is_busy() => GpuState::Draining {
                    to: to.queue.clone(),
                    remaining_s: batch_left(&here.instances[k], here),
                },
                None => GpuState::Swapping {
                    to: to.queue.clone(),
                    remaining_s: to.swap_in_s,
                },
            }
        }
        None if here.instances[k].gate.is_busy() => GpuState::Busy {
            remaining_s: batch_left(&here.instances[k], here),
        },
        None => GpuState::Idle,
    };
    GpuView {
        index: g.index,
        mode: Some(here.queue.clone()),
        state,
        mode_since_s: g.mode_since_s,
        last_used_s: now_s,
        asleep: Vec::new(),
    }
}

/// Each lane's backlog, with the arrivals counted where the backlog does not count them.
#[derive(Default)]
struct Arrivals {
    /// Jobs seen waiting per lane at the previous tick: increases are arrivals.
    last_pending: BTreeMap<String, u64>,
    /// GPU-seconds arrived per lane, counted from those increases.
    arrived_s: BTreeMap<String, f64>,
}

impl Arrivals {
    async fn read(
        &mut self,
        lanes: &[ModeLane],
        backlog: &dyn Backlog,
    ) -> BTreeMap<String, QueueStat> {
        let mut queues = BTreeMap::new();
        for lane in lanes {
            let p = match backlog.pending(&lane.queue).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "allocator: lane left out of this tick");
                    continue;
                }
            };
            queues.insert(lane.queue.clone(), self.stat(lane, p));
        }
        queues
    }

    fn stat(&mut self, lane: &ModeLane, p: Pending) -> QueueStat {
        let (outside, outside_wait_s) = lane.demand.as_ref().map_or((0, 0.0), |d| d.waiting());
        let pending = p.jobs + outside as u64;
        let prev = self
            .last_pending
            .insert(lane.queue.clone(), pending)
            .unwrap_or(0);
        let counted = self.arrived_s.entry(lane.queue.clone()).or_default();
        *counted += pending.saturating_sub(prev) as f64 * lane.job_s;
        let outside_work = outside as f64 * lane.job_s;
        QueueStat {
            pending_jobs: usize::try_from(pending).unwrap_or(usize::MAX),
            pending_work_s: p.work_s.unwrap_or(p.jobs as f64 * lane.job_s) + outside_work,
            oldest_wait_s: p.oldest_wait_s.max(outside_wait_s),
            arrived_work_s_total: p.arrived_work_s_total.unwrap_or(*counted),
        }
    }
}

/// Drains `from` (no new batch, the running one ends), stops its server, starts `to`'s and
/// opens its gate; ends with the time `to` serves.
async fn carry_out(
    from: &Instance,
    to: &Instance,
    swap_started: &OnceLock<Instant>,
) -> Result<Instant, ControlError> {
    from.gate.close();
    from.gate.wait_idle().await;
    let _ = swap_started.set(Instant::now());
    from.server.stop().await?;
    bring_up(to).await
}

/// Starts the server of lane `lane` on GPU `k` again and opens its gate, in the background.
fn restore(lanes: &Lanes, lane: usize, k: usize, report: &Report, gpu: u32) -> Switch {
    report.mode(gpu, &lanes[lane].queue, LaneState::Restarting);
    let l = Arc::clone(lanes);
    let swap_started = Arc::new(OnceLock::new());
    let started = Arc::clone(&swap_started);
    Switch {
        to: lane,
        restore: true,
        swap_started,
        task: tokio::spawn(async move {
            let _ = started.set(Instant::now());
            bring_up(&l[lane].instances[k]).await
        }),
    }
}

async fn bring_up(instance: &Instance) -> Result<Instant, ControlError> {
    instance.server.start().await?;
    instance.gate.open();
    Ok(Instant::now())
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
