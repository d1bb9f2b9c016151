//! Replays a job trace through the executor in virtual time: the same [`spawn`](crate::spawn)
//! and gpu-alloc [`Allocator`](horos_gpu_alloc::allocator::Allocator) that run in production,
//! with the servers and the feeder simulated as gpu-alloc's simulator models them (a switch
//! drains the running batch, then the GPU is unavailable for the target's `swap_in_s`; a GPU
//! claims up to `batch_size` jobs of its lane, FIFO, runs them for the sum of their service
//! times, then pauses as the thermal policy says). Comparing [`replay`] with
//! [`simulate`](horos_gpu_alloc::simulator::simulate) on the same trace shows what the
//! executor's own timing (ticks, drains, the order of events at one instant) costs.
//!
//! Time is tokio's paused clock: a three-hour trace replays in about a second, and the same
//! trace always gives the same report. Temperatures are not simulated: a
//! temperature-following pause is taken as at an unknown temperature.
//!
//! With [`SimConfig::sleep`] the simulated servers sleep as the simulator's do: a server
//! stopped is put to sleep as gpu-alloc's
//! [`choose_outgoing`](horos_gpu_alloc::allocator::choose_outgoing) decides (level 1 within
//! [`SimConfig::host_memory_mb`], the oldest level-1 sleepers demoted to level 2 to make
//! room), and a server started again on the GPU where it sleeps wakes at its wake cost. The
//! executor sees only `stop` and `start` through the `ModeServer` seam: it takes every lane it
//! left (that can sleep) as asleep at level 1, where the simulator knows the level, so with
//! sleep on its decisions may differ from the simulator's.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use horos_gpu_alloc::allocator::{AllocatorConfig, Outgoing, Sleepers, SwapCosts, SwapKind};
use horos_gpu_alloc::catalogue::Catalogue;
use horos_gpu_alloc::simulator::{SimConfig, Trace};
use horos_server_control::{ControlError, Gate, ModeServer, SleepLevel};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::{
    Backlog, BacklogError, Instance, LaneState, ModeAction, ModeLane, ModesConfig, ModesError,
    Pending, Reporter,
};

/// A switch the executor decided, as the replay saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySwitch {
    /// Virtual time of the decision, seconds from the start of the trace.
    pub t_s: f64,
    /// The GPU.
    pub gpu: u32,
    /// The lane it leaves.
    pub from: String,
    /// The lane it goes to.
    pub to: String,
}

/// What a replay measured (the fields mean what gpu-alloc's `SimReport` fields mean).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Trace name.
    pub trace: String,
    /// GPUs.
    pub gpus: usize,
    /// Time the last job completed, seconds.
    pub makespan_s: f64,
    /// GPU-seconds spent running batches.
    pub busy_s: f64,
    /// GPU-seconds spent swapping (up to the makespan).
    pub swap_s: f64,
    /// Swaps started.
    pub swaps: usize,
    /// Longest wait (batch start − arrival) per class, seconds.
    pub max_wait_s: BTreeMap<String, f64>,
    /// Every switch decided, in order.
    pub switches: Vec<ReplaySwitch>,
    /// Servers put to sleep.
    pub sleeps: usize,
    /// Servers woken (a start where the server slept).
    pub wakes: usize,
    /// Level-1 sleepers demoted to level 2 for host RAM.
    pub evictions: usize,
    /// Most host RAM level-1 sleepers held at once, MB.
    pub host_peak_mb: u64,
}

