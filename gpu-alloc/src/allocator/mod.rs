//! The allocator tick: pending work per job class in, a plan out (which GPU
//! serves which mode), every decision with a machine-readable [`Reason`].
//!
//! The [`Policy`] trait is the seam: the simulator replays the real [`Allocator`] and the
//! baselines (in [`crate::baselines`]) through it.
//!
//! Rules of the swap-aware [`Allocator`], in the order they are applied:
//! 1. **Never mid-batch**: a switch of a busy GPU is `drain_first` — the executor gives it no
//!    new batch and starts the swap when the running batch ends.
//! 2. **Starvation bound**: a class with pending jobs gets one more GPU as soon as its oldest
//!    job would otherwise wait past `max_wait_s` (counting the swap-in and the drain): a class
//!    with no GPU, and equally one whose only GPUs are still draining a long batch before
//!    swapping to it, or busy for longer than the wait it has left.
//!    This overrides the dwell time, the hysteresis and the anti-inversion rule. It fires at
//!    the last tick that still makes it in time, assuming an idle donor may start a batch
//!    before the next tick. Conversely the last GPU of a class whose oldest job has waited
//!    half the bound is not taken away (`ProtectWaiting`).
//! 3. **Swap-cost amortisation**: each class demands, over `horizon_s`, its pending work
//!    plus the work its estimated arrival rate brings (batch pauses included); each GPU
//!    offers the horizon minus what is already spoken for (running batch, drain, swap-in).
//!    A switch a→b is taken when it reduces the demanded work left undone within the
//!    horizon by more than the hysteresis threshold (`hysteresis_s` plus a fraction of the
//!    swap-in and, when class a still receives work, of the swap back) — or, when it leaves
//!    no extra work undone, brings the slowest class's projected finish earlier by more than
//!    the swap plus `hysteresis_s` (the tail of a backlog).
//!    The backlog entering the demand is a moving average (`backlog_time_constant_s`, never
//!    above the actual backlog), so one burst does not move GPUs back and forth; a class
//!    silent for `silence_gaps` × its usual gap between arrivals counts as receiving no more
//!    work (so GPUs are released at the end of a workload).
//! 4. **Minimum dwell and hysteresis**: a GPU that switched less than `min_dwell_s` ago is
//!    not switched (unless it is idle and its class expects less than `hysteresis_s` of work
//!    over the horizon); a switch that reverses one made within `reversal_window_s` (b→a after
//!    a→b) needs `reversal_factor` × the threshold.
//! 5. **Anti-inversion**: no switch to `think` for ≤ 3 jobs while `vision` has > 10× more
//!    pending (configurable list of rules).
//! 6. **Spare capacity**: a GPU left idle by the rules above, whose class has nothing queued
//!    and either keeps other GPUs enough for twice its demand or has gone silent, goes to a
//!    class with work (queued or arriving) and at most one GPU (`SpareCapacity`). The swap
//!    costs no work, and a class served by a single GPU (or by loans) no longer waits for a
//!    busy GPU or a swap-in while others sit idle. Dwell time and anti-inversion apply.
//!
//! Swap costs are measured, not configured: every cost above is [`SwapCosts`]' figure for
//! that mode, GPU and kind (the catalogue's `swap_in_s` and sleep costs until a swap is
//! measured through [`Policy::observe_swap`]). With `sleep` on, a switch costs the outgoing
//! mode's sleep plus the target's wake when it sleeps on that GPU (else its load), and the
//! swap back of rule 3 is a wake; what becomes of the outgoing mode (sleep level 1 or 2, or
//! stop) is [`choose_outgoing`]'s choice, with its reason.
//!
//! Anti-thrash: the minimum dwell (rule 4) and the wait bound (rule 2) can be set per mode
//! (`modes.<name>.min_resident_s`, `max_wait_s`); queues are per class, so the requests for
//! one model are served together (A B A A C is served A A A, B, C: two swaps, not three); and
//! with `serve_resident_first` a switch away from a class's only GPU waits one batch while
//! that class has jobs queued, when that lowers the total waiting and the wanted class stays
//! within its bound (`ServeResidentFirst`).

