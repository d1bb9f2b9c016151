//! A mode executor: which lane each of a machine's GPUs serves. gpu-alloc's [`Allocator`]
//! decides at each tick from the lanes' backlogs (a [`Backlog`]: their queues, and work waiting
//! elsewhere, a [`Demand`]); this crate carries its switches out, GPU by GPU — close the
//! leaving lane's [`Gate`] on that GPU, wait for its batch in progress (never a switch
//! mid-batch), stop its server there, start the other lane's server there, open its gate — and
//! reports every switch, with its reason, to a [`Reporter`] (logs, a status page).
//!
//! A lane has one [`Instance`] per GPU: its server when it runs on that GPU, and the feeder
//! gate of that server. A lane may be served by several GPUs at once (one instance each).
//!
//! It needs neither a feeder nor a server implementation: a gate is a
//! [`horos_server_control::Gate`] (the feeder's `LaneGate` is one), a server a
//! [`horos_server_control::ModeServer`] (a `horos-servers` supervisor handle is one).
//!
//! With sleep on, a lane's server that can sleep is put to sleep when its GPU leaves it and
//! woken when the GPU comes back ([`horos_server_control::ModeServer::sleep`], `wake`); a
//! failed wake is a restart. [`SwapMetrics`] counts each swap's kind and seconds
//! ([`spawn_with_metrics`]).
//!
//! A server that fails to start is not tried again on that GPU before its back-off
//! ([`Backoff`](horos_server_control::Backoff), doubling from
//! [`ModesConfig::retry_after_failure`] up to 10 minutes); the lane that was served there is
//! started again meanwhile.
//!
//! [`replay`] runs the same executor in virtual time on a job trace (servers and feeder
//! simulated), to compare it with gpu-alloc's simulator.
//!
//! [`settings`] holds the lanes and the allocator as a configuration file writes them.
//! [`proposal`] proposes a first configuration's lanes and pool from the GPUs, models and
//! servers found on a machine (`horos-ref init`).
//!
//! See the README for an example.

mod backlog;
mod demand;
mod executor;
pub mod lane_upstream;
mod metrics;
pub mod pool_mode;
pub mod proposal;
pub mod proposal_file;
pub mod replay;
pub mod settings;
mod swap_section;

use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use horos_gpu_alloc::allocator::Allocator;
use horos_gpu_alloc::allocator::AllocatorConfig;
use horos_gpu_alloc::catalogue::{SleepLevel, SleepSpec};
use horos_gpu_alloc::cost_store::CostStore;
pub use horos_gpu_alloc::host_ram::HostRam;
pub use horos_server_control::{Demand, KeepWarm};
use horos_server_control::{Gate, ModeServer};
use tokio::task::JoinHandle;

pub use backlog::{Backlog, BacklogError, Pending, QueueBacklog};
pub use demand::Demands;
pub use lane_upstream::{LaneUpstream, RequestGate};
pub use metrics::{LOST_MINUTES, SwapCounts, SwapMetrics};
pub use pool_mode::{POOL_MODE, PoolMode};
pub use swap_section::SwapSection;

/// The lanes' owner name in a shared [`HostRam`].
pub const HOST_OWNER: &str = "lanes";

/// Where the executor reports what it decides and what the GPU serves (a decision log and a
/// status board, say). Every decision is logged with `tracing` too.
pub trait Reporter: Send + Sync {
    /// A decision on GPU `gpu`, and why.
    fn decision(&self, gpu: u32, action: ModeAction, reason: &str);
    /// What GPU `gpu` serves now: the lane (`mode`) and its state.
    fn mode(&self, gpu: u32, mode: &str, state: &LaneState);
    /// The lanes asleep now, as (GPU, lane, level), each time that changes (going to sleep
    /// counts as asleep). None by default.
    fn asleep(&self, _asleep: &[(u32, String, SleepLevel)]) {}
}