impl ReplayReport {
    /// Swap time over GPUs × makespan.
    pub fn swap_share(&self) -> f64 {
        let span = self.gpus as f64 * self.makespan_s;
        if span > 0.0 { self.swap_s / span } else { 0.0 }
    }
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The catalogue is invalid or has no GPU.
    #[error("invalid catalogue: {0}")]
    Catalogue(String),
    /// A job's class is not in the catalogue.
    #[error("job class {0:?} is not in the catalogue")]
    UnknownClass(String),
    /// The executor refused the lanes.
    #[error(transparent)]
    Modes(#[from] ModesError),
    /// The virtual-time runtime could not be built.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// Jobs were still pending at `max_time_s`.
    #[error("stalled: {pending} jobs still pending at t={time_s} s")]
    Stalled {
        /// Jobs not completed.
        pending: usize,
        /// Virtual time reached.
        time_s: f64,
    },
}

/// Replays `trace` on the fleet of `catalogue.initial` (one GPU per entry, serving that mode at
/// the start) through the executor with `policy`; `sim` gives the pause after each batch, how
/// long before the start the initial modes were loaded, and when to give up. Blocks the
/// calling thread (it runs its own runtime; do not call it from async code).
pub fn replay(
    trace: &Trace,
    catalogue: &Catalogue,
    sim: &SimConfig,
    policy: AllocatorConfig,
) -> Result<ReplayReport, ReplayError> {
    catalogue
        .validate()
        .map_err(|e| ReplayError::Catalogue(e.to_string()))?;
    if catalogue.initial.is_empty() {
        return Err(ReplayError::Catalogue(
            "no GPU in the initial assignment".into(),
        ));
    }
    let mut jobs = Vec::with_capacity(trace.jobs.len());
    for j in &trace.jobs {
        let m = catalogue
            .get(&j.class)
            .ok_or_else(|| ReplayError::UnknownClass(j.class.clone()))?;
        jobs.push(Arrival {
            at_s: j.arrival_s,
            class: j.class.clone(),
            service_s: m.service_time_s(j.size),
        });
    }
    jobs.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    runtime.block_on(run(trace, catalogue, sim, policy, jobs))
}

struct Arrival {
    at_s: f64,
    class: String,
    service_s: f64,
}

/// A job waiting in its lane.
struct Queued {
    arrival_s: f64,
    service_s: f64,
}

/// The simulated floor: queues and what was measured.
#[derive(Default)]
struct Floor {
    queues: BTreeMap<String, VecDeque<Queued>>,
    pending_work_s: BTreeMap<String, f64>,
    arrived_work_s: BTreeMap<String, f64>,
    max_wait_s: BTreeMap<String, f64>,
    done: usize,
    last_done_s: f64,
    busy_s: f64,
    /// Swaps as (start, duration).
    swaps: Vec<(f64, f64)>,
    /// Servers put to sleep as (start, duration): swap time, not swaps of their own.
    sleeping: Vec<(f64, f64)>,
    switches: Vec<ReplaySwitch>,
    /// Servers asleep and the host RAM they hold.
    sleepers: Sleepers,
    wakes: usize,
}

/// What every simulated part shares.
struct Shared {
    floor: Mutex<Floor>,
    start: Instant,
    /// Wakes the floor task: a gate opened.
    wake: Notify,
}

impl Shared {
    fn floor(&self) -> MutexGuard<'_, Floor> {
        self.floor.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

/// A feeder lane's gate on one GPU; the batch's end is known exactly.
struct SimGate {
    open: AtomicBool,
    /// The running batch: its jobs and when it ends.
    batch: Mutex<Option<(usize, Instant)>>,
    /// When the pause after the last batch ends.
    paused_until: Mutex<Option<Instant>>,
    idle: Notify,
    shared: Arc<Shared>,
}

impl SimGate {
    fn batch(&self) -> MutexGuard<'_, Option<(usize, Instant)>> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn paused_until(&self) -> MutexGuard<'_, Option<Instant>> {
        self.paused_until.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Gate for SimGate {
    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
    fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
    }
    fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
    fn is_busy(&self) -> bool {
        self.batch().is_some()
    }
    async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !self.is_busy() {
                return;
            }
            idle.await;
        }
    }
    fn batch_remaining_s(&self) -> Option<f64> {
        self.batch()
            .map(|(_, end)| end.saturating_duration_since(Instant::now()).as_secs_f64())
    }
}

/// A lane's server on one GPU: loading takes the lane's `swap_in_s`; with sleep on, stopping
/// puts it to sleep and a start where it sleeps is a wake.
struct SimServer {
    mode: String,
    gpu: u32,
    swap_in_s: f64,
    catalogue: Arc<Catalogue>,
    sleep: bool,
    shared: Arc<Shared>,
}

impl SimServer {
    /// Puts the server to sleep if [`Sleepers::retire`] says so; the seconds it takes.
    fn fall_asleep(&self, f: &mut Floor, now: f64) -> f64 {
        let costs = SwapCosts::new();
        let retired = f
            .sleepers
            .retire(&self.catalogue, &costs, &self.mode, self.gpu, now);
        let Outgoing::Sleep(level) = retired.choice.choice else {
            return 0.0;
        };
        let d = SwapCosts::prior(&self.catalogue, &self.mode, SwapKind::Sleep(level));
        f.sleeping.push((now, d));
        d
    }
}

#[async_trait]
impl ModeServer for SimServer {
    async fn start(&self) -> Result<(), ControlError> {
        let now = self.shared.now_s();
        let d = {
            let mut f = self.shared.floor();
            let d = match f.sleepers.wake(&self.mode, self.gpu) {
                Some(level) => {
                    f.wakes += 1;
                    SwapCosts::prior(&self.catalogue, &self.mode, SwapKind::Wake(level))
                }
                None => self.swap_in_s,
            };
            f.swaps.push((now, d));
            d
        };
        tokio::time::sleep(Duration::from_secs_f64(d.max(0.0))).await;
        Ok(())
    }
    async fn stop(&self) -> Result<(), ControlError> {
        if !self.sleep {
            return Ok(());
        }
        let now = self.shared.now_s();
        let d = self.fall_asleep(&mut self.shared.floor(), now);
        if d > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(d)).await;
        }
        Ok(())
    }
    /// With sleep on: the executor asks for a sleep, which [`Sleepers::retire`] carries out
    /// (the level, or a stop, its choice), as a stop does.
    fn can_sleep(&self) -> bool {
        self.sleep
    }
    async fn sleep(&self, _level: SleepLevel) -> Result<(), ControlError> {
        self.stop().await
    }
    /// A wake where it sleeps, a load where [`Sleepers::retire`] had stopped it.
    async fn wake(&self) -> Result<(), ControlError> {
        self.start().await
    }
}

