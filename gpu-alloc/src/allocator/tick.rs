//! What one tick takes in (GPUs, pending work per class) and gives out (a plan with a reason per
//! decision), and the [`Policy`] seam that maps one to the other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::costs::SwapMeasurement;
use crate::catalogue::SleepLevel;

/// What a GPU is doing, as seen by the allocator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuState {
    /// Not computing (idle or cooling down between batches).
    Idle,
    /// Running a batch.
    Busy {
        /// Seconds until the batch ends.
        remaining_s: f64,
    },
    /// Finishing a batch, then switching to `to`.
    Draining {
        /// Target mode.
        to: String,
        /// Seconds until the batch ends.
        remaining_s: f64,
    },
    /// Loading mode `to`.
    Swapping {
        /// Target mode.
        to: String,
        /// Seconds until the swap completes.
        remaining_s: f64,
    },
}

/// One GPU in the tick input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    /// GPU index.
    pub index: u32,
    /// Mode currently loaded (`None`: nothing loaded).
    pub mode: Option<String>,
    /// Activity.
    pub state: GpuState,
    /// Time (same clock as [`TickInput::now_s`]) the current mode finished loading.
    pub mode_since_s: f64,
    /// Time the GPU last started a batch (for LRU baselines).
    pub last_used_s: f64,
    /// Modes asleep on this GPU (woken at their wake cost instead of a cold start).
    #[serde(default)]
    pub asleep: Vec<Asleep>,
}

/// A mode whose server sleeps on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asleep {
    /// The mode.
    pub mode: String,
    /// How deeply.
    pub level: SleepLevel,
}

impl GpuView {
    /// The mode this GPU serves or will serve once its drain/swap completes.
    pub fn effective_mode(&self) -> Option<&str> {
        match &self.state {
            GpuState::Draining { to, .. } | GpuState::Swapping { to, .. } => Some(to),
            _ => self.mode.as_deref(),
        }
    }

    /// The level `mode` sleeps at on this GPU, if it does.
    pub fn asleep_level(&self, mode: &str) -> Option<SleepLevel> {
        self.asleep.iter().find(|a| a.mode == mode).map(|a| a.level)
    }

    /// Whether a switch is already under way.
    pub fn in_transition(&self) -> bool {
        matches!(
            self.state,
            GpuState::Draining { .. } | GpuState::Swapping { .. }
        )
    }
}

/// Pending work of one job class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueStat {
    /// Jobs waiting (not started).
    pub pending_jobs: usize,
    /// GPU-seconds of work those jobs need in their mode (size / throughput).
    pub pending_work_s: f64,
    /// Age of the oldest waiting job, seconds.
    pub oldest_wait_s: f64,
    /// Cumulative GPU-seconds of work that ever arrived in this class (the allocator derives
    /// arrival rates from its increments).
    pub arrived_work_s_total: f64,
}

/// The allocator's input at one tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TickInput {
    /// Current time, seconds on a monotonic clock.
    pub now_s: f64,
    /// GPUs.
    pub gpus: Vec<GpuView>,
    /// Pending work per class (class name = mode name).
    pub queues: BTreeMap<String, QueueStat>,
}

/// What to do with one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Leave it as it is.
    Keep,
    /// Switch it to another mode.
    Switch {
        /// Mode it leaves.
        from: Option<String>,
        /// Mode it goes to.
        to: String,
        /// The GPU is mid-batch: finish the batch, then swap.
        drain_first: bool,
    },
}

