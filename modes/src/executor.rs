//! The allocator loop: at each tick, the GPUs' states and the lanes' backlogs in, the
//! allocator's plan out, its switches carried out GPU by GPU. Each switch's measured times
//! (stopping or putting to sleep the old server, starting or waking the new one) go back to
//! the allocator, which plans with them instead of the lanes' `swap_in_s` from then on.
//!
//! With sleep on, a lane left whose mode can sleep (`[lane.sleep] can_sleep`) and whose server
//! can ([`ModeServer::can_sleep`]) is put to sleep at level 1 or 2, or stopped, as
//! [`Sleepers::retire`] chooses by the measured costs, with level-1 sleepers holding at most
//! [`ModesConfig::host_ram`](crate::ModesConfig) of host RAM (the oldest stopped to make
//! room); a lane coming back to a GPU where it sleeps is woken instead of started. A sleep that fails is a
//! stop; a wake that fails is a stop and a start (a restart); each is said in the decision
//! log with its reason, and what was really done is what is measured.
//!
//! With a [`CostStore`] ([`ModesConfig::costs`](crate::ModesConfig)), the costs measured by
//! earlier runs are read at start and each new measurement is recorded there: a restart plans
//! with what this machine measured, not with the lanes' `swap_in_s`.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use horos_gpu_alloc::allocator::{
    Action, Allocator, GpuState, GpuView, Outgoing, OutgoingReason, Policy, QueueStat, Reason,
    Sleepers, SwapCosts, SwapKind, SwapMeasurement, TickInput,
};
use horos_gpu_alloc::catalogue::{Catalogue, ModeSpec, SleepLevel};
use horos_gpu_alloc::cost_store::CostStore;
use horos_server_control::{Backoff, ControlError, ModeServer};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::metrics::SwapMetrics;
use crate::{Backlog, Instance, LaneState, ModeAction, ModeLane, ModesConfig, Pending, Reporter};

/// The reporter with the logging the executor adds, and the swaps' counters.
pub(crate) struct Report {
    pub(crate) reporter: Arc<dyn Reporter>,
    pub(crate) metrics: Arc<SwapMetrics>,
}

impl Report {
    fn decision(&self, gpu: u32, action: ModeAction, reason: String) {
        tracing::info!(gpu, action = action.as_str(), %reason, "allocator");
        self.reporter.decision(gpu, action, &reason);
    }

