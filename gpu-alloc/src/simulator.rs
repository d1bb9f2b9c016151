//! A deterministic discrete-event simulator: replays a job trace through a
//! [`Policy`] on a simulated fleet with swap costs and thermal pauses, and reports useful GPU
//! busy fraction, swap time, makespan, waits per class and swap count.
//!
//! Execution model (a batch-and-wait feeder): a GPU in mode `m` claims up to
//! `batch_size(m)` jobs of class `m` (FIFO), runs them for the sum of their service times,
//! then pauses as the [`ThermalPolicy`] says. A switch of a busy GPU waits for the batch to
//! end (drain), then the GPU is unavailable for the target's `swap_in_s`. The policy is
//! called every `tick_interval_s`. No wall clock, no randomness: the same trace and policy
//! always give the same report.
//!
//! Sleep ([`SimConfig::sleep`], off by default): a GPU runs one awake mode; the mode it leaves
//! is put to sleep rather than stopped when its server can sleep, as
//! [`choose_outgoing`](crate::allocator::choose_outgoing) decides — level 1 (weights in host
//! RAM) while they fit [`SimConfig::host_memory_mb`], shared by the fleet, evicting the oldest
//! level-1 sleepers (demoted to level 2) to make room; else level 2. The switch then costs the
//! sleep plus, for a target asleep on that GPU, its wake instead of its `swap_in_s`. Every
//! swap's duration is reported to the policy ([`Policy::observe_swap`]).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::allocator::{
    Action, Decision, GpuState, GpuView, Outgoing, OutgoingChoice, Policy, QueueStat, Sleepers,
    SwapCosts, SwapKind, SwapMeasurement, TickInput,
};
use crate::catalogue::Catalogue;
use crate::thermal::{ThermalModel, ThermalPolicy};

/// One job of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Arrival time, seconds from the start of the trace.
    pub arrival_s: f64,
    /// Job class (= mode name).
    pub class: String,
    /// Size in the mode's unit (tokens, pages, docs).
    pub size: f64,
}

/// A job trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Short name.
    pub name: String,
    /// What the trace models.
    pub description: String,
    /// Jobs sorted by arrival.
    pub jobs: Vec<Job>,
}

/// Simulator settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimConfig {
    /// Pause after each batch.
    pub thermal: ThermalPolicy,
    /// Temperature model of each GPU.
    pub thermal_model: ThermalModel,
    /// How long before t=0 the initial modes were loaded (for dwell-time rules).
    pub initial_mode_age_s: f64,
    /// The simulation gives up (error) past this simulated time.
    pub max_time_s: f64,
    /// Keep every switch decision in the report.
    pub record_switches: bool,
    /// The mode a GPU leaves is put to sleep when its server can (false: stopped, as
    /// before sleep existed).
    pub sleep: bool,
    /// Host RAM for level-1 sleepers, the whole fleet together, MB (64 GiB).
    pub host_memory_mb: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            thermal: ThermalPolicy::default(),
            thermal_model: ThermalModel::default(),
            initial_mode_age_s: 3600.0,
            max_time_s: 30.0 * 86_400.0,
            record_switches: true,
            sleep: false,
            host_memory_mb: 65_536,
        }
    }
}

/// Simulation failures.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    /// A job's class is not in the catalogue.
    #[error("job class {0:?} is not in the catalogue")]
    UnknownClass(String),
    /// The catalogue is invalid or has no GPU.
    #[error("invalid catalogue: {0}")]
    Catalogue(String),
    /// Jobs were still pending at `max_time_s` (the policy never serves some class).
    #[error("stalled: {pending} jobs still pending at t={time_s} s")]
    Stalled {
        /// Jobs not completed.
        pending: usize,
        /// Simulated time reached.
        time_s: f64,
    },
}

/// Wait statistics of one class (wait = batch start − arrival).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitStats {
    /// Jobs.
    pub count: usize,
    /// Median wait, seconds.
    pub p50_s: f64,
    /// 95th percentile, seconds.
    pub p95_s: f64,
    /// Maximum, seconds.
    pub max_s: f64,
}