mod anti_thrash;
mod config;
mod costs;
mod outgoing;
mod tick;

use std::collections::{BTreeMap, BTreeSet};

use crate::catalogue::{Catalogue, ModeSpec, SleepLevel};

pub use config::{AllocatorConfig, AntiInversionRule, InvalidAllocatorConfig, ModeLimits};
pub use costs::{Measured, SwapCosts, SwapKind, SwapMeasurement};
pub use outgoing::{Outgoing, OutgoingChoice, OutgoingReason, Retired, Sleepers, choose_outgoing};
pub use tick::{
    Action, Asleep, Decision, GpuState, GpuView, Plan, Policy, QueueStat, Reason, TickInput,
};

#[derive(Debug, Clone, Default)]
struct ClassEstimate {
    last_total: Option<f64>,
    rate: f64,
    avg_job_s: Option<f64>,
    pending: Option<f64>,
    last_arrival: Option<f64>,
    gap: Option<f64>,
    silent: bool,
}

/// The swap-cost-aware allocator.
#[derive(Debug, Clone)]
pub struct Allocator {
    cfg: AllocatorConfig,
    catalogue: Catalogue,
    est: BTreeMap<String, ClassEstimate>,
    last_now: Option<f64>,
    /// GPUs lent to a starving class; they may leave it before the dwell time once its
    /// queue is empty.
    loans: BTreeSet<u32>,
    /// Recent switches: (time, from, to), for the reversal hysteresis.
    recent: Vec<(f64, String, String)>,
    /// Swap costs, measured or the catalogue's.
    costs: SwapCosts,
}

/// Per-class projection used to score plans.
#[derive(Debug, Clone)]
struct ClassLoad {
    name: String,
    /// GPU-seconds to serve over the horizon (pending + expected arrivals, pauses included).
    demand_s: f64,
    pending_jobs: usize,
    oldest_wait_s: f64,
}

/// Score of a plan: work left undone within the horizon, and the slowest projected finish.
#[derive(Debug, Clone, Copy)]
struct Score {
    undone_s: f64,
    finish_s: f64,
}

impl Allocator {
    /// A new allocator over a catalogue.
    pub fn new(cfg: AllocatorConfig, catalogue: Catalogue) -> Self {
        Self {
            cfg,
            catalogue,
            est: BTreeMap::new(),
            last_now: None,
            loans: BTreeSet::new(),
            recent: Vec::new(),
            costs: SwapCosts::new(),
        }
    }

    /// Plans with `costs` (measured in an earlier run, say) instead of the catalogue's alone.
    pub fn with_swap_costs(mut self, costs: SwapCosts) -> Self {
        self.costs = costs;
        self
    }

    /// The swap costs the allocator plans with.
    pub fn swap_costs(&self) -> &SwapCosts {
        &self.costs
    }

    fn can_sleep(&self, mode: &str) -> bool {
        self.cfg.sleep && self.catalogue.get(mode).is_some_and(ModeSpec::can_sleep)
    }

    /// Seconds GPU `g` is unavailable to switch to `class`: the outgoing server put to sleep
    /// (when sleep is on and it can), then `class` woken if it sleeps there, else loaded.
    fn cost_in(&self, g: &GpuView, class: &str) -> f64 {
        let out = match g.mode.as_deref() {
            Some(a) if a != class && self.can_sleep(a) => self.costs.cost_s(
                &self.catalogue,
                a,
                g.index,
                SwapKind::Sleep(SleepLevel::One),
            ),
            _ => 0.0,
        };
        let kind = g.asleep_level(class).map_or(SwapKind::Load, SwapKind::Wake);
        out + self.costs.cost_s(&self.catalogue, class, g.index, kind)
    }