    fn mode(&self, gpu: u32, mode: &str, state: LaneState) {
        self.reporter.mode(gpu, mode, &state);
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
    /// Seconds the swap is expected to take (the allocator's swap costs).
    expected_s: f64,
    /// Ends with the time the new lane was serving.
    task: JoinHandle<Result<Up, ControlError>>,
}

/// A lane brought up: when it served, what became of the old server (stopped or put to sleep)
/// and how the new one came (loaded or woken), with the seconds each took, and what went
/// otherwise than planned.
struct Up {
    at: Instant,
    out: SwapKind,
    out_s: f64,
    came: SwapKind,
    came_s: f64,
    /// A sleep that fell back to a stop, a wake that fell back to a restart: why.
    fallbacks: Vec<String>,
}

/// How a switch is planned: the old server put to sleep or stopped, the new one woken or
/// loaded, and the level-1 sleepers stopped first to make room for the old one in host RAM.
#[derive(Clone)]
struct Plan {
    out: SwapKind,
    came: SwapKind,
    evict: Vec<Arc<dyn ModeServer>>,
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
        costs: store,
        host_ram,
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
                sleep: l.sleep.clone(),
                ..ModeSpec::default()
            })
            .collect(),
        initial: initial.iter().map(|&i| lanes[i].queue.clone()).collect(),
    };
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(policy.tick_s.max(0.05)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let sleep = policy.sleep;
    // Within what the shared host RAM leaves the lanes, asked again before each retirement.
    let budget = |h: &Option<Arc<crate::HostRam>>| {
        h.as_ref()
            .map_or(u64::MAX, |h| h.room_for(crate::HOST_OWNER))
    };
    let mut sleepers = Sleepers::new(budget(&host_ram));
    let mut allocator =
        Allocator::new(policy, catalogue.clone()).with_swap_costs(kept_costs(store.as_ref()).await);
    // The status page shows the costs planned with, those kept by earlier runs included.
    report.metrics.set_costs(allocator.swap_costs());
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
    // The sleepers last reported.
    let mut reported_asleep = Vec::new();
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
            let ended = finish_switch(
                g,
                k,
                &lanes,
                &report,
                &mut sleepers,
                now_s,
                retry_after_failure,
                secs,
            );
            let ended = ended.await;
            for m in &ended {
                report.metrics.record(m);
                allocator.observe_swap(m);
            }
            if !ended.is_empty() {
                report.metrics.set_costs(allocator.swap_costs());
            }
            keep_costs(store.as_ref(), ended).await;
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
                .map(|(k, g)| view(g, k, &lanes, &sleepers, now_s))
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
            // A lane woken here sleeps no more (nor can it be evicted meanwhile).
            let came = bring_in(&sleepers, g.index, &lanes[to].queue);
            if matches!(came, SwapKind::Wake(_)) {
                sleepers.wake(&lanes[to].queue, g.index);
            }
            sleepers.set_budget_mb(budget(&host_ram));
            let (out, evict) = retire(
                &mut sleepers,
                allocator.swap_costs(),
                &catalogue,
                &lanes,
                &indices,
                (from, k),
                sleep,
                now_s,
                &report,
            );
            let plan = Plan { out, came, evict };
            let expected_s = expected_swap_s(&allocator, &catalogue, g, &lanes, from, to, &plan);
            g.switch = Some(Switch {
                to,
                restore: false,
                swap_started,
                expected_s,
                task: tokio::spawn(async move {
                    carry_out(&l[from].instances[k], &l[to].instances[k], &started, &plan).await
                }),
            });
        }
        for (g, wanted) in gpus.iter_mut().zip(wanted_away) {
            g.held_warm &= wanted;
        }
        // What the lanes' level-1 sleepers hold now (retired and woken this tick).
        if let Some(h) = &host_ram {
            h.set_held(crate::HOST_OWNER, sleepers.used_mb());
        }
        let asleep: Vec<(u32, String, SleepLevel)> = indices
            .iter()
            .flat_map(|&gpu| {
                sleepers
                    .on(gpu)
                    .into_iter()
                    .map(move |a| (gpu, a.mode, a.level))
            })
            .collect();
        if asleep != reported_asleep {
            report.reporter.asleep(&asleep);
            reported_asleep = asleep;
        }
    }
    // Whatever was switching finishes its step; the owner stops every server afterwards.
    for g in gpus {
        if let Some(s) = g.switch {
            let _ = s.task.await;
        }
    }
}

/// The swap costs kept in `store` by earlier runs (none without a store, or when it cannot be
/// read: said, and the catalogue's figures are the costs until measured again).
async fn kept_costs(store: Option<&Arc<CostStore>>) -> SwapCosts {
    let Some(store) = store.cloned() else {
        return SwapCosts::new();
    };
    let path = store.path().display().to_string();
    match tokio::task::spawn_blocking(move || store.load()).await {
        Ok(Ok(costs)) => {
            tracing::info!(
                measured = costs.iter().count(),
                store = %path,
                "allocator: swap costs measured earlier"
            );
            costs
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, store = %path, "allocator: swap costs not read");
            SwapCosts::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "allocator: swap costs not read");
            SwapCosts::new()
        }
    }
}

/// Records the swaps `measured` in `store` (a failure is said, not fatal: the allocator has
/// them in memory).
async fn keep_costs(store: Option<&Arc<CostStore>>, measured: Vec<SwapMeasurement>) {
    let Some(store) = store.cloned() else {
        return;
    };
    if measured.is_empty() {
        return;
    }
    let done =
        tokio::task::spawn_blocking(move || measured.iter().try_for_each(|m| store.record(m)))
            .await;
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "allocator: swap cost not kept"),
        Err(e) => tracing::warn!(error = %e, "allocator: swap cost not kept"),
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

/// What GPU `g` going from lane `from` to lane `to` as `plan` says is expected to cost: the
/// old server put to sleep (a stop counts nothing), then `to` woken or loaded.
fn expected_swap_s(
    allocator: &Allocator,
    catalogue: &Catalogue,
    g: &Gpu,
    lanes: &Lanes,
    from: usize,
    to: usize,
    plan: &Plan,
) -> f64 {
    let costs = allocator.swap_costs();
    let out = match plan.out {
        SwapKind::Sleep(_) => costs.cost_s(catalogue, &lanes[from].queue, g.index, plan.out),
        _ => 0.0,
    };
    out + costs.cost_s(catalogue, &lanes[to].queue, g.index, plan.came)
}