impl WaitStats {
    fn from(mut w: Vec<f64>) -> Self {
        w.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            if w.is_empty() {
                0.0
            } else {
                let rank = ((q * w.len() as f64).ceil() as usize).clamp(1, w.len());
                w[rank - 1]
            }
        };
        Self {
            count: w.len(),
            p50_s: pick(0.5),
            p95_s: pick(0.95),
            max_s: w.last().copied().unwrap_or(0.0),
        }
    }
}

/// A switch decision with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedDecision {
    /// Simulated time.
    pub t_s: f64,
    /// The decision.
    pub decision: Decision,
}

/// What became of a mode a GPU left, with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedOutgoing {
    /// Simulated time.
    pub t_s: f64,
    /// The GPU.
    pub gpu: u32,
    /// The mode it left.
    pub mode: String,
    /// Put to sleep or stopped, and why.
    pub choice: OutgoingChoice,
    /// Level-1 sleepers demoted to level 2 to make room in host RAM: (GPU, mode), oldest
    /// first.
    pub evicted: Vec<(u32, String)>,
}

/// What a simulation measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// Policy name.
    pub policy: String,
    /// Trace name.
    pub trace: String,
    /// GPUs.
    pub gpus: usize,
    /// Time the last job completed, seconds.
    pub makespan_s: f64,
    /// GPU-seconds spent running batches.
    pub busy_s: f64,
    /// GPU-seconds spent swapping.
    pub swap_s: f64,
    /// GPU-seconds spent in thermal pauses.
    pub pause_s: f64,
    /// Swaps started.
    pub swaps: usize,
    /// Waits per class.
    pub waits: BTreeMap<String, WaitStats>,
    /// Highest simulated GPU temperature, °C.
    pub max_temperature_c: f64,
    /// Switch decisions, when recorded.
    pub switches: Vec<LoggedDecision>,
    /// Modes put to sleep.
    pub sleeps: usize,
    /// Switches to a mode asleep on the GPU (a wake instead of a load).
    pub wakes: usize,
    /// Level-1 sleepers demoted to level 2 for host RAM.
    pub evictions: usize,
    /// Most host RAM level-1 sleepers held at once, MB.
    pub host_peak_mb: u64,
    /// What became of each mode a GPU left (slept or stopped, and why), when switches are
    /// recorded and sleep is on.
    pub outgoing: Vec<LoggedOutgoing>,
}