    /// Seconds to bring `class` back on GPU `g` once it left: a wake when it will sleep there,
    /// else a load.
    fn cost_back(&self, g: &GpuView, class: &str) -> f64 {
        let kind = if self.can_sleep(class) {
            SwapKind::Wake(SleepLevel::One)
        } else {
            SwapKind::Load
        };
        self.costs.cost_s(&self.catalogue, class, g.index, kind)
    }

    /// The configuration.
    pub fn config(&self) -> &AllocatorConfig {
        &self.cfg
    }

    /// Current arrival-rate estimate of a class, GPU-seconds of work per second.
    pub fn arrival_rate(&self, class: &str) -> f64 {
        self.est
            .get(class)
            .filter(|e| !e.silent)
            .map_or(0.0, |e| e.rate)
    }

    fn update_estimates(&mut self, input: &TickInput) {
        let dt = self.last_now.map_or(0.0, |t| (input.now_s - t).max(0.0));
        self.last_now = Some(input.now_s);
        let alpha = if dt > 0.0 {
            1.0 - (-dt / self.cfg.rate_time_constant_s.max(1e-9)).exp()
        } else {
            0.0
        };
        for (name, q) in &input.queues {
            let e = self.est.entry(name.clone()).or_default();
            if let Some(last) = e.last_total
                && dt > 0.0
            {
                let arrived = (q.arrived_work_s_total - last).max(0.0);
                e.rate += alpha * (arrived / dt - e.rate);
                if arrived > 0.0 {
                    if let Some(prev) = e.last_arrival {
                        let g = input.now_s - prev;
                        e.gap = Some(e.gap.map_or(g, |old| old + 0.2 * (g - old)));
                    }
                    e.last_arrival = Some(input.now_s);
                }
            }
            // A class silent for much longer than its usual gap between arrivals is taken
            // to have stopped receiving work (the moving average alone would take many
            // minutes to forget it).
            let silence_limit = (self.cfg.silence_gaps * e.gap.unwrap_or(f64::INFINITY))
                .max(self.cfg.min_silence_s);
            e.silent = self.cfg.silence_gaps > 0.0
                && e.last_arrival
                    .is_some_and(|t| input.now_s - t > silence_limit);
            e.last_total = Some(q.arrived_work_s_total);
            let beta = if dt > 0.0 {
                1.0 - (-dt / self.cfg.backlog_time_constant_s.max(1e-9)).exp()
            } else {
                0.0
            };
            e.pending = Some(match e.pending {
                Some(p) => p + beta * (q.pending_work_s - p),
                None => q.pending_work_s,
            });
            if q.pending_jobs > 0 {
                let avg = q.pending_work_s / q.pending_jobs as f64;
                e.avg_job_s = Some(match e.avg_job_s {
                    Some(prev) => prev + 0.2 * (avg - prev),
                    None => avg,
                });
            }
        }
    }

    /// Backlog used for planning: its moving average, so that one burst does not move GPUs
    /// back and forth (never more than the actual backlog).
    fn smoothed_backlog(&self, class: &str, actual: f64) -> f64 {
        self.est
            .get(class)
            .and_then(|e| e.pending)
            .map_or(actual, |p| p.min(actual))
    }

    /// Expected duration of the next batch of a class with `pending` jobs queued.
    fn batch_estimate_s(&self, class: &str, pending: usize) -> f64 {
        let batch = self
            .catalogue
            .get(class)
            .map_or(16, |m| m.batch_size)
            .max(1);
        let avg = self.est.get(class).and_then(|e| e.avg_job_s).unwrap_or(0.0);
        pending.min(batch) as f64 * avg
    }

