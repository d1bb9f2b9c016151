//! A mode executor: which of several lanes a shared GPU serves. gpu-alloc's
//! [`Allocator`] decides at each tick from the lanes' queues; this crate carries its switches
//! out — close the leaving lane's [`Gate`], wait for its batch in progress (never a switch
//! mid-batch), stop its server, start the other one, open its gate — and reports every switch,
//! with its reason, to a [`Reporter`] (logs, a status page).
//!
//! It needs neither a feeder nor a server implementation: a lane's gate is a
//! [`horos_server_control::Gate`] (the feeder's `LaneGate` is one), its server a
//! [`horos_server_control::ModeServer`] (a `horos-servers` supervisor handle is one).
//!
//! A server that fails to start is not tried again before its back-off ([`Backoff`], doubling
//! from [`ModesConfig::retry_after_failure`] up to 10 minutes); the lane that was served is
//! started again meanwhile.
//!
//! See the README for an example.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use horos_gpu_alloc::allocator::{
    Action, Allocator, AllocatorConfig, GpuState, GpuView, Policy, QueueStat, TickInput,
};
use horos_gpu_alloc::catalogue::{Catalogue, ModeSpec};
use horos_server_control::{Backoff, ControlError, Gate, ModeServer};
use squeueha::Queue;
use tokio::task::JoinHandle;

/// Where the executor reports what it decides and what the GPU serves (a decision log and a
/// status board, say). Every decision is logged with `tracing` too.
pub trait Reporter: Send + Sync {
    /// A decision on GPU `gpu`, and why.
    fn decision(&self, gpu: u32, action: ModeAction, reason: &str);
    /// What GPU `gpu` serves now: the lane (`mode`) and its state.
    fn mode(&self, gpu: u32, mode: &str, state: &LaneState);
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

/// One lane the GPU may serve.
pub struct ModeLane {
    /// Its queue (the mode's name).
    pub queue: String,
    /// Its feeder gate.
    pub gate: Arc<dyn Gate>,
    /// Its server.
    pub server: Arc<dyn ModeServer>,
    /// GPU-unavailable seconds of a switch to it.
    pub swap_in_s: f64,
    /// GPU-seconds per job.
    pub job_s: f64,
    /// Jobs per batch.
    pub batch_size: usize,
    /// Work for this lane that waits outside its queue (requests held by a gateway while the
    /// lane is parked): counted as pending jobs, its oldest wait as the lane's oldest.
    pub demand: Option<Arc<dyn Demand>>,
}

/// Work for a lane that waits outside its queue.
pub trait Demand: Send + Sync {
    /// Requests waiting now, and how long the oldest has waited, seconds.
    fn waiting(&self) -> (usize, f64);
}

/// The reporter with the logging the executor adds.
struct Report(Arc<dyn Reporter>);

impl Report {
    fn decision(&self, gpu: u32, action: ModeAction, reason: String) {
        tracing::info!(gpu, action = action.as_str(), %reason, "allocator");
        self.0.decision(gpu, action, &reason);
    }

    fn mode(&self, gpu: u32, mode: &str, state: LaneState) {
        self.0.mode(gpu, mode, &state);
    }
}

/// How the allocator loop runs.
#[derive(Debug, Clone)]
pub struct ModesConfig {
    /// The GPU the lanes share (its index, for the reports).
    pub gpu: u32,
    /// gpu-alloc's allocator settings.
    pub policy: AllocatorConfig,
    /// After a lane's server failed to start, how long before it is tried again (doubling on
    /// each further failure, at most 10 minutes).
    pub retry_after_failure: Duration,
}

/// The allocator loop over `lanes`, `lanes[active]` serving at start (its server started, its
/// gate open; every other gate closed, its server stopped). Runs until `stop` says so (or its
/// sender is dropped); a switch in progress finishes its step first. The lanes' servers are
/// left as they are: stop them afterwards.
///
/// # Panics
///
/// Outside a tokio runtime (like `tokio::spawn`).
pub fn spawn(
    config: ModesConfig,
    lanes: Vec<ModeLane>,
    active: usize,
    queue: Queue,
    reporter: Arc<dyn Reporter>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(run(config, lanes, active, queue, Report(reporter), stop))
}

/// Work on the GPU's servers in progress: a switch to lane `to`, or the restart of the lane
/// being served (`restore`) after a failed switch.
struct Switch {
    to: usize,
    restore: bool,
    started: Instant,
    task: JoinHandle<Result<(), ControlError>>,
}

/// The longest wait before a lane whose server failed to start is tried again.
const RETRY_MAX: Duration = Duration::from_secs(600);

/// When a lane may be tried again after failed starts (switch target or restart), and the wait
/// after the next failure: it doubles on each failure, up to [`RETRY_MAX`].
#[derive(Clone)]
struct Retry {
    at_s: f64,
    backoff: Backoff,
}

impl Retry {
    fn new(first: Duration) -> Retry {
        Retry {
            at_s: 0.0,
            backoff: Backoff::new(first, RETRY_MAX),
        }
    }