impl SimReport {
    /// Useful busy fraction: batch time over GPUs × makespan.
    pub fn busy_fraction(&self) -> f64 {
        ratio(self.busy_s, self.gpus as f64 * self.makespan_s)
    }
    /// Swap time over GPUs × makespan.
    pub fn swap_share(&self) -> f64 {
        ratio(self.swap_s, self.gpus as f64 * self.makespan_s)
    }
    /// Largest wait over all classes.
    pub fn max_wait_s(&self) -> f64 {
        self.waits.values().map(|w| w.max_s).fold(0.0, f64::max)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// A lower bound on any policy's makespan for a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LowerBound {
    /// Total service time, GPU-seconds.
    pub work_s: f64,
    /// Pauses no policy can avoid: every batch but the last on each GPU is followed by at
    /// least the policy's minimum pause (a swap also counts as a pause), GPU-seconds.
    pub pauses_s: f64,
    /// Swaps no policy can avoid (classes with no GPU initially), beyond the pause they
    /// replace, GPU-seconds.
    pub swaps_s: f64,
    /// `(work + pauses + swaps) / gpus`.
    pub by_work_s: f64,
    /// `max over t of t + (work arriving at or after t) / gpus`, and every job's arrival plus
    /// its own service time.
    pub by_arrival_s: f64,
    /// The bound: the larger of the two.
    pub value_s: f64,
}

/// Computes the [`LowerBound`] of a trace for a fleet that may put modes to sleep: swaps
/// floor at the wake cost. Only the classes no GPU serves at the start must be swapped in,
/// and none of them can be asleep yet (a mode sleeps only after it ran), so their first
/// swap is a cold load either way: the bound equals [`lower_bound`]'s. It is its own function
/// so that a fleet that starts with sleepers (not modelled yet) changes it in one place.
pub fn lower_bound_sleep(
    trace: &Trace,
    catalogue: &Catalogue,
    thermal: &ThermalPolicy,
) -> Result<LowerBound, SimError> {
    lower_bound(trace, catalogue, thermal)
}

/// Computes the [`LowerBound`] of a trace.
pub fn lower_bound(
    trace: &Trace,
    catalogue: &Catalogue,
    thermal: &ThermalPolicy,
) -> Result<LowerBound, SimError> {
    let g = catalogue.initial.len();
    if g == 0 {
        return Err(SimError::Catalogue(
            "no GPU in the initial assignment".into(),
        ));
    }
    let gf = g as f64;
    let mut work = 0.0;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut services = Vec::with_capacity(trace.jobs.len());
    let mut by_arrival = 0.0f64;
    for j in &trace.jobs {
        let m = catalogue
            .get(&j.class)
            .ok_or_else(|| SimError::UnknownClass(j.class.clone()))?;
        let s = m.service_time_s(j.size);
        work += s;
        services.push((j.arrival_s, s));
        *counts.entry(j.class.as_str()).or_default() += 1;
        by_arrival = by_arrival.max(j.arrival_s + s);
    }
    let pause = thermal.min_pause_s();
    let batches: usize = counts
        .iter()
        .map(|(c, n)| n.div_ceil(catalogue.get(c).map_or(1, |m| m.batch_size.max(1))))
        .sum();
    let pauses = batches.saturating_sub(g) as f64 * pause;
    let swaps: f64 = counts
        .keys()
        .filter(|c| !catalogue.initial.iter().any(|i| i == *c))
        .map(|c| (catalogue.swap_in_s(c) - pause).max(0.0))
        .sum::<f64>()
        + 0.0;
    services.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut suffix = 0.0;
    for &(t, s) in services.iter().rev() {
        suffix += s;
        by_arrival = by_arrival.max(t + suffix / gf);
    }
    let by_work = (work + pauses + swaps) / gf;
    Ok(LowerBound {
        work_s: work,
        pauses_s: pauses,
        swaps_s: swaps,
        by_work_s: by_work,
        by_arrival_s: by_arrival,
        value_s: by_work.max(by_arrival),
    })
}

#[derive(Debug, Clone)]
enum Phase {
    Idle,
    Busy {
        until: f64,
    },
    Pause {
        until: f64,
    },
    Swapping {
        to: String,
        until: f64,
        parts: Vec<SwapMeasurement>,
    },
}

#[derive(Debug, Clone)]
struct SimGpu {
    mode: Option<String>,
    phase: Phase,
    drain_to: Option<String>,
    mode_since: f64,
    last_used: f64,
    temp: f64,
    temp_at: f64,
    batch: Vec<usize>,
}

impl SimGpu {
    fn phase_end(&self) -> Option<f64> {
        match &self.phase {
            Phase::Idle => None,
            Phase::Busy { until } | Phase::Pause { until } | Phase::Swapping { until, .. } => {
                Some(*until)
            }
        }
    }
    fn utilization(&self) -> f64 {
        if matches!(self.phase, Phase::Busy { .. }) {
            1.0
        } else {
            0.0
        }
    }
}

struct Sim<'a> {
    cat: &'a Catalogue,
    cfg: &'a SimConfig,
    jobs: &'a [Job],
    service: Vec<f64>,
    gpus: Vec<SimGpu>,
    queues: BTreeMap<String, VecDeque<usize>>,
    pending_work: BTreeMap<String, f64>,
    arrived_work: BTreeMap<String, f64>,
    waits: BTreeMap<String, Vec<f64>>,
    done: usize,
    last_done_at: f64,
    busy_s: f64,
    swap_s: f64,
    pause_s: f64,
    swaps: usize,
    max_temp: f64,
    costs: SwapCosts,
    sleepers: Sleepers,
    sleeps: usize,
    wakes: usize,
    outgoing: Vec<LoggedOutgoing>,
    /// Swaps ended since the policy last heard of them.
    measured: Vec<SwapMeasurement>,
}

