//! One view of the GPUs held by the parts together (issue 47): the mode executor with the
//! allocator's policy, two lanes whose servers book their memory in the VRAM ledger and take it
//! on the GPU while they run, the model pool as the allocator's third mode (a pinned model among
//! its models, one that sleeps, one whose stay-warm time is nil), all over one simulated fleet
//! of two GPUs and one ledger file. Random schedules shift the demand between the lanes and the
//! pool, load and unload pooled models, run the pool's housekeeping (keep-alive unloads and
//! sleeps), break a lane's server so that its starts fail, and restart the whole (the executor,
//! the servers and the pool stopped, then built again over the same files and GPUs). After each
//! step the GPU view's auditor looks twice, as it does in `run`: no breach of any invariant (the
//! plan against the leases, the capacity, the memory used) may hold.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use horos_gpu_alloc::allocator::AllocatorConfig;
use horos_gpu_alloc::booking::{Booking, LatePool};
use horos_gpu_alloc::estimate::ModelFacts;
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::{Category, ModelPool, ModelSpec, PoolConfig, SimBackendFactory};
use horos_gpu_alloc::view::{Auditor, Breach, GpuPlan, PlanBook, Snapshot};
use horos_modes::{
    Backlog, BacklogError, Demand, Instance, LaneState, ModeAction, ModeLane, ModesConfig, Pending,
    PoolMode, Reporter,
};
use horos_server_control::{ControlError, ModeServer, Reservation};
use horos_testkit::rng::XorShift;

const GPUS: u32 = 2;
const GPU_MB: u64 = 4000;
const DRIVER_MB: u64 = 300;
const LANES: [(&str, u64); 2] = [("think", 1800), ("vision", 2400)];
/// (name, MB, pinned, can sleep, stay-warm s)
const MODELS: [(&str, u64, bool, bool, Option<u64>); 4] = [
    ("pinned", 500, true, false, None),
    ("sleepy", 900, false, true, None),
    ("brief", 700, false, false, Some(0)),
    ("large", 2600, false, false, None),
];

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Work waits for this mode only (0, 1: the lanes; 2: the pool).
    Demand(usize),
    Load(usize),
    Unload(usize),
    Housekeeping,
    /// A lane's server starts fail (or work again).
    Break(usize, bool),
    Restart,
}

fn schedule(seed: u64, len: usize) -> Vec<Step> {
    let mut r = XorShift::new(seed);
    (0..len)
        .map(|_| match r.below(12) {
            0..=3 => Step::Demand(r.below(3) as usize),
            4..=6 => Step::Load(r.below(MODELS.len() as u64) as usize),
            7 => Step::Unload(r.below(MODELS.len() as u64) as usize),
            8 => Step::Housekeeping,
            9 | 10 => Step::Break(r.below(2) as usize, r.below(2) == 0),
            _ => Step::Restart,
        })
        .collect()
}