/// Machine-readable reason of a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Reason {
    /// Nothing would improve the plan.
    NoBetterPlan,
    /// A switch is already under way.
    SwitchInProgress {
        /// Target mode.
        to: String,
    },
    /// Over the horizon, the switch lets the fleet do more of the work it has to do (pending
    /// plus expected arrivals), the swap's lost seconds counted, by more than the threshold.
    AmortisedGain {
        /// GPU-seconds of demanded work left undone within the horizon, before.
        undone_before_s: f64,
        /// The same after the switch.
        undone_after_s: f64,
        /// Swap-in seconds the switch costs.
        swap_s: f64,
        /// Threshold the gain had to beat.
        threshold_s: f64,
    },
    /// The switch leaves no work undone that was not already, and brings the projected finish
    /// of the slowest class earlier by more than the swap costs plus the hysteresis.
    FinishSooner {
        /// Projected finish of the slowest class before, seconds.
        finish_before_s: f64,
        /// After.
        finish_after_s: f64,
        /// Swap-in seconds the switch costs.
        swap_s: f64,
    },
    /// The switch was worth it but the improvement did not beat the hysteresis threshold.
    BelowHysteresis {
        /// Best candidate target.
        wanted: String,
        /// Gain, seconds.
        gain_s: f64,
        /// Threshold, seconds.
        threshold_s: f64,
    },
    /// A class would otherwise wait past the bound.
    Starvation {
        /// The starving class.
        class: String,
        /// Age of its oldest job.
        oldest_wait_s: f64,
        /// The configured bound.
        bound_s: f64,
    },
    /// The switch was blocked by an anti-inversion rule.
    AntiInversion {
        /// The class the switch would have served.
        target: String,
        /// Its pending jobs.
        target_jobs: usize,
        /// The class with far more pending work.
        other: String,
        /// Its pending jobs.
        other_jobs: usize,
    },
    /// The GPU switched too recently.
    MinDwell {
        /// Best candidate target.
        wanted: String,
        /// Seconds before it may switch again.
        remaining_s: f64,
    },
    /// The GPU is the last one of a class whose oldest job already waited a large part of
    /// the bound: it stays.
    ProtectWaiting {
        /// The class protected.
        class: String,
        /// Age of its oldest job.
        oldest_wait_s: f64,
    },
    /// An idle GPU whose class had nothing queued and enough capacity without it went to a
    /// class with work (queued or arriving) and at most one GPU.
    SpareCapacity {
        /// The class served.
        class: String,
        /// Its pending jobs.
        pending_jobs: usize,
    },
    /// The GPU's own class has jobs queued that it serves before switching: the jobs it
    /// holds back wait less than the class it leaves would (the A B A A C case: serve both
    /// A's, then B, then C), and no job of the class it wanted passes its bound meanwhile.
    ServeResidentFirst {
        /// The class served first.
        class: String,
        /// Its queued jobs.
        pending_jobs: usize,
        /// The class the switch would serve.
        wanted: String,
        /// Job-seconds of waiting if it serves its own class first.
        wait_if_kept_s: f64,
        /// Job-seconds of waiting if it switches now.
        wait_if_switched_s: f64,
    },
    /// Baseline: never switch.
    Static,
    /// Baseline: switch to the longest queue.
    LongestQueue {
        /// The class with most pending jobs.
        class: String,
        /// Its pending jobs.
        pending_jobs: usize,
    },
    /// Baseline: a request for a model that is not loaded loads it on the least recently used
    /// idle GPU.
    OnDemandLoad {
        /// The class whose model is loaded.
        class: String,
    },
}

/// One decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// GPU index.
    pub gpu: u32,
    /// Action.
    pub action: Action,
    /// Why.
    pub reason: Reason,
}

/// The plan of one tick: one decision per GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Tick time.
    pub now_s: f64,
    /// Decisions, one per GPU of the input.
    pub decisions: Vec<Decision>,
}

impl Plan {
    /// Decisions that switch a GPU.
    pub fn switches(&self) -> impl Iterator<Item = &Decision> {
        self.decisions
            .iter()
            .filter(|d| matches!(d.action, Action::Switch { .. }))
    }
}

/// An allocation policy, called every [`Policy::tick_interval_s`].
pub trait Policy: Send {
    /// Short name for reports.
    fn name(&self) -> &str;
    /// Seconds between ticks.
    fn tick_interval_s(&self) -> f64;
    /// One tick: decide what each GPU should serve.
    fn decide(&mut self, input: &TickInput) -> Plan;
    /// A swap (load, wake, sleep or stop) ended and took this long; a policy that plans by
    /// swap costs learns from it. Ignored by default.
    fn observe_swap(&mut self, _measurement: &SwapMeasurement) {}
}