/// What becomes of lane `from`'s server on GPU `k` when the GPU leaves it: stopped, unless
/// sleep is on and its mode and server can sleep; then asleep at level 1, level 2 or stopped as
/// [`Sleepers::retire`] chooses (the cheapest now and back, level 1 within the host RAM), a
/// `retire` decision with its reason. The level-1 sleepers it evicts for host RAM are stopped
/// (a server cannot go from level 1 to level 2 without waking), an `evict` decision each: they
/// are returned to be stopped before the old server sleeps.
#[allow(clippy::too_many_arguments)] // the executor loop's state, passed as it is
fn retire(
    sleepers: &mut Sleepers,
    costs: &SwapCosts,
    catalogue: &Catalogue,
    lanes: &Lanes,
    indices: &[u32],
    (from, k): (usize, usize),
    sleep: bool,
    now_s: f64,
    report: &Report,
) -> (SwapKind, Vec<Arc<dyn ModeServer>>) {
    let lane = &lanes[from];
    let gpu = indices[k];
    if !sleep {
        return (SwapKind::Stop, Vec::new());
    }
    if !(lane.sleep.can_sleep && lane.instances[k].server.can_sleep()) {
        let reason = serde_json::to_string(&OutgoingReason::CannotSleep).unwrap_or_default();
        report.decision(
            gpu,
            ModeAction::Retire,
            format!("{}: stopped: {reason}", lane.queue),
        );
        return (SwapKind::Stop, Vec::new());
    }
    let retired = sleepers.retire(catalogue, costs, &lane.queue, gpu, now_s);
    let mut evict = Vec::new();
    for (on, mode) in &retired.evicted {
        // Stopped, not asleep: nothing to wake there any more.
        sleepers.wake(mode, *on);
        let server = lanes
            .iter()
            .find(|l| &l.queue == mode)
            .zip(indices.iter().position(|i| i == on))
            .map(|(l, j)| Arc::clone(&l.instances[j].server));
        evict.extend(server);
        report.decision(
            *on,
            ModeAction::Evict,
            format!(
                "{mode} asleep at level 1 stopped: host RAM for {} ({} MB of {} MB held)",
                lane.queue,
                sleepers.used_mb(),
                sleepers.budget_mb()
            ),
        );
    }
    let (out, what) = match retired.choice.choice {
        Outgoing::Sleep(level) => (
            SwapKind::Sleep(level),
            format!("asleep at level {}", level.number()),
        ),
        Outgoing::Stop => (SwapKind::Stop, "stopped".to_owned()),
    };
    let reason = serde_json::to_string(&retired.choice.reason).unwrap_or_default();
    report.decision(
        gpu,
        ModeAction::Retire,
        format!("{}: {what}: {reason}", lane.queue),
    );
    (out, evict)
}

/// How lane `queue` comes up on GPU `gpu`: woken where it sleeps, else loaded.
fn bring_in(sleepers: &Sleepers, gpu: u32, queue: &str) -> SwapKind {
    sleepers
        .level(queue, gpu)
        .map_or(SwapKind::Load, SwapKind::Wake)
}