    /// GPU-time multiplier of a class: a batch of `batch_size` jobs is followed by the
    /// inter-batch pause.
    fn overhead_factor(&self, class: &str) -> f64 {
        let batch = self
            .catalogue
            .get(class)
            .map_or(16, |m| m.batch_size)
            .max(1) as f64;
        let avg = self
            .est
            .get(class)
            .and_then(|e| e.avg_job_s)
            .unwrap_or(1.0)
            .max(1e-3);
        let batch_s = batch * avg;
        (batch_s + self.cfg.batch_overhead_s) / batch_s
    }

    fn loads(&self, input: &TickInput) -> Vec<ClassLoad> {
        let mut names: Vec<String> = self.catalogue.names().map(str::to_owned).collect();
        for k in input.queues.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
        names
            .into_iter()
            .map(|name| {
                let q = input.queues.get(&name).cloned().unwrap_or_default();
                let rate = self.arrival_rate(&name);
                let factor = self.overhead_factor(&name);
                ClassLoad {
                    demand_s: (self.smoothed_backlog(&name, q.pending_work_s)
                        + rate * self.cfg.horizon_s)
                        * factor,
                    pending_jobs: q.pending_jobs,
                    oldest_wait_s: q.oldest_wait_s,
                    name,
                }
            })
            .collect()
    }

    /// Scores a plan: `gpus[c]` GPUs serve class c, `busy[c]` GPU-seconds of their horizon
    /// are already spoken for (running batches, drains, swaps).
    fn score(&self, loads: &[ClassLoad], gpus: &[usize], busy: &[f64]) -> Score {
        let h = self.cfg.horizon_s;
        let mut undone = 0.0;
        let mut finish = 0.0f64;
        for (i, c) in loads.iter().enumerate() {
            let capacity = (gpus[i] as f64 * h - busy[i]).max(0.0);
            undone += (c.demand_s - capacity).max(0.0);
            let f = if c.demand_s <= 1e-9 {
                0.0
            } else if gpus[i] == 0 {
                c.demand_s + 2.0 * h
            } else {
                (c.demand_s + busy[i]) / gpus[i] as f64
            };
            finish = finish.max(f);
        }
        Score {
            undone_s: undone,
            finish_s: finish,
        }
    }