impl Sim<'_> {
    fn heat(&mut self, k: usize, now: f64) {
        let g = &mut self.gpus[k];
        g.temp = self
            .cfg
            .thermal_model
            .step(g.temp, g.utilization(), now - g.temp_at);
        g.temp_at = now;
        self.max_temp = self.max_temp.max(g.temp);
    }

    /// Puts the mode GPU `k` leaves to sleep or stops it, as [`Sleepers::retire`] decides,
    /// and logs the choice. Returns the seconds a sleep costs and its measurement (`None`:
    /// stopped, its cost part of the next load).
    fn retire(&mut self, k: usize, now: f64) -> Option<(f64, SwapMeasurement)> {
        let mode = self.gpus[k].mode.clone()?;
        let gpu = k as u32;
        let retired = self.sleepers.retire(self.cat, &self.costs, &mode, gpu, now);
        let choice = retired.choice.choice;
        if self.cfg.record_switches {
            self.outgoing.push(LoggedOutgoing {
                t_s: now,
                gpu,
                mode: mode.clone(),
                choice: retired.choice,
                evicted: retired.evicted,
            });
        }
        let Outgoing::Sleep(level) = choice else {
            return None;
        };
        let kind = SwapKind::Sleep(level);
        let d = SwapCosts::prior(self.cat, &mode, kind);
        self.sleeps += 1;
        Some((
            d,
            SwapMeasurement {
                mode,
                gpu,
                kind,
                seconds: d,
            },
        ))
    }

    fn start_swap(&mut self, k: usize, to: String, now: f64) {
        let mut parts = Vec::new();
        let mut d = 0.0;
        if self.cfg.sleep
            && let Some((s, m)) = self.retire(k, now)
        {
            d += s;
            parts.push(m);
        }
        let gpu = k as u32;
        let kind = match self.sleepers.wake(&to, gpu) {
            Some(level) => {
                self.wakes += 1;
                SwapKind::Wake(level)
            }
            None => SwapKind::Load,
        };
        let load = match kind {
            SwapKind::Load => self.cat.swap_in_s(&to),
            other => SwapCosts::prior(self.cat, &to, other),
        };
        d += load;
        parts.push(SwapMeasurement {
            mode: to.clone(),
            gpu,
            kind,
            seconds: load,
        });
        self.heat(k, now);
        let g = &mut self.gpus[k];
        g.drain_to = None;
        if let Phase::Pause { until } = g.phase {
            // The swap replaces the rest of the pause.
            self.pause_s -= (until - now).max(0.0);
        }
        g.phase = Phase::Swapping {
            to,
            until: now + d,
            parts,
        };
        self.swap_s += d;
        self.swaps += 1;
    }

    fn end_phase(&mut self, k: usize, now: f64) {
        self.heat(k, now);
        let phase = std::mem::replace(&mut self.gpus[k].phase, Phase::Idle);
        match phase {
            Phase::Busy { .. } => {
                let batch = std::mem::take(&mut self.gpus[k].batch);
                self.done += batch.len();
                self.last_done_at = now;
                if let Some(to) = self.gpus[k].drain_to.take() {
                    self.start_swap(k, to, now);
                } else {
                    let p = self.cfg.thermal.pause_after_batch(Some(self.gpus[k].temp));
                    if p > 0.0 {
                        self.pause_s += p;
                        self.gpus[k].phase = Phase::Pause { until: now + p };
                    }
                }
            }
            Phase::Swapping { to, parts, .. } => {
                for m in &parts {
                    self.costs.record(m);
                }
                self.measured.extend(parts);
                let g = &mut self.gpus[k];
                g.mode = Some(to);
                g.mode_since = now;
            }
            Phase::Pause { .. } | Phase::Idle => {}
        }
    }

    fn dispatch(&mut self, k: usize, now: f64) {
        let g = &self.gpus[k];
        if !matches!(g.phase, Phase::Idle) || g.drain_to.is_some() {
            return;
        }
        let Some(mode) = g.mode.clone() else { return };
        let batch_size = self.cat.get(&mode).map_or(1, |m| m.batch_size.max(1));
        let Some(q) = self.queues.get_mut(&mode) else {
            return;
        };
        if q.is_empty() {
            return;
        }
        let mut batch = Vec::with_capacity(batch_size);
        let mut dur = 0.0;
        while batch.len() < batch_size {
            let Some(j) = q.pop_front() else { break };
            dur += self.service[j];
            self.waits
                .entry(mode.clone())
                .or_default()
                .push(now - self.jobs[j].arrival_s);
            batch.push(j);
        }
        if let Some(w) = self.pending_work.get_mut(&mode) {
            *w = (*w - dur).max(0.0);
        }
        self.heat(k, now);
        self.busy_s += dur;
        let g = &mut self.gpus[k];
        g.last_used = now;
        g.batch = batch;
        g.phase = Phase::Busy { until: now + dur };
    }

    fn tick_input(&self, now: f64) -> TickInput {
        let gpus = self
            .gpus
            .iter()
            .enumerate()
            .map(|(k, g)| GpuView {
                index: k as u32,
                mode: g.mode.clone(),
                state: match (&g.phase, &g.drain_to) {
                    (Phase::Busy { until }, Some(to)) => GpuState::Draining {
                        to: to.clone(),
                        remaining_s: until - now,
                    },
                    (Phase::Busy { until }, None) => GpuState::Busy {
                        remaining_s: until - now,
                    },
                    (Phase::Swapping { to, until, .. }, _) => GpuState::Swapping {
                        to: to.clone(),
                        remaining_s: until - now,
                    },
                    _ => GpuState::Idle,
                },
                mode_since_s: g.mode_since,
                last_used_s: g.last_used,
                asleep: self.sleepers.on(k as u32),
            })
            .collect();
        let queues = self
            .cat
            .names()
            .map(|c| {
                let q = self.queues.get(c);
                let stat = QueueStat {
                    pending_jobs: q.map_or(0, VecDeque::len),
                    pending_work_s: self.pending_work.get(c).copied().unwrap_or(0.0),
                    oldest_wait_s: q
                        .and_then(|q| q.front())
                        .map_or(0.0, |&j| now - self.jobs[j].arrival_s),
                    arrived_work_s_total: self.arrived_work.get(c).copied().unwrap_or(0.0),
                };
                (c.to_owned(), stat)
            })
            .collect();
        TickInput {
            now_s: now,
            gpus,
            queues,
        }
    }

    fn apply(&mut self, d: &Decision, now: f64) {
        let Action::Switch { to, .. } = &d.action else {
            return;
        };
        let k = d.gpu as usize;
        if k >= self.gpus.len() || self.cat.get(to).is_none() {
            return;
        }
        let g = &self.gpus[k];
        match g.phase {
            Phase::Swapping { .. } => {}
            Phase::Busy { .. } => {
                if g.mode.as_deref() == Some(to.as_str()) {
                    self.gpus[k].drain_to = None;
                } else {
                    self.gpus[k].drain_to = Some(to.clone());
                }
            }
            Phase::Idle | Phase::Pause { .. } => {
                if g.mode.as_deref() != Some(to.as_str()) {
                    self.start_swap(k, to.clone(), now);
                }
            }
        }
    }
}