    fn failed(&mut self, now_s: f64) {
        self.at_s = now_s + self.backoff.next_delay().as_secs_f64();
    }
}

async fn run(
    config: ModesConfig,
    lanes: Vec<ModeLane>,
    mut active: usize,
    queue: Queue,
    report: Report,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let ModesConfig {
        gpu,
        policy,
        retry_after_failure,
    } = config;
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
    let mut retry: Vec<Retry> = vec![Retry::new(retry_after_failure); lanes.len()];
    // Jobs seen waiting per lane at the previous tick: increases are arrivals.
    let mut last_pending: BTreeMap<String, u64> = BTreeMap::new();
    let mut arrived_s: BTreeMap<String, f64> = BTreeMap::new();
    report.decision(
        gpu,
        ModeAction::Serve,
        format!(
            "{} at start (first lane in the configuration)",
            lanes[active].queue
        ),
    );
    report.mode(gpu, &lanes[active].queue, LaneState::Serving);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            changed = stop.changed() => if changed.is_err() {
                break; // nobody can ask to stop any more: stop now rather than spin
            },
        }
        if *stop.borrow() {
            break;
        }
        let now_s = start.elapsed().as_secs_f64();
        if let Some(s) = switch.take_if(|s| s.task.is_finished()) {
            let from = active;
            let outcome = match s.task.await {
                Ok(r) => r,
                Err(e) => Err(ControlError::other(e)),
            };
            match (outcome, s.restore) {
                (Ok(()), false) => {
                    active = s.to;
                    mode_since_s = now_s;
                    retry[s.to] = Retry::new(retry_after_failure);
                    report.mode(gpu, &lanes[active].queue, LaneState::Serving);
                    report.decision(
                        gpu,
                        ModeAction::Switched,
                        format!(
                            "{} -> {} in {:.1} s",
                            lanes[from].queue,
                            lanes[s.to].queue,
                            s.started.elapsed().as_secs_f64()
                        ),
                    );
                }
                (Ok(()), true) => {
                    retry[active] = Retry::new(retry_after_failure);
                    report.mode(gpu, &lanes[active].queue, LaneState::Serving);
                    report.decision(
                        gpu,
                        ModeAction::Restored,
                        format!("{} is serving again", lanes[active].queue),
                    );
                }
                (Err(e), false) => {
                    // The new server did not come up: not again before its retry time (or the
                    // same switch would be chosen and fail every tick), and the old lane's model
                    // is loaded again, so the dwell time starts over.
                    retry[s.to].failed(now_s);
                    mode_since_s = now_s;
                    report.decision(
                        gpu,
                        ModeAction::SwitchFailed,
                        format!(
                            "{} -> {}: {e}; not retried before {:.0} s",
                            lanes[from].queue,
                            lanes[s.to].queue,
                            retry[s.to].at_s - now_s
                        ),
                    );
                    switch = Some(restore(&lanes, active, &report, gpu));
                }
                (Err(e), true) => {
                    retry[active].failed(now_s);
                    report.mode(gpu, &lanes[active].queue, LaneState::Down);
                    report.decision(
                        gpu,
                        ModeAction::RestoreFailed,
                        format!(
                            "{}: {e}; retried in {:.0} s",
                            lanes[active].queue,
                            retry[active].at_s - now_s
                        ),
                    );
                }
            }
        }
        // The lane served is down (its restart failed): try again when its retry time comes.
        if switch.is_none() && !lanes[active].gate.is_open() && now_s >= retry[active].at_s {
            switch = Some(restore(&lanes, active, &report, gpu));
        }
        let mut queues = BTreeMap::new();
        for lane in lanes.iter() {
            let q = queue.clone();
            let name = lane.queue.clone();
            let stats = match tokio::task::spawn_blocking(move || q.stats(&name)).await {
                Ok(Ok(s)) => s,
                _ => continue,
            };
            let (outside, outside_wait_s) = lane.demand.as_ref().map_or((0, 0.0), |d| d.waiting());
            let pending = stats.ready + outside as u64;
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
                    oldest_wait_s: (stats.oldest_ready_age_ms.unwrap_or(0).max(0) as f64 / 1000.0)
                        .max(outside_wait_s),
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
            if to == active || now_s < retry[to].at_s {
                continue;
            }
            let reason = serde_json::to_string(&d.reason).unwrap_or_default();
            report.decision(
                gpu,
                ModeAction::Switch,
                format!("{} -> {}: {reason}", lanes[active].queue, lanes[to].queue),
            );
            report.mode(
                gpu,
                &lanes[active].queue,
                LaneState::SwitchingTo(lanes[to].queue.clone()),
            );
            let l = Arc::clone(&lanes);
            let from = active;
            switch = Some(Switch {
                to,
                restore: false,
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
async fn carry_out(from: &ModeLane, to: &ModeLane) -> Result<(), ControlError> {
    from.gate.close();
    from.gate.wait_idle().await;
    from.server.stop().await?;
    bring_up(to).await
}

/// Starts the server of `lanes[active]` again and opens its gate, in the background.
fn restore(lanes: &Arc<Vec<ModeLane>>, active: usize, report: &Report, gpu: u32) -> Switch {
    report.mode(gpu, &lanes[active].queue, LaneState::Restarting);
    let l = Arc::clone(lanes);
    Switch {
        to: active,
        restore: true,
        started: Instant::now(),
        task: tokio::spawn(async move { bring_up(&l[active]).await }),
    }
}

async fn bring_up(lane: &ModeLane) -> Result<(), ControlError> {
    lane.server.start().await?;
    lane.gate.open();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

    /// A feeder lane's gate, without a feeder: no batch ever runs.
    struct LaneGate(AtomicBool);

    impl LaneGate {
        fn new(open: bool) -> Self {
            LaneGate(AtomicBool::new(open))
        }
    }

    #[async_trait::async_trait]
    impl Gate for LaneGate {
        fn open(&self) {
            self.0.store(true, SeqCst)
        }
        fn close(&self) {
            self.0.store(false, SeqCst)
        }
        fn is_open(&self) -> bool {
            self.0.load(SeqCst)
        }
        fn is_busy(&self) -> bool {
            false
        }
        async fn wait_idle(&self) {}
    }

    /// What the GPU serves, as a status page shows it.
    struct Entry {
        mode: String,
        state: String,
    }

    #[derive(Clone, Default)]
    struct ModeBoard(Arc<Mutex<Option<(String, String)>>>);

    impl ModeBoard {
        fn read(&self) -> Vec<Entry> {
            let shown = self.0.lock().unwrap().clone();
            shown
                .map(|(mode, state)| Entry { mode, state })
                .into_iter()
                .collect()
        }
    }

    impl Reporter for ModeBoard {
        fn decision(&self, _gpu: u32, _action: ModeAction, _reason: &str) {}
        fn mode(&self, _gpu: u32, mode: &str, state: &LaneState) {
            *self.0.lock().unwrap() = Some((mode.to_owned(), state.to_string()));
        }
    }

    /// A server whose starts fail while `broken` is set; counts its starts.
    #[derive(Default)]
    struct FakeServer {
        starts: AtomicUsize,
        broken: AtomicBool,
    }

    #[async_trait::async_trait]
    impl ModeServer for FakeServer {
        async fn start(&self) -> Result<(), ControlError> {
            self.starts.fetch_add(1, SeqCst);
            if self.broken.load(SeqCst) {
                return Err(ControlError::Config("no such image".into()));
            }
            Ok(())
        }
        async fn stop(&self) -> Result<(), ControlError> {
            Ok(())
        }
    }

    fn lane(queue: &str, server: &Arc<FakeServer>, open: bool) -> ModeLane {
        ModeLane {
            demand: None,
            queue: queue.into(),
            gate: Arc::new(LaneGate::new(open)),
            server: Arc::clone(server) as Arc<dyn ModeServer>,
            swap_in_s: 1.0,
            job_s: 0.5,
            batch_size: 4,
        }
    }

    /// Think serves at start; vision has work, so the allocator wants to switch to it.
    fn start(
        think: &Arc<FakeServer>,
        vision: &Arc<FakeServer>,
        retry_after_failure: Duration,
    ) -> (
        tempfile::TempDir,
        Queue,
        ModeBoard,
        Arc<dyn Gate>,
        tokio::sync::watch::Sender<bool>,
        JoinHandle<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
        for i in 0..20 {
            queue
                .enqueue("vision", squeueha::NewJob::new(format!("page {i}")))
                .unwrap();
        }
        let lanes = vec![lane("think", think, true), lane("vision", vision, false)];
        let think_gate = Arc::clone(&lanes[0].gate);
        let board = ModeBoard::default();
        let policy = AllocatorConfig {
            tick_s: 0.05,
            min_dwell_s: 0.0,
            hysteresis_s: 0.0,
            horizon_s: 60.0,
            max_wait_s: 60.0,
            ..AllocatorConfig::default()
        };
        let report: Arc<dyn Reporter> = Arc::new(board.clone());
        let (stop, rx) = tokio::sync::watch::channel(false);
        let config = ModesConfig {
            gpu: 0,
            policy,
            retry_after_failure,
        };
        let task = spawn(config, lanes, 0, queue.clone(), report, rx);
        (dir, queue, board, think_gate, stop, task)
    }

    async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_switch_that_fails_is_not_tried_again_at_once_and_the_old_lane_serves_again() {
        let think = Arc::new(FakeServer::default());
        let vision = Arc::new(FakeServer::default());
        vision.broken.store(true, SeqCst);
        let (_dir, _queue, board, think_gate, stop, task) =
            start(&think, &vision, Duration::from_secs(30));
        wait_for("no switch to vision was tried", || {
            vision.starts.load(SeqCst) >= 1
        })
        .await;
        wait_for("think did not serve again after the failed switch", || {
            think_gate.is_open() && board.read().first().is_some_and(|m| m.state == "serving")
        })
        .await;
        assert_eq!(board.read()[0].mode, "think");
        // Twenty ticks later: still one try (the retry waits 30 s), not one per tick.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            vision.starts.load(SeqCst),
            1,
            "the failing switch was retried"
        );
        assert_eq!(think.starts.load(SeqCst), 1, "one restore");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_lane_whose_restore_failed_is_restored_later() {
        let think = Arc::new(FakeServer::default());
        let vision = Arc::new(FakeServer::default());
        vision.broken.store(true, SeqCst);
        // The restore after the failed switch fails too (the GPU memory not yet free, say).
        think.broken.store(true, SeqCst);
        let (_dir, queue, board, think_gate, stop, task) =
            start(&think, &vision, Duration::from_millis(300));
        wait_for("think's restore was not tried", || {
            think.starts.load(SeqCst) >= 1
        })
        .await;
        wait_for("a failed restore is not shown", || {
            board.read().first().is_some_and(|m| m.state == "down")
        })
        .await;
        assert!(!think_gate.is_open());
        // The vision work is done elsewhere, so no switch will start think again: only the
        // retry of its restore (0.3 s after the failure) can, now that the cause is gone.
        let jobs = queue
            .poll_batch("vision", 100, Duration::from_secs(60))
            .unwrap();
        for job in jobs {
            queue.ack(job.lease).unwrap();
        }
        think.broken.store(false, SeqCst);
        wait_for("think was never restored", || {
            think_gate.is_open() && board.read()[0].state == "serving"
        })
        .await;
        assert_eq!(vision.starts.load(SeqCst), 1);
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn the_loop_ends_when_nobody_can_stop_it_any_more() {
        let think = Arc::new(FakeServer::default());
        let vision = Arc::new(FakeServer::default());
        let (_dir, _queue, _board, _gate, stop, task) =
            start(&think, &vision, Duration::from_secs(30));
        drop(stop);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the allocator loop runs on with its stop sender gone")
            .unwrap();
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