/// The queues as the executor reads them, with exact work and arrivals.
struct FloorBacklog(Arc<Shared>);

#[async_trait]
impl Backlog for FloorBacklog {
    async fn pending(&self, queue: &str) -> Result<Pending, BacklogError> {
        let now = self.0.now_s();
        let f = self.0.floor();
        let q = f.queues.get(queue);
        Ok(Pending {
            jobs: q.map_or(0, |q| q.len() as u64),
            work_s: Some(f.pending_work_s.get(queue).copied().unwrap_or(0.0)),
            oldest_wait_s: q
                .and_then(|q| q.front())
                .map_or(0.0, |j| (now - j.arrival_s).max(0.0)),
            arrived_work_s_total: Some(f.arrived_work_s.get(queue).copied().unwrap_or(0.0)),
        })
    }
}

/// Records the switches decided.
struct SwitchLog(Arc<Shared>);

impl Reporter for SwitchLog {
    fn decision(&self, _gpu: u32, _action: ModeAction, _reason: &str) {}
    fn mode(&self, gpu: u32, mode: &str, state: &LaneState) {
        if let LaneState::SwitchingTo(to) = state {
            let t_s = self.0.now_s();
            self.0.floor().switches.push(ReplaySwitch {
                t_s,
                gpu,
                from: mode.to_owned(),
                to: to.clone(),
            });
        }
    }
}

async fn run(
    trace: &Trace,
    catalogue: &Catalogue,
    sim: &SimConfig,
    policy: AllocatorConfig,
    jobs: Vec<Arrival>,
) -> Result<ReplayReport, ReplayError> {
    let shared = Arc::new(Shared {
        floor: Mutex::new(Floor {
            sleepers: Sleepers::new(sim.host_memory_mb),
            ..Floor::default()
        }),
        start: Instant::now(),
        wake: Notify::new(),
    });
    let gpus = catalogue.initial.len();
    let shared_catalogue = Arc::new(catalogue.clone());
    let mut lanes = Vec::new();
    // gates[k]: GPU k's instance of each lane, in catalogue order.
    let mut gates: Vec<Vec<(String, usize, Arc<SimGate>)>> = vec![Vec::new(); gpus];
    for m in &catalogue.modes {
        let (sum, n) = jobs
            .iter()
            .filter(|j| j.class == m.name)
            .fold((0.0, 0usize), |(s, n), j| (s + j.service_s, n + 1));
        let job_s = if n > 0 {
            sum / n as f64
        } else {
            m.service_time_s(1.0)
        };
        let mut instances = Vec::new();
        for (k, on_gpu) in gates.iter_mut().enumerate() {
            let gate = Arc::new(SimGate {
                open: AtomicBool::new(catalogue.initial[k] == m.name),
                batch: Mutex::new(None),
                paused_until: Mutex::new(None),
                idle: Notify::new(),
                shared: Arc::clone(&shared),
            });
            on_gpu.push((m.name.clone(), m.batch_size.max(1), Arc::clone(&gate)));
            instances.push(Instance {
                gate,
                server: Arc::new(SimServer {
                    mode: m.name.clone(),
                    gpu: k as u32,
                    swap_in_s: m.swap_in_s,
                    catalogue: Arc::clone(&shared_catalogue),
                    sleep: sim.sleep,
                    shared: Arc::clone(&shared),
                }),
            });
        }
        lanes.push(ModeLane {
            queue: m.name.clone(),
            instances,
            swap_in_s: m.swap_in_s,
            job_s,
            batch_size: m.batch_size,
            demand: None,
            keep_warm: None,
            sleep: m.sleep.clone(),
        });
    }
    let initial: Vec<usize> = catalogue
        .initial
        .iter()
        .filter_map(|name| catalogue.modes.iter().position(|m| &m.name == name))
        .collect();
    let (stop, stopped) = watch::channel(false);
    let executor = crate::spawn(
        ModesConfig {
            gpus: (0..gpus as u32).collect(),
            policy,
            retry_after_failure: Duration::from_secs(30),
            initial_mode_age_s: sim.initial_mode_age_s,
            costs: None,
            host_ram: None,
        },
        lanes,
        initial,
        Arc::new(FloorBacklog(Arc::clone(&shared))),
        Arc::new(SwitchLog(Arc::clone(&shared))),
        stopped,
    )?;
    let pause = Duration::from_secs_f64(sim.thermal.pause_after_batch(None).max(0.0));
    let limit = Duration::from_secs_f64(sim.max_time_s.clamp(0.0, 1e9));
    let total = jobs.len();
    let finished = tokio::time::timeout(limit, work(&shared, &gates, jobs, pause))
        .await
        .is_ok();
    let _ = stop.send(true);
    let _ = executor.await;
    let f = shared.floor();
    if !finished || f.done < total {
        return Err(ReplayError::Stalled {
            pending: total - f.done,
            time_s: shared.now_s(),
        });
    }
    let makespan = f.last_done_s;
    Ok(ReplayReport {
        trace: trace.name.clone(),
        gpus,
        makespan_s: makespan,
        busy_s: f.busy_s,
        swap_s: f
            .swaps
            .iter()
            .chain(&f.sleeping)
            .map(|&(at, d)| (at + d).min(makespan) - at)
            .filter(|s| *s > 0.0)
            .sum(),
        swaps: f.swaps.len(),
        max_wait_s: f.max_wait_s.clone(),
        switches: f.switches.clone(),
        sleeps: f.sleeping.len(),
        wakes: f.wakes,
        evictions: f.sleepers.evictions(),
        host_peak_mb: f.sleepers.peak_mb(),
    })
}