/// What the executor decided or did on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeAction {
    /// The lane served at start (`serve`).
    Serve,
    /// A switch to another lane begins (`switch`).
    Switch,
    /// A switch ended with the other lane serving (`switched`).
    Switched,
    /// The other lane's server did not come up (`switch_failed`).
    SwitchFailed,
    /// The lane served before a failed switch serves again (`restored`).
    Restored,
    /// It did not come back either (`restore_failed`): retried after a back-off.
    RestoreFailed,
    /// A switch away from a lane kept warm was not made (`kept_warm`).
    KeptWarm,
    /// A sleep or a wake failed and was done another way (`fallback`): a sleep that failed
    /// became a stop, a wake that failed a restart.
    Fallback,
    /// What becomes of the server a GPU leaves, with sleep on (`retire`): asleep at level 1
    /// or 2, or stopped, and why (gpu-alloc's `choose_outgoing`).
    Retire,
    /// A server asleep at level 1 stopped to free host RAM for another sleeper (`evict`).
    Evict,
}

impl ModeAction {
    /// The action's name, as written in the parentheses above.
    pub fn as_str(self) -> &'static str {
        match self {
            ModeAction::Serve => "serve",
            ModeAction::Switch => "switch",
            ModeAction::Switched => "switched",
            ModeAction::SwitchFailed => "switch_failed",
            ModeAction::Restored => "restored",
            ModeAction::RestoreFailed => "restore_failed",
            ModeAction::KeptWarm => "kept_warm",
            ModeAction::Fallback => "fallback",
            ModeAction::Retire => "retire",
            ModeAction::Evict => "evict",
        }
    }
}

/// What the lane a GPU is given to is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneState {
    /// Serving (`serving`).
    Serving,
    /// Its server is down after a failed switch and a failed restore (`down`).
    Down,
    /// Its server is being started again (`restarting`).
    Restarting,
    /// Finishing its batch, then switching to the lane named (`switching to LANE`).
    SwitchingTo(String),
}

impl std::fmt::Display for LaneState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaneState::Serving => f.write_str("serving"),
            LaneState::Down => f.write_str("down"),
            LaneState::Restarting => f.write_str("restarting"),
            LaneState::SwitchingTo(lane) => write!(f, "switching to {lane}"),
        }
    }
}

/// A [`Reporter`] that only logs (through `tracing`).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogOnly;

impl Reporter for LogOnly {
    fn decision(&self, _gpu: u32, _action: ModeAction, _reason: &str) {}
    fn mode(&self, _gpu: u32, _mode: &str, _state: &LaneState) {}
}

/// One lane the GPUs may serve: a mode of gpu-alloc's catalogue.
pub struct ModeLane {
    /// Its queue (the mode's name).
    pub queue: String,
    /// Its server and feeder gate on each GPU, in the order of [`ModesConfig::gpus`].
    pub instances: Vec<Instance>,
    /// GPU-unavailable seconds of a switch to it.
    pub swap_in_s: f64,
    /// GPU-seconds per job (where the backlog does not say).
    pub job_s: f64,
    /// Jobs per batch.
    pub batch_size: usize,
    /// Work for this lane that waits outside its queue (requests held by a gateway while the
    /// lane is parked): counted as pending jobs, its oldest wait as the lane's oldest.
    pub demand: Option<Arc<dyn Demand>>,
    /// How long the lane should stay served (a model kept warm after its last request): its
    /// last GPU is not switched away meanwhile, unless another lane would starve.
    pub keep_warm: Option<Arc<dyn KeepWarm>>,
    /// Whether its server sleeps when stopped, and what waking costs: with the policy's
    /// `sleep` on, a lane left on a GPU counts as asleep there at level 1 when it can sleep,
    /// and the allocator plans a switch back to it as a wake.
    pub sleep: SleepSpec,
}

/// A lane on one GPU: its server there and the gate of the feeder lane that sends it batches.
#[derive(Clone)]
pub struct Instance {
    /// Open while the GPU serves the lane.
    pub gate: Arc<dyn Gate>,
    /// Started when the GPU comes to the lane, stopped when it leaves.
    pub server: Arc<dyn ModeServer>,
}