/// Takes in the outcome of GPU `k`'s switch or restore, if it ended; returns what the swap
/// measured (the old server's stop or sleep, the new one's load or wake).
#[allow(clippy::too_many_arguments)] // the executor loop's state, passed as it is
async fn finish_switch(
    g: &mut Gpu,
    k: usize,
    lanes: &Lanes,
    report: &Report,
    sleepers: &mut Sleepers,
    now_s: f64,
    retry_after_failure: Duration,
    secs: impl Fn(Instant) -> f64,
) -> Vec<SwapMeasurement> {
    let Some(s) = g.switch.take_if(|s| s.task.is_finished()) else {
        return Vec::new();
    };
    let mut measured = Vec::new();
    let from = g.serving;
    let outcome = match s.task.await {
        Ok(r) => r,
        Err(e) => Err(ControlError::other(e)),
    };
    match (outcome, s.restore) {
        (Ok(up), false) => {
            let at = up.at;
            for why in &up.fallbacks {
                report.decision(g.index, ModeAction::Fallback, why.clone());
            }
            measured.push(SwapMeasurement {
                mode: lanes[from].queue.clone(),
                gpu: g.index,
                kind: up.out,
                seconds: up.out_s,
            });
            measured.push(SwapMeasurement {
                mode: lanes[s.to].queue.clone(),
                gpu: g.index,
                kind: up.came,
                seconds: up.came_s,
            });
            sleepers.wake(&lanes[s.to].queue, g.index);
            if up.out == SwapKind::Stop {
                // A sleep that fell back to a stop holds no host RAM.
                sleepers.wake(&lanes[from].queue, g.index);
            }
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
        (Ok(up), true) => {
            measured.push(SwapMeasurement {
                mode: lanes[from].queue.clone(),
                gpu: g.index,
                kind: up.came,
                seconds: up.came_s,
            });
            sleepers.wake(&lanes[from].queue, g.index);
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
            // The old lane is started again here: asleep no more.
            sleepers.wake(&lanes[from].queue, g.index);
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
    measured
}

/// GPU `k` as the allocator sees it.
fn view(g: &Gpu, k: usize, lanes: &Lanes, sleepers: &Sleepers, now_s: f64) -> GpuView {
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
                    remaining_s: (s.expected_s - t.elapsed().as_secs_f64()).max(0.0),
                },
                None if !s.restore && here.instances[k].gate.is_busy() => GpuState::Draining {
                    to: to.queue.clone(),
                    remaining_s: batch_left(&here.instances[k], here),
                },
                None => GpuState::Swapping {
                    to: to.queue.clone(),
                    remaining_s: s.expected_s,
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
        asleep: sleepers.on(g.index),
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

/// Drains `from` (no new batch, the running one ends), puts its server to sleep or stops it
/// as `plan` says (a failed sleep is a stop), wakes or starts `to`'s and opens its gate; ends
/// with the time `to` serves.
async fn carry_out(
    from: &Instance,
    to: &Instance,
    swap_started: &OnceLock<Instant>,
    plan: &Plan,
) -> Result<Up, ControlError> {
    from.gate.close();
    from.gate.wait_idle().await;
    // Host RAM freed before the old server's weights move there.
    for server in &plan.evict {
        if let Err(e) = server.stop().await {
            tracing::warn!(error = %e, "stop of a level-1 sleeper evicted for host RAM");
        }
    }
    let began = Instant::now();
    let _ = swap_started.set(began);
    let mut fallbacks = Vec::new();
    let (out, out_s) = match plan.out {
        SwapKind::Sleep(level) => match from.server.sleep(level).await {
            Ok(()) => (plan.out, began.elapsed().as_secs_f64()),
            Err(e) => {
                fallbacks.push(format!("sleep failed ({e}): stopped instead"));
                (SwapKind::Stop, timed(from.server.stop()).await?)
            }
        },
        _ => (SwapKind::Stop, timed(from.server.stop()).await?),
    };
    let mut up = bring_up(to, plan.came).await?;
    fallbacks.append(&mut up.fallbacks);
    Ok(Up {
        out,
        out_s,
        fallbacks,
        ..up
    })
}

/// Runs `f`; the seconds it took.
async fn timed(
    f: impl std::future::Future<Output = Result<(), ControlError>>,
) -> Result<f64, ControlError> {
    let began = Instant::now();
    f.await?;
    Ok(began.elapsed().as_secs_f64())
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
        expected_s: lanes[lane].swap_in_s,
        task: tokio::spawn(async move {
            let _ = started.set(Instant::now());
            bring_up(&l[lane].instances[k], SwapKind::Load).await
        }),
    }
}

/// Wakes `instance`'s server (`came` a wake) or starts it, then opens its gate. A wake that
/// fails is a stop and a start: a restart, measured as a load.
async fn bring_up(instance: &Instance, came: SwapKind) -> Result<Up, ControlError> {
    let server = &instance.server;
    let mut fallbacks = Vec::new();
    let (came, came_s) = match came {
        SwapKind::Wake(_) => match timed(server.wake()).await {
            Ok(s) => (came, s),
            Err(e) => {
                fallbacks.push(format!("wake failed ({e}): restarted instead"));
                restart(server.as_ref()).await?
            }
        },
        _ => (SwapKind::Load, timed(server.start()).await?),
    };
    instance.gate.open();
    Ok(Up {
        at: Instant::now(),
        out: SwapKind::Stop,
        out_s: 0.0,
        came,
        came_s,
        fallbacks,
    })
}

/// Stops `server` (whatever state a failed wake left it in) and starts it: a load.
async fn restart(server: &dyn ModeServer) -> Result<(SwapKind, f64), ControlError> {
    if let Err(e) = server.stop().await {
        // The start stops what still runs first; said, not fatal.
        tracing::warn!(error = %e, "stop after a failed wake");
    }
    Ok((SwapKind::Load, timed(server.start()).await?))
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