/// Replays `trace` through `policy` on the fleet described by `catalogue.initial`.
pub fn simulate(
    trace: &Trace,
    catalogue: &Catalogue,
    policy: &mut dyn Policy,
    cfg: &SimConfig,
) -> Result<SimReport, SimError> {
    catalogue
        .validate()
        .map_err(|e| SimError::Catalogue(e.to_string()))?;
    if catalogue.initial.is_empty() {
        return Err(SimError::Catalogue(
            "no GPU in the initial assignment".into(),
        ));
    }
    let mut order: Vec<usize> = (0..trace.jobs.len()).collect();
    order.sort_by(|&a, &b| {
        trace.jobs[a]
            .arrival_s
            .total_cmp(&trace.jobs[b].arrival_s)
            .then(a.cmp(&b))
    });
    let mut service = Vec::with_capacity(trace.jobs.len());
    for j in &trace.jobs {
        let m = catalogue
            .get(&j.class)
            .ok_or_else(|| SimError::UnknownClass(j.class.clone()))?;
        service.push(m.service_time_s(j.size));
    }
    let ambient = cfg.thermal_model.ambient_c;
    let mut sim = Sim {
        cat: catalogue,
        cfg,
        jobs: &trace.jobs,
        service,
        gpus: catalogue
            .initial
            .iter()
            .map(|m| SimGpu {
                mode: Some(m.clone()),
                phase: Phase::Idle,
                drain_to: None,
                mode_since: -cfg.initial_mode_age_s,
                last_used: -cfg.initial_mode_age_s,
                temp: ambient,
                temp_at: 0.0,
                batch: Vec::new(),
            })
            .collect(),
        queues: BTreeMap::new(),
        pending_work: BTreeMap::new(),
        arrived_work: BTreeMap::new(),
        waits: BTreeMap::new(),
        done: 0,
        last_done_at: 0.0,
        busy_s: 0.0,
        swap_s: 0.0,
        pause_s: 0.0,
        swaps: 0,
        max_temp: ambient,
        costs: SwapCosts::new(),
        sleepers: Sleepers::new(cfg.host_memory_mb),
        sleeps: 0,
        wakes: 0,
        outgoing: Vec::new(),
        measured: Vec::new(),
    };
    let tick = policy.tick_interval_s().max(1e-3);
    let mut next_tick = 0.0;
    let mut next_arrival = 0usize;
    let mut switches = Vec::new();
    let total = trace.jobs.len();
    let mut now;
    while sim.done < total {
        let t_arr = order
            .get(next_arrival)
            .map_or(f64::INFINITY, |&j| trace.jobs[j].arrival_s);
        let t_gpu = sim
            .gpus
            .iter()
            .filter_map(SimGpu::phase_end)
            .fold(f64::INFINITY, f64::min);
        now = t_arr.min(t_gpu).min(next_tick);
        if now > cfg.max_time_s {
            return Err(SimError::Stalled {
                pending: total - sim.done,
                time_s: now,
            });
        }
        while let Some(&j) = order.get(next_arrival) {
            if trace.jobs[j].arrival_s > now {
                break;
            }
            let c = trace.jobs[j].class.clone();
            *sim.pending_work.entry(c.clone()).or_default() += sim.service[j];
            *sim.arrived_work.entry(c.clone()).or_default() += sim.service[j];
            sim.queues.entry(c).or_default().push_back(j);
            next_arrival += 1;
        }
        for k in 0..sim.gpus.len() {
            if sim.gpus[k].phase_end().is_some_and(|t| t <= now) {
                sim.end_phase(k, now);
            }
        }
        for m in sim.measured.drain(..) {
            policy.observe_swap(&m);
        }
        if next_tick <= now {
            let plan = policy.decide(&sim.tick_input(now));
            for d in &plan.decisions {
                if matches!(d.action, Action::Switch { .. }) {
                    sim.apply(d, now);
                    if cfg.record_switches {
                        switches.push(LoggedDecision {
                            t_s: now,
                            decision: d.clone(),
                        });
                    }
                }
            }
            next_tick = now + tick;
        }
        for k in 0..sim.gpus.len() {
            sim.dispatch(k, now);
        }
    }
    let makespan = sim.last_done_at;
    // Swaps and pauses still running after the last completion do not count.
    for g in &sim.gpus {
        match g.phase {
            Phase::Swapping { until, .. } => sim.swap_s -= (until - makespan).max(0.0),
            Phase::Pause { until } => sim.pause_s -= (until - makespan).max(0.0),
            _ => {}
        }
    }
    Ok(SimReport {
        policy: policy.name().to_owned(),
        trace: trace.name.clone(),
        gpus: sim.gpus.len(),
        makespan_s: makespan,
        busy_s: sim.busy_s,
        swap_s: sim.swap_s,
        pause_s: sim.pause_s,
        swaps: sim.swaps,
        waits: sim
            .waits
            .into_iter()
            .map(|(c, w)| (c, WaitStats::from(w)))
            .collect(),
        max_temperature_c: sim.max_temp,
        switches,
        sleeps: sim.sleeps,
        wakes: sim.wakes,
        evictions: sim.sleepers.evictions(),
        host_peak_mb: sim.sleepers.peak_mb(),
        outgoing: sim.outgoing,
    })
}