/// A lane's server on one GPU: it books its memory, then takes it on the GPU as its process
/// would; stopped, it frees both. While `broken`, a start fails after the booking (an image
/// that does not run) and gives the booking back.
struct Server {
    key: String,
    gpu: u32,
    mb: u64,
    booking: Booking,
    fleet: Arc<SimFleet>,
    broken: Arc<AtomicBool>,
    starts: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl ModeServer for Server {
    async fn start(&self) -> Result<(), ControlError> {
        self.booking.take().await?;
        if self.broken.load(SeqCst) {
            self.booking.give_back().await;
            return Err(ControlError::Config("no such image".into()));
        }
        self.fleet
            .load(self.gpu, &self.key, self.mb, None)
            .map_err(|e| ControlError::StartFailed(e.to_string()))?;
        self.starts.fetch_add(1, SeqCst);
        Ok(())
    }
    async fn stop(&self) -> Result<(), ControlError> {
        let _ = self.fleet.unload(self.gpu, &self.key);
        self.booking.give_back().await;
        Ok(())
    }
}

/// What waits for each mode: the lanes' jobs (their backlog), the pool's requests.
#[derive(Default)]
struct Work(Mutex<HashMap<String, u64>>);

impl Work {
    fn only(&self, mode: &str) {
        let mut w = self.0.lock().unwrap();
        w.clear();
        w.insert(mode.to_owned(), 40);
    }
    fn of(&self, mode: &str) -> u64 {
        self.0.lock().unwrap().get(mode).copied().unwrap_or(0)
    }
}

struct LanesBacklog(Arc<Work>);

#[async_trait::async_trait]
impl Backlog for LanesBacklog {
    async fn pending(&self, queue: &str) -> Result<Pending, BacklogError> {
        let jobs = self.0.of(queue);
        Ok(Pending {
            jobs,
            work_s: None,
            oldest_wait_s: if jobs > 0 { 30.0 } else { 0.0 },
            arrived_work_s_total: None,
        })
    }
}

struct PoolDemand(Arc<Work>);

impl Demand for PoolDemand {
    fn waiting(&self) -> (usize, f64) {
        match self.0.of("pool") {
            0 => (0, 0.0),
            n => (n as usize, 30.0),
        }
    }
}

/// The plan as the executor carries it out, as `run`'s reporter records it.
struct Plan(PlanBook, Arc<AtomicUsize>);

impl Reporter for Plan {
    fn decision(&self, _gpu: u32, action: ModeAction, _reason: &str) {
        if action == ModeAction::Switch {
            self.1.fetch_add(1, SeqCst);
        }
    }
    fn mode(&self, gpu: u32, mode: &str, state: &LaneState) {
        let to = match state {
            LaneState::SwitchingTo(lane) => Some(lane.as_str()),
            _ => None,
        };
        self.0.set(gpu, mode, to);
    }
}

/// One running system over `fleet` and the ledger at `ledger_path`.
struct System {
    pool: ModelPool,
    servers: Vec<Arc<Server>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    preload: tokio::task::JoinHandle<()>,
}

struct Shared {
    fleet: Arc<SimFleet>,
    ledger: Arc<VramLedger>,
    work: Arc<Work>,
    plan: PlanBook,
    switches: Arc<AtomicUsize>,
    broken: [Arc<AtomicBool>; 2],
    starts: Arc<AtomicUsize>,
}

fn start(s: &Shared) -> System {
    let pool = ModelPool::new(
        PoolConfig {
            reclaim_delay_ms: 0,
            port_min: 9500,
            port_max: 9599,
            margin_mb: 0,
            ..PoolConfig::default()
        },
        Arc::new(SimBackendFactory::new(Arc::clone(&s.fleet), 1000, 0)),
        Arc::clone(&s.fleet) as Arc<dyn GpuMonitor>,
        Some(Arc::clone(&s.ledger)),
    );
    for (id, mb, pin, can_sleep, stay_warm_s) in MODELS {
        pool.register(ModelSpec {
            id: id.into(),
            category: Category::Llm,
            facts: ModelFacts {
                explicit_mb: Some(mb),
                ..ModelFacts::default()
            },
            settings: serde_json::json!({"actual_mb": mb, "can_sleep": can_sleep}),
            pin,
            stay_warm_s,
            ..ModelSpec::default()
        });
    }
    let room: LatePool = Arc::new(OnceLock::new());
    let _ = room.set(pool.clone());
    let mut servers = Vec::new();
    let mut lanes: Vec<ModeLane> = LANES
        .iter()
        .enumerate()
        .map(|(i, &(queue, mb))| {
            let instances = (0..GPUS)
                .map(|gpu| {
                    let key = format!("lane:{queue}");
                    let server = Arc::new(Server {
                        booking: Booking::new(
                            Arc::clone(&s.ledger),
                            Some(Arc::clone(&s.fleet) as Arc<dyn GpuMonitor>),
                            key.clone(),
                            &[gpu],
                            mb,
                            Some(Arc::clone(&room)),
                        ),
                        key,
                        gpu,
                        mb,
                        fleet: Arc::clone(&s.fleet),
                        broken: Arc::clone(&s.broken[i]),
                        starts: Arc::clone(&s.starts),
                    });
                    servers.push(Arc::clone(&server));
                    Instance {
                        // The feeder's own gate (no batch runs through it here).
                        gate: Arc::new(horos_feeder::LaneGate::new(false)),
                        server,
                    }
                })
                .collect();
            ModeLane {
                queue: queue.into(),
                instances,
                swap_in_s: 1.0,
                job_s: 0.5,
                batch_size: 4,
                demand: None,
                keep_warm: None,
                sleep: horos_gpu_alloc::catalogue::SleepSpec::default(),
            }
        })
        .collect();
    let gpus: Vec<u32> = (0..GPUS).collect();
    lanes.push(horos_modes::pool_mode::mode_lane(
        &pool,
        &gpus,
        Arc::new(PoolDemand(Arc::clone(&s.work))),
        &PoolMode {
            swap_in_s: 1.0,
            job_s: 0.5,
        },
    ));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let config = ModesConfig {
        gpus: gpus.clone(),
        policy: AllocatorConfig {
            tick_s: 0.05,
            min_dwell_s: 0.0,
            hysteresis_s: 0.0,
            horizon_s: 60.0,
            max_wait_s: 60.0,
            ..AllocatorConfig::default()
        },
        retry_after_failure: Duration::from_millis(200),
        initial_mode_age_s: 0.0,
        costs: None,
        host_ram: None,
    };
    // The demo's start: GPU 0 to the first lane, GPU 1 to the pool; the pinned model preloaded.
    let task = horos_modes::spawn(
        config,
        lanes,
        vec![0, 2],
        Arc::new(LanesBacklog(Arc::clone(&s.work))),
        Arc::new(Plan(s.plan.clone(), Arc::clone(&s.switches))),
        rx,
    )
    .unwrap();
    let p = pool.clone();
    let preload = tokio::spawn(async move {
        let _ =
            tokio::time::timeout(Duration::from_secs(2), p.get_or_load("pinned", i32::MIN)).await;
    });
    System {
        pool,
        servers,
        stop,
        task,
        preload,
    }
}

/// Everything stopped, as `run` stops at SIGTERM: the executor, the lanes' servers, the pool's
/// models (and its tasks: the process ends, here they must not outlive it).
async fn shut_down(sys: System) {
    let _ = sys.stop.send(true);
    let _ = sys.task.await;
    sys.preload.abort();
    let _ = sys.preload.await;
    for s in &sys.servers {
        let _ = s.stop().await;
    }
    for gpu in 0..GPUS {
        sys.pool.take_gpu(gpu);
    }
    sys.pool.unload_all().await;
}

/// Two audits 60 ms apart, as the auditor in `run` makes them every 2 s: the breaches held.
async fn audit_twice(s: &Shared, auditor: &Auditor) -> Vec<Breach> {
    let mut held = Vec::new();
    for _ in 0..2 {
        let plan: Vec<GpuPlan> = s.plan.read();
        let (capacity, leases) = (s.ledger.capacities().unwrap(), s.ledger.leases().unwrap());
        let used: BTreeMap<u32, u64> = s
            .fleet
            .sample()
            .unwrap()
            .iter()
            .map(|g| (g.index, g.memory_used_mb))
            .collect();
        held.extend(auditor.observe(
            &Snapshot {
                plan: &plan,
                capacity_mb: &capacity,
                leases: &leases,
                used_mb: Some(&used),
                pool_in_plan: true,
            },
            Instant::now(),
        ));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    held
}

struct Outcome {
    loaded: usize,
    switches: usize,
    starts: usize,
}

async fn run(steps: &[Step]) -> Result<Outcome, String> {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Arc::new(SimFleet::new(GPUS, GPU_MB));
    let ledger = Arc::new(VramLedger::open(dir.path().join("vram.db")).unwrap());
    ledger.register_from(fleet.as_ref()).unwrap();
    let s = Shared {
        fleet,
        ledger,
        work: Arc::new(Work::default()),
        plan: PlanBook::new(),
        switches: Arc::new(AtomicUsize::new(0)),
        broken: [Arc::default(), Arc::default()],
        starts: Arc::new(AtomicUsize::new(0)),
    };
    // The first reading is the baseline: the driver's memory, nothing loaded yet.
    let auditor = Auditor::new().with_unused_grace(Duration::from_secs(2));
    let plan0: Vec<GpuPlan> = Vec::new();
    let capacity = s.ledger.capacities().unwrap();
    let base: BTreeMap<u32, u64> = (0..GPUS).map(|g| (g, DRIVER_MB)).collect();
    auditor.observe(
        &Snapshot {
            plan: &plan0,
            capacity_mb: &capacity,
            leases: &[],
            used_mb: Some(&base),
            pool_in_plan: true,
        },
        Instant::now(),
    );
    let mut sys = start(&s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut loaded = 0;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Demand(m) => s.work.only(["think", "vision", "pool"][m]),
            Step::Load(m) => {
                let load = sys.pool.get_or_load(MODELS[m].0, 5);
                if let Ok(Ok(g)) = tokio::time::timeout(Duration::from_millis(500), load).await {
                    drop(g);
                    loaded += 1;
                }
            }
            Step::Unload(m) => {
                let _ = sys.pool.unload(MODELS[m].0).await;
            }
            Step::Housekeeping => {
                let _ = sys.pool.maintain().await;
            }
            Step::Break(lane, broken) => s.broken[lane].store(broken, SeqCst),
            Step::Restart => {
                shut_down(sys).await;
                sys = start(&s);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let held = audit_twice(&s, &auditor).await;
        if !held.is_empty() {
            let leases = s.ledger.leases().unwrap();
            let out = Err(format!(
                "after step {i} {step:?}: {}\nplan: {:?}\nleases: {:?}\nfleet: {:?}",
                held.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                s.plan.read(),
                leases
                    .iter()
                    .map(|l| (&l.owner, l.gpu, l.mb))
                    .collect::<Vec<_>>(),
                s.fleet
                    .sample()
                    .unwrap()
                    .iter()
                    .map(|g| g.memory_used_mb)
                    .collect::<Vec<_>>()
            ));
            shut_down(sys).await;
            return out;
        }
    }
    shut_down(sys).await;
    Ok(Outcome {
        loaded,
        switches: s.switches.load(SeqCst),
        starts: s.starts.load(SeqCst),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parts_hold_one_view_of_the_gpus_through_random_schedules() {
    const SCHEDULES: u64 = 24;
    const LEN: usize = 24;
    let (mut loaded, mut switches, mut starts, mut failures) = (0, 0, 0, Vec::new());
    for seed in 0..SCHEDULES {
        let steps = schedule(seed, LEN);
        match run(&steps).await {
            Ok(o) => {
                loaded += o.loaded;
                switches += o.switches;
                starts += o.starts;
            }
            Err(e) => failures.push(format!("seed {seed}: {steps:?}\n{e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Not vacuous: pooled models were loaded, GPUs switched, lane servers started.
    println!("{SCHEDULES} schedules: {loaded} loads, {switches} switches, {starts} lane starts");
    assert!(loaded > SCHEDULES as usize, "only {loaded} loads");
    assert!(switches > SCHEDULES as usize, "only {switches} switches");
    assert!(
        starts > SCHEDULES as usize,
        "only {starts} lane server starts"
    );
}
