//! The executor against fake gates and servers, over a real queue file.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use horos_gpu_alloc::allocator::AllocatorConfig;
use horos_server_control::{ControlError, Gate, ModeServer};
use squeueha::Queue;
use tokio::task::JoinHandle;

use crate::{
    Instance, LaneState, ModeAction, ModeLane, ModesConfig, ModesError, QueueBacklog, Reporter,
    spawn,
};

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

/// Ticks every 50 ms, no dwell time nor hysteresis, a 60 s horizon and wait bound: a switch the
/// work calls for happens within a tick or two.
fn quick_policy() -> AllocatorConfig {
    AllocatorConfig {
        tick_s: 0.05,
        min_dwell_s: 0.0,
        hysteresis_s: 0.0,
        horizon_s: 60.0,
        max_wait_s: 60.0,
        ..AllocatorConfig::default()
    }
}

fn lane(queue: &str, server: &Arc<FakeServer>, open: bool) -> ModeLane {
    lane_on(queue, &[(Arc::clone(server), open)])
}

/// A lane with one instance per GPU: its server there, and whether its gate is open.
fn lane_on(queue: &str, instances: &[(Arc<FakeServer>, bool)]) -> ModeLane {
    ModeLane {
        demand: None,
        keep_warm: None,
        sleep: horos_gpu_alloc::catalogue::SleepSpec::default(),
        queue: queue.into(),
        instances: instances
            .iter()
            .map(|(server, open)| Instance {
                gate: Arc::new(LaneGate::new(*open)),
                server: Arc::clone(server) as Arc<dyn ModeServer>,
            })
            .collect(),
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
    let think_gate = Arc::clone(&lanes[0].instances[0].gate);
    let board = ModeBoard::default();
    let policy = quick_policy();
    let report: Arc<dyn Reporter> = Arc::new(board.clone());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let config = ModesConfig {
        gpus: vec![0],
        policy,
        retry_after_failure,
        initial_mode_age_s: 0.0,
        costs: None,
        host_ram: None,
    };
    let backlog = Arc::new(QueueBacklog(queue.clone()));
    let task = spawn(config, lanes, vec![0], backlog, report, rx).unwrap();
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
    let (_dir, _queue, _board, _gate, stop, task) = start(&think, &vision, Duration::from_secs(30));
    drop(stop);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the allocator loop runs on with its stop sender gone")
        .unwrap();
}

#[tokio::test]
async fn each_gpu_switches_its_own_instances() {
    // Two GPUs serve think; a vision backlog arrives. Every switch starts vision's server on the
    // GPU it is decided for, and stops think's there, never another GPU's.
    let think = [
        Arc::new(FakeServer::default()),
        Arc::new(FakeServer::default()),
    ];
    let vision = [
        Arc::new(FakeServer::default()),
        Arc::new(FakeServer::default()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    for i in 0..40 {
        queue
            .enqueue("vision", squeueha::NewJob::new(format!("page {i}")))
            .unwrap();
    }
    let lanes = vec![
        lane_on(
            "think",
            &[(think[0].clone(), true), (think[1].clone(), true)],
        ),
        lane_on(
            "vision",
            &[(vision[0].clone(), false), (vision[1].clone(), false)],
        ),
    ];
    let gates: Vec<Vec<Arc<dyn Gate>>> = lanes
        .iter()
        .map(|l| l.instances.iter().map(|i| Arc::clone(&i.gate)).collect())
        .collect();
    let policy = quick_policy();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let config = ModesConfig {
        gpus: vec![3, 5],
        policy,
        retry_after_failure: Duration::from_secs(30),
        initial_mode_age_s: 0.0,
        costs: None,
        host_ram: None,
    };
    let task = spawn(
        config,
        lanes,
        vec![0, 0],
        Arc::new(QueueBacklog(queue.clone())),
        Arc::new(ModeBoard::default()),
        rx,
    )
    .unwrap();
    wait_for("no GPU went to vision", || {
        gates[1].iter().any(|g| g.is_open())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for k in 0..2 {
        let to_vision = gates[1][k].is_open();
        assert_eq!(
            vision[k].starts.load(SeqCst),
            usize::from(to_vision),
            "GPU {k}: vision's server started there without a switch there (or not at all)"
        );
        assert_eq!(
            gates[0][k].is_open(),
            !to_vision,
            "GPU {k}: think and vision both (or neither) open"
        );
    }
    stop.send(true).unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn lanes_that_do_not_fit_the_gpus_are_refused() {
    let s = Arc::new(FakeServer::default());
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let dir = tempfile::tempdir().unwrap();
    let backlog = Arc::new(QueueBacklog(
        Queue::open(dir.path().join("jobs.db")).unwrap(),
    ));
    let config = ModesConfig {
        gpus: vec![0, 1],
        policy: AllocatorConfig::default(),
        retry_after_failure: Duration::from_secs(1),
        initial_mode_age_s: 0.0,
        costs: None,
        host_ram: None,
    };
    let err = spawn(
        config.clone(),
        vec![lane("think", &s, true)],
        vec![0, 0],
        backlog.clone(),
        Arc::new(ModeBoard::default()),
        rx.clone(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        ModesError::Instances {
            lane: "think".into(),
            instances: 1,
            gpus: 2
        }
    );
    let two = || lane_on("think", &[(s.clone(), true), (s.clone(), true)]);
    let err = spawn(
        config.clone(),
        vec![two()],
        vec![0, 1],
        backlog.clone(),
        Arc::new(ModeBoard::default()),
        rx.clone(),
    )
    .unwrap_err();
    assert_eq!(err, ModesError::Initial(vec![0, 1]));
    let err = spawn(
        config,
        vec![two(), two()],
        vec![0, 1],
        backlog,
        Arc::new(ModeBoard::default()),
        rx,
    )
    .unwrap_err();
    assert_eq!(err, ModesError::Duplicate("think".into()));
}

/// Every decision, in order.
#[derive(Clone, Default)]
struct Decisions(Arc<Mutex<Vec<(ModeAction, String)>>>);

impl Reporter for Decisions {
    fn decision(&self, _gpu: u32, action: ModeAction, reason: &str) {
        self.0.lock().unwrap().push((action, reason.to_owned()));
    }
    fn mode(&self, _gpu: u32, _mode: &str, _state: &LaneState) {}
}

/// Seconds a lane should stay served, as a test sets them.
struct Warm(Mutex<f64>);

impl crate::KeepWarm for Warm {
    fn warm_for_s(&self) -> f64 {
        *self.0.lock().unwrap()
    }
}

#[tokio::test]
async fn a_lane_kept_warm_keeps_its_last_gpu_until_the_warmth_ends() {
    let think = Arc::new(FakeServer::default());
    let vision = Arc::new(FakeServer::default());
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    for i in 0..20 {
        queue
            .enqueue("vision", squeueha::NewJob::new(format!("page {i}")))
            .unwrap();
    }
    let warm = Arc::new(Warm(Mutex::new(30.0)));
    let mut think_lane = lane("think", &think, true);
    think_lane.keep_warm = Some(warm.clone());
    let lanes = vec![think_lane, lane("vision", &vision, false)];
    let vision_gate = Arc::clone(&lanes[1].instances[0].gate);
    let policy = AllocatorConfig {
        // Far away: only the allocator's gain wants vision, not the starvation bound.
        max_wait_s: 3600.0,
        ..quick_policy()
    };
    let decisions = Decisions::default();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let config = ModesConfig {
        gpus: vec![0],
        policy,
        retry_after_failure: Duration::from_secs(30),
        initial_mode_age_s: 0.0,
        costs: None,
        host_ram: None,
    };
    let backlog = Arc::new(QueueBacklog(queue.clone()));
    let task = spawn(
        config,
        lanes,
        vec![0],
        backlog,
        Arc::new(decisions.clone()),
        rx,
    )
    .unwrap();
    let kept = || {
        decisions
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(a, _)| *a == ModeAction::KeptWarm)
            .count()
    };
    wait_for("a kept_warm decision", || kept() >= 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !vision_gate.is_open(),
        "switched away from a lane kept warm"
    );
    assert_eq!(vision.starts.load(SeqCst), 0);
    assert_eq!(kept(), 1, "one decision per hold, not one per tick");
    // Warmth over: the GPU goes where the work is.
    *warm.0.lock().unwrap() = 0.0;
    wait_for("the switch once the warmth ended", || vision_gate.is_open()).await;
    stop.send(true).unwrap();
    task.await.unwrap();
}