/// How the allocator loop runs.
#[derive(Debug, Clone)]
pub struct ModesConfig {
    /// The GPUs the lanes share (their indices, as the reports name them).
    pub gpus: Vec<u32>,
    /// gpu-alloc's allocator settings.
    pub policy: AllocatorConfig,
    /// After a lane's server failed to start on a GPU, how long before it is tried there again
    /// (doubling on each further failure, at most 10 minutes).
    pub retry_after_failure: Duration,
    /// How long before the start the initial lanes were loaded, seconds (0: just now, so the
    /// minimum dwell time applies from the start).
    pub initial_mode_age_s: f64,
    /// Where the measured swap costs are kept across restarts: read at start (the allocator
    /// plans with them from its first tick), each swap measured recorded there. `None`: they
    /// live as long as the executor.
    pub costs: Option<Arc<CostStore>>,
    /// Host RAM the servers put to sleep at level 1 may hold (their weights: a lane's
    /// `sleep.host_mb`), shared with whoever else puts servers to sleep on this machine (the
    /// model pool): the lanes hold what they hold under the owner [`HOST_OWNER`]; `None`: no
    /// limit. The oldest level-1 sleepers are stopped to make room for a new one; one that
    /// does not fit even then sleeps at level 2.
    pub host_ram: Option<Arc<HostRam>>,
}

/// A lane set the executor cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModesError {
    /// No GPU or no lane.
    #[error("the executor needs at least one GPU and one lane")]
    Empty,
    /// A lane's instances do not match the GPUs.
    #[error("lane `{lane}` has {instances} instance(s) for {gpus} GPU(s)")]
    Instances {
        /// The lane.
        lane: String,
        /// Its instances.
        instances: usize,
        /// The GPUs.
        gpus: usize,
    },
    /// The initial assignment does not give each GPU one known lane.
    #[error("the initial assignment {0:?} must name one lane (by index) per GPU")]
    Initial(Vec<usize>),
    /// Two lanes share a name.
    #[error("two lanes are named `{0}`")]
    Duplicate(String),
}

/// The allocator loop over `lanes`: GPU `config.gpus[k]` serves `lanes[initial[k]]` at start
/// (that instance's server started and its gate open; every other instance's gate closed and
/// its server stopped). Runs until `stop` says so (or its sender is dropped); switches in
/// progress finish their step first. The servers are left as they are: stop them afterwards.
///
/// # Panics
///
/// Outside a tokio runtime (like `tokio::spawn`).
pub fn spawn(
    config: ModesConfig,
    lanes: Vec<ModeLane>,
    initial: Vec<usize>,
    backlog: Arc<dyn Backlog>,
    reporter: Arc<dyn Reporter>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<JoinHandle<()>, ModesError> {
    let metrics = Arc::new(SwapMetrics::default());
    spawn_with_metrics(config, lanes, initial, backlog, reporter, metrics, stop)
}

/// [`spawn`], each swap carried out (its kind and seconds) counted in `metrics`, for a
/// `/metrics` page ([`SwapMetrics::render`]).
///
/// # Panics
///
/// Outside a tokio runtime (like `tokio::spawn`).
pub fn spawn_with_metrics(
    config: ModesConfig,
    lanes: Vec<ModeLane>,
    initial: Vec<usize>,
    backlog: Arc<dyn Backlog>,
    reporter: Arc<dyn Reporter>,
    metrics: Arc<SwapMetrics>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<JoinHandle<()>, ModesError> {
    check(&config, &lanes, &initial)?;
    Ok(tokio::spawn(executor::run(
        config,
        lanes,
        initial,
        backlog,
        executor::Report { reporter, metrics },
        stop,
    )))
}

fn check(config: &ModesConfig, lanes: &[ModeLane], initial: &[usize]) -> Result<(), ModesError> {
    if config.gpus.is_empty() || lanes.is_empty() {
        return Err(ModesError::Empty);
    }
    for (i, l) in lanes.iter().enumerate() {
        if l.instances.len() != config.gpus.len() {
            return Err(ModesError::Instances {
                lane: l.queue.clone(),
                instances: l.instances.len(),
                gpus: config.gpus.len(),
            });
        }
        if lanes[..i].iter().any(|o| o.queue == l.queue) {
            return Err(ModesError::Duplicate(l.queue.clone()));
        }
    }
    if initial.len() != config.gpus.len() || initial.iter().any(|&i| i >= lanes.len()) {
        return Err(ModesError::Initial(initial.to_vec()));
    }
    Ok(())
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