    /// Seconds until a GPU serving `class` (or draining or swapping to it) can start its
    /// next batch; infinite when none does.
    fn served_at(&self, class: &str, gpus: &[GpuView]) -> f64 {
        gpus.iter()
            .filter(|g| g.effective_mode() == Some(class))
            .map(|g| match &g.state {
                GpuState::Idle => 0.0,
                GpuState::Busy { remaining_s } => remaining_s + self.cfg.batch_overhead_s,
                GpuState::Draining { remaining_s, .. } => remaining_s + self.cost_in(g, class),
                GpuState::Swapping { remaining_s, .. } => *remaining_s,
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Rule 6, spare capacity: an idle GPU whose class has nothing queued and keeps enough
    /// capacity without it goes to a class with work (queued or arriving) and at most one GPU:
    /// a GPU lent away comes back, and a lone GPU's stream gets a second one while others sit
    /// idle. The GPU had nothing to do, so the swap costs no work.
    fn spare_capacity(
        &self,
        input: &TickInput,
        loads: &[ClassLoad],
        gpus: &mut [usize],
        decisions: &mut [Option<Decision>],
        blocked: &mut [Option<Reason>],
    ) {
        let h = self.cfg.horizon_s;
        let idx = |name: &str| loads.iter().position(|c| c.name == name);
        let mut targeted: Vec<bool> = vec![false; loads.len()];
        for d in decisions.iter().flatten() {
            if let Action::Switch { to, .. } = &d.action
                && let Some(b) = idx(to)
            {
                targeted[b] = true;
            }
        }
        for (k, g) in input.gpus.iter().enumerate() {
            if decisions[k].is_some() || !matches!(g.state, GpuState::Idle) {
                continue;
            }
            let a = g.effective_mode().and_then(idx);
            // Its class keeps enough GPUs without it, or has stopped receiving work.
            let spare = a.is_none_or(|a| {
                let c = &loads[a];
                c.pending_jobs == 0
                    && if gpus[a] >= 2 {
                        c.demand_s <= 0.5 * (gpus[a] - 1) as f64 * h
                    } else {
                        self.est.get(&c.name).is_some_and(|e| e.silent)
                            && c.demand_s <= self.cfg.hysteresis_s
                    }
            });
            if !spare {
                continue;
            }
            let wants = |b: usize| {
                let c = &loads[b];
                if Some(b) == a || targeted[b] {
                    return false;
                }
                gpus[b] <= 1 && (c.pending_jobs > 0 || self.arrival_rate(&c.name) > 1e-6)
            };
            // The oldest waiting job first, then the busiest stream.
            let Some(b) = (0..loads.len()).filter(|&b| wants(b)).max_by(|&x, &y| {
                loads[x]
                    .oldest_wait_s
                    .total_cmp(&loads[y].oldest_wait_s)
                    .then(
                        self.arrival_rate(&loads[x].name)
                            .total_cmp(&self.arrival_rate(&loads[y].name)),
                    )
            }) else {
                continue;
            };
            let dwell_left = self.min_resident_s(g) - (input.now_s - g.mode_since_s);
            let waive = self.loans.contains(&g.index)
                || a.is_none_or(|a| loads[a].demand_s <= self.cfg.hysteresis_s);
            let veto = if dwell_left > 0.0 && !waive {
                Some(Reason::MinDwell {
                    wanted: loads[b].name.clone(),
                    remaining_s: dwell_left,
                })
            } else {
                self.anti_inversion(&loads[b].name, input)
            };
            if let Some(r) = veto {
                blocked[k].get_or_insert(r);
                continue;
            }
            if let Some(a) = a {
                gpus[a] = gpus[a].saturating_sub(1);
            }
            gpus[b] += 1;
            targeted[b] = true;
            decisions[k] = Some(switch_decision(
                g,
                &loads[b].name,
                Reason::SpareCapacity {
                    class: loads[b].name.clone(),
                    pending_jobs: loads[b].pending_jobs,
                },
            ));
        }
    }

    fn anti_inversion(&self, target: &str, input: &TickInput) -> Option<Reason> {
        let pending = |c: &str| input.queues.get(c).map_or(0, |q| q.pending_jobs);
        self.cfg.anti_inversion.iter().find_map(|r| {
            let t = pending(&r.target);
            let o = pending(&r.other);
            (r.target == target && t <= r.max_target_jobs && (o as f64) > r.ratio * t as f64).then(
                || Reason::AntiInversion {
                    target: r.target.clone(),
                    target_jobs: t,
                    other: r.other.clone(),
                    other_jobs: o,
                },
            )
        })
    }
}

fn remaining_busy(g: &GpuView) -> f64 {
    match &g.state {
        GpuState::Busy { remaining_s } | GpuState::Draining { remaining_s, .. } => *remaining_s,
        GpuState::Swapping { remaining_s, .. } => *remaining_s,
        GpuState::Idle => 0.0,
    }
}

fn switch_decision(g: &GpuView, to: &str, reason: Reason) -> Decision {
    Decision {
        gpu: g.index,
        action: Action::Switch {
            from: g.mode.clone(),
            to: to.to_owned(),
            drain_first: matches!(g.state, GpuState::Busy { .. }),
        },
        reason,
    }
}

impl Policy for Allocator {
    fn name(&self) -> &str {
        "swap-aware"
    }

    fn tick_interval_s(&self) -> f64 {
        self.cfg.tick_s
    }

    fn observe_swap(&mut self, measurement: &SwapMeasurement) {
        self.costs.record(measurement);
    }

    fn decide(&mut self, input: &TickInput) -> Plan {
        self.update_estimates(input);
        let loads = self.loads(input);
        let idx = |name: &str| loads.iter().position(|c| c.name == name);
        let mut gpus = vec![0usize; loads.len()];
        let mut busy = vec![0.0f64; loads.len()];
        for g in &input.gpus {
            if let Some(i) = g.effective_mode().and_then(idx) {
                gpus[i] += 1;
                busy[i] += match &g.state {
                    GpuState::Draining { remaining_s, to } => remaining_s + self.cost_in(g, to),
                    other => match other {
                        GpuState::Busy { remaining_s } | GpuState::Swapping { remaining_s, .. } => {
                            *remaining_s
                        }
                        _ => 0.0,
                    },
                };
            }
        }
        // Loans end when the GPU left the class or the class's queue is empty.
        let live: BTreeSet<u32> = input.gpus.iter().map(|g| g.index).collect();
        self.loans.retain(|k| live.contains(k));

        let mut decisions: Vec<Option<Decision>> = vec![None; input.gpus.len()];
        for (k, g) in input.gpus.iter().enumerate() {
            if let (true, Some(to)) = (g.in_transition(), g.effective_mode()) {
                decisions[k] = Some(Decision {
                    gpu: g.index,
                    action: Action::Keep,
                    reason: Reason::SwitchInProgress { to: to.to_owned() },
                });
            }
        }

        // Seconds GPU k needs to switch to class b.
        let cost_to: Vec<Vec<f64>> = input
            .gpus
            .iter()
            .map(|g| loads.iter().map(|c| self.cost_in(g, &c.name)).collect())
            .collect();
        // The plan after moving GPU k to class b.
        let moved = |k: usize, b: usize, gpus: &[usize], busy: &[f64]| -> (Vec<usize>, Vec<f64>) {
            let g = &input.gpus[k];
            let mut gp = gpus.to_vec();
            let mut bs = busy.to_vec();
            let rem = remaining_busy(g);
            if let Some(a) = g.effective_mode().and_then(idx) {
                gp[a] = gp[a].saturating_sub(1);
                bs[a] = (bs[a] - rem).max(0.0);
            }
            gp[b] += 1;
            bs[b] += cost_to[k][b] + rem;
            (gp, bs)
        };

        // Rule 2: starvation.
        for b in 0..loads.len() {
            let c = &loads[b];
            if c.pending_jobs == 0 {
                continue;
            }
            let bound = self.cfg.max_wait_s(&c.name);
            let slack = bound - c.oldest_wait_s - self.cfg.starvation_margin_s - self.cfg.tick_s;
            // A class whose own GPUs (those serving it, draining or swapping to it) start its
            // oldest job in time needs nothing; one served only by a GPU still draining a long
            // batch, or by busy GPUs, may not be.
            let served_at = self.served_at(&loads[b].name, &input.gpus);
            if served_at <= slack {
                continue;
            }
            let donors: Vec<usize> = (0..input.gpus.len())
                .filter(|&k| {
                    decisions[k].is_none() && input.gpus[k].effective_mode() != Some(&c.name)
                })
                .collect();
            let ready =
                |k: usize| remaining_busy(&input.gpus[k]) + self.cost_in(&input.gpus[k], &c.name);
            let soonest = donors
                .iter()
                .map(|&k| ready(k))
                .fold(f64::INFINITY, f64::min);
            // No donor can start it sooner than its own GPUs will.
            if !soonest.is_finite() || soonest >= served_at {
                continue;
            }
            // The same at the next tick: an idle donor whose class has work queued will
            // likely have started a batch by then; if waiting a tick would be too late, fire
            // now.
            let soonest_next = donors
                .iter()
                .map(|&k| {
                    let g = &input.gpus[k];
                    let busy = match g.state {
                        GpuState::Idle => g.effective_mode().and_then(idx).map_or(0.0, |a| {
                            self.batch_estimate_s(&loads[a].name, loads[a].pending_jobs)
                        }),
                        _ => (remaining_busy(g) - self.cfg.tick_s).max(0.0),
                    };
                    busy + self.cost_in(g, &c.name)
                })
                .fold(f64::INFINITY, f64::min);
            if soonest < slack && soonest_next < slack - self.cfg.tick_s {
                continue;
            }
            // Donor: among those ready in time (else the soonest), the one whose loss leaves
            // the least work undone.
            let in_time: Vec<usize> = donors
                .iter()
                .copied()
                .filter(|&k| ready(k) <= slack.max(soonest))
                .collect();
            let best = in_time
                .iter()
                .map(|&k| {
                    let (gp, bs) = moved(k, b, &gpus, &busy);
                    (k, self.score(&loads, &gp, &bs))
                })
                .min_by(|x, y| {
                    x.1.undone_s
                        .total_cmp(&y.1.undone_s)
                        .then(x.1.finish_s.total_cmp(&y.1.finish_s))
                });
            if let Some((k, _)) = best {
                let g = &input.gpus[k];
                (gpus, busy) = moved(k, b, &gpus, &busy);
                self.loans.insert(g.index);
                decisions[k] = Some(switch_decision(
                    g,
                    &c.name,
                    Reason::Starvation {
                        class: c.name.clone(),
                        oldest_wait_s: c.oldest_wait_s,
                        bound_s: bound,
                    },
                ));
            }
        }

        // Rules 3-5: improving moves, best first, one GPU at a time.
        let mut blocked: Vec<Option<Reason>> = vec![None; input.gpus.len()];
        loop {
            let before = self.score(&loads, &gpus, &busy);
            // (gpu, class, primary gain, after, reason)
            let mut best: Option<(usize, usize, f64, Score, Reason)> = None;
            for k in 0..input.gpus.len() {
                if decisions[k].is_some() {
                    continue;
                }
                let g = &input.gpus[k];
                let a = g.effective_mode().and_then(idx);
                let on_loan_done = self.loans.contains(&g.index)
                    && a.is_some_and(|a| loads[a].pending_jobs == 0)
                    && matches!(g.state, GpuState::Idle);
                // The GPU's class expects less work over the horizon than the hysteresis: it
                // is idle in all but name (e.g. the tail of a trace).
                let idle_class = a.is_some_and(|a| {
                    loads[a].pending_jobs == 0 && loads[a].demand_s <= self.cfg.hysteresis_s
                });
                let waive_dwell = on_loan_done || (idle_class && matches!(g.state, GpuState::Idle));
                for b in 0..loads.len() {
                    if Some(b) == a || loads[b].demand_s <= 1e-9 {
                        continue;
                    }
                    let (gp, bs) = moved(k, b, &gpus, &busy);
                    let after = self.score(&loads, &gp, &bs);
                    let swap = self.cost_in(g, &loads[b].name);
                    // A class that keeps receiving work will want its GPU back: count the
                    // swap back too.
                    let back = a
                        .filter(|&a| self.arrival_rate(&loads[a].name) > 1e-6 && !idle_class)
                        .map_or(0.0, |a| self.cost_back(g, &loads[a].name));
                    let mut threshold =
                        self.cfg.hysteresis_s + self.cfg.hysteresis_swap_fraction * (swap + back);
                    let reverses = a.is_some_and(|a| {
                        self.recent.iter().any(|(t, from, to)| {
                            input.now_s - t < self.cfg.reversal_window_s
                                && *from == loads[b].name
                                && *to == loads[a].name
                        })
                    });
                    if reverses {
                        threshold *= self.cfg.reversal_factor;
                    }
                    let work_gain = before.undone_s - after.undone_s;
                    let finish_gain = before.finish_s - after.finish_s;
                    let candidate = if work_gain > threshold {
                        Some(Reason::AmortisedGain {
                            undone_before_s: before.undone_s,
                            undone_after_s: after.undone_s,
                            swap_s: swap,
                            threshold_s: threshold,
                        })
                    } else if work_gain >= -1e-6
                        && finish_gain > swap + back + self.cfg.hysteresis_s
                        && a.is_none_or(|a| {
                            // Only spare capacity: the donor's class stays at most half busy.
                            let left = gpus[a].saturating_sub(1) as f64 * self.cfg.horizon_s;
                            loads[a].demand_s <= 0.5 * left || loads[a].demand_s <= 1e-9
                        })
                        && (gpus[b] > 0 || a.is_none_or(|a| loads[a].demand_s <= 1e-9))
                    {
                        Some(Reason::FinishSooner {
                            finish_before_s: before.finish_s,
                            finish_after_s: after.finish_s,
                            swap_s: swap,
                        })
                    } else {
                        if work_gain > 0.0 && blocked[k].is_none() {
                            blocked[k] = Some(Reason::BelowHysteresis {
                                wanted: loads[b].name.clone(),
                                gain_s: work_gain,
                                threshold_s: threshold,
                            });
                        }
                        None
                    };
                    let Some(reason) = candidate else { continue };
                    let dwell_left = self.min_resident_s(g) - (input.now_s - g.mode_since_s);
                    let veto = if dwell_left > 0.0 && !waive_dwell {
                        Some(Reason::MinDwell {
                            wanted: loads[b].name.clone(),
                            remaining_s: dwell_left,
                        })
                    } else if let Some(a) = a.filter(|&a| {
                        // Taking the last GPU of a class whose jobs already waited half the
                        // bound would push them past it.
                        gpus[a] == 1
                            && loads[a].pending_jobs > 0
                            && loads[a].oldest_wait_s
                                > self.cfg.protect_wait_fraction
                                    * self.cfg.max_wait_s(&loads[a].name)
                    }) {
                        Some(Reason::ProtectWaiting {
                            class: loads[a].name.clone(),
                            oldest_wait_s: loads[a].oldest_wait_s,
                        })
                    } else if let Some(r) =
                        self.serve_resident_first(g, &loads, &gpus, a, b, swap, back)
                    {
                        Some(r)
                    } else {
                        self.anti_inversion(&loads[b].name, input)
                    };
                    if let Some(r) = veto {
                        blocked[k] = Some(r);
                        continue;
                    }
                    let better = match &best {
                        None => true,
                        Some((_, _, wg, af, _)) => {
                            work_gain > *wg + 1e-6
                                || (work_gain > *wg - 1e-6 && after.finish_s < af.finish_s)
                        }
                    };
                    if better {
                        best = Some((k, b, work_gain, after, reason));
                    }
                }
            }
            let Some((k, b, _, _, reason)) = best else {
                break;
            };
            let g = &input.gpus[k];
            (gpus, busy) = moved(k, b, &gpus, &busy);
            self.loans.remove(&g.index);
            decisions[k] = Some(switch_decision(g, &loads[b].name, reason));
        }

        self.spare_capacity(input, &loads, &mut gpus, &mut decisions, &mut blocked);

        let decisions = decisions
            .into_iter()
            .enumerate()
            .map(|(k, d)| {
                d.unwrap_or_else(|| Decision {
                    gpu: input.gpus[k].index,
                    action: Action::Keep,
                    reason: blocked[k].take().unwrap_or(Reason::NoBetterPlan),
                })
            })
            .collect();
        let plan = Plan {
            now_s: input.now_s,
            decisions,
        };
        let window = self.cfg.reversal_window_s;
        self.recent.retain(|(t, _, _)| input.now_s - t < window);
        for d in plan.switches() {
            if let Action::Switch {
                from: Some(from),
                to,
                ..
            } = &d.action
            {
                self.recent.push((input.now_s, from.clone(), to.clone()));
            }
            // A plan, not an act: whoever carries it out logs what it did (a switch held back,
            // by a retry time say, is planned again every tick).
            tracing::debug!(gpu = d.gpu, action = ?d.action, reason = ?d.reason, "allocator switch");
        }
        plan
    }
}