/// The feeders and the arrivals, as one task so that events at one instant always happen in
/// the simulator's order: arrivals, batch ends, the executor's tick (it yields once, this task
/// twice), new batches in GPU order. Returns when every job is done.
async fn work(
    shared: &Shared,
    gates: &[Vec<(String, usize, Arc<SimGate>)>],
    jobs: Vec<Arrival>,
    pause: Duration,
) {
    let total = jobs.len();
    let mut jobs = jobs.into_iter().peekable();
    loop {
        let now = Instant::now();
        let now_s = shared.now_s();
        while let Some(j) = jobs.next_if(|j| j.at_s <= now_s + 1e-9) {
            let mut f = shared.floor();
            *f.pending_work_s.entry(j.class.clone()).or_default() += j.service_s;
            *f.arrived_work_s.entry(j.class.clone()).or_default() += j.service_s;
            f.queues.entry(j.class).or_default().push_back(Queued {
                arrival_s: j.at_s,
                service_s: j.service_s,
            });
        }
        for (_, _, gate) in gates.iter().flatten() {
            let ended = gate.batch().take_if(|(_, end)| *end <= now);
            if let Some((n, _)) = ended {
                let mut f = shared.floor();
                f.done += n;
                f.last_done_s = now_s;
                *gate.paused_until() = Some(now + pause);
                gate.idle.notify_waiters();
            }
        }
        if shared.floor().done >= total {
            return;
        }
        // The executor's tick at this instant (and the switches it starts) come first.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        for (class, batch, gate) in gates.iter().flatten() {
            let pausing = gate.paused_until().is_some_and(|t| t > now);
            if gate.is_open()
                && !gate.is_busy()
                && !pausing
                && let Some((n, service_s)) = claim(shared, class, *batch)
            {
                *gate.batch() = Some((n, now + Duration::from_secs_f64(service_s)));
            }
        }
        let next_arrival = jobs
            .peek()
            .map(|j| shared.start + Duration::from_secs_f64(j.at_s.max(0.0)));
        let next = gates
            .iter()
            .flatten()
            .flat_map(|(_, _, g)| [g.batch().map(|(_, end)| end), *g.paused_until()])
            .flatten()
            .filter(|t| *t > now)
            .chain(next_arrival)
            .min();
        match next {
            Some(at) => {
                let _ = tokio::time::timeout_at(at, shared.wake.notified()).await;
            }
            None => shared.wake.notified().await,
        }
    }
}

/// Takes up to `batch` jobs of `class` off its queue: how many, and their service time.
fn claim(shared: &Shared, class: &str, batch: usize) -> Option<(usize, f64)> {
    let now = shared.now_s();
    let mut f = shared.floor();
    let q = f.queues.get_mut(class)?;
    let mut waits = Vec::new();
    let mut service_s = 0.0;
    while waits.len() < batch {
        let Some(j) = q.pop_front() else { break };
        service_s += j.service_s;
        waits.push(now - j.arrival_s);
    }
    if waits.is_empty() {
        return None;
    }
    let longest = waits.iter().copied().fold(0.0, f64::max);
    let w = f.max_wait_s.entry(class.to_owned()).or_default();
    *w = w.max(longest);
    if let Some(p) = f.pending_work_s.get_mut(class) {
        *p = (*p - service_s).max(0.0);
    }
    f.busy_s += service_s;
    Some((waits.len(), service_s))
}
