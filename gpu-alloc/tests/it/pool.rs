//! The model pool: lifecycle, get-or-load, the eviction cases, pinning, stay-warm
//! timers, ports, measured VRAM, multi-GPU placement — on a simulated fleet.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use horos_gpu_alloc::estimate::{EstimateSource, ModelFacts};
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::{
    Backend, BackendError, BackendFactory, Category, ModelPool, ModelSpec, PoolConfig, PoolError,
    SimBackendFactory, SlotState,
};
use horos_testkit::wait_until;
use serde_json::json;
use tokio::sync::Notify;

/// Counts backend creations and can hold `start` / `stop` until released.
struct Gate {
    inner: SimBackendFactory,
    created: AtomicUsize,
    hold_start: Arc<Notify>,
    hold_stop: Arc<Notify>,
    block_start: bool,
    block_stop: bool,
    /// The shares each split start was given.
    told: Arc<std::sync::Mutex<Vec<Vec<u64>>>>,
}

struct GatedBackend {
    inner: Arc<dyn Backend>,
    gate_start: Option<Arc<Notify>>,
    gate_stop: Option<Arc<Notify>>,
    told: Arc<std::sync::Mutex<Vec<Vec<u64>>>>,
}

#[async_trait]
impl Backend for GatedBackend {
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        if let Some(g) = &self.gate_start {
            g.notified().await;
        }
        self.inner.start(port, gpus, settings).await
    }
    async fn start_split(
        &self,
        port: u16,
        gpus: &[u32],
        shares_mb: &[u64],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        self.told.lock().unwrap().push(shares_mb.to_vec());
        self.start(port, gpus, settings).await
    }
    async fn stop(&self) -> Result<(), BackendError> {
        if let Some(g) = &self.gate_stop {
            g.notified().await;
        }
        self.inner.stop().await
    }
    async fn health(&self) -> Result<(), BackendError> {
        self.inner.health().await
    }
    fn endpoint(&self) -> Option<String> {
        self.inner.endpoint()
    }
}

impl BackendFactory for Gate {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        self.created.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(GatedBackend {
            inner: self.inner.create(model_id, settings)?,
            gate_start: self.block_start.then(|| Arc::clone(&self.hold_start)),
            gate_stop: self.block_stop.then(|| Arc::clone(&self.hold_stop)),
            told: Arc::clone(&self.told),
        }))
    }
}

fn gate(fleet: &Arc<SimFleet>, reclaim_ms: u64) -> Arc<Gate> {
    Arc::new(Gate {
        inner: SimBackendFactory::new(Arc::clone(fleet), 1000, reclaim_ms),
        created: AtomicUsize::new(0),
        hold_start: Arc::new(Notify::new()),
        hold_stop: Arc::new(Notify::new()),
        block_start: false,
        block_stop: false,
        told: Arc::default(),
    })
}

/// A gate whose backends' `start` waits for `hold_start`.
fn start_gate(fleet: &Arc<SimFleet>) -> Arc<Gate> {
    Arc::new(Gate {
        block_start: true,
        ..Arc::try_unwrap(gate(fleet, 0)).ok().unwrap()
    })
}

fn cfg() -> PoolConfig {
    PoolConfig {
        reclaim_delay_ms: 50,
        port_min: 9100,
        port_max: 9199,
        ..PoolConfig::default()
    }
}

/// A model of `mb` on the simulated fleet (its settings' `actual_mb`).
pub(crate) fn model(id: &str, mb: u64) -> ModelSpec {
    ModelSpec {
        id: id.into(),
        category: Category::Llm,
        facts: ModelFacts {
            explicit_mb: Some(mb),
            ..ModelFacts::default()
        },
        settings: json!({ "actual_mb": mb }),
        ..ModelSpec::default()
    }
}

/// One 24 GB GPU.
fn one_gpu() -> Arc<SimFleet> {
    Arc::new(SimFleet::new(1, 24_000))
}

fn pool(
    fleet: &Arc<SimFleet>,
    factory: Arc<dyn BackendFactory>,
    ledger: Option<Arc<VramLedger>>,
) -> ModelPool {
    ModelPool::new(
        cfg(),
        factory,
        Arc::clone(fleet) as Arc<dyn GpuMonitor>,
        ledger,
    )
}

async fn load_and_release(p: &ModelPool, id: &str, prio: i32) {
    let g = p.get_or_load(id, prio).await.unwrap();
    drop(g);
}

#[tokio::test]
async fn get_or_load_loads_once_and_reuses() {
    let fleet = one_gpu();
    let f = gate(&fleet, 0);
    let p = pool(&fleet, f.clone(), None);
    p.register(model("a", 8000));
    assert_eq!(p.state("a"), SlotState::Idle);
    let g1 = p.get_or_load("a", 5).await.unwrap();
    let g2 = p.get_or_load("a", 5).await.unwrap();
    assert_eq!(g1.port(), g2.port());
    assert_eq!(
        g1.endpoint(),
        Some(format!("http://127.0.0.1:{}", g1.port()).as_str())
    );
    assert_eq!(f.created.load(Ordering::SeqCst), 1);
    assert_eq!(p.state("a"), SlotState::Ready);
    assert_eq!(p.slots()[0].active, 2);
    assert!(p.health("a").await.unwrap());
    assert!(!p.health("never-loaded").await.unwrap());
    assert_eq!(fleet.used_mb(0).unwrap(), 300 + 8000);
    assert!(matches!(
        p.get_or_load("nope", 0).await,
        Err(PoolError::UnknownModel(_))
    ));
}

#[tokio::test]
async fn lifecycle_idle_loading_ready_stopping_idle_and_concurrent_callers_share_one_load() {
    let fleet = one_gpu();
    let f = Arc::new(Gate {
        block_start: true,
        block_stop: true,
        ..Arc::try_unwrap(gate(&fleet, 0)).ok().unwrap()
    });
    let p = pool(&fleet, f.clone(), None);
    p.register(model("a", 8000));
    let (p1, p2) = (p.clone(), p.clone());
    let t1 = tokio::spawn(async move { p1.get_or_load("a", 5).await.map(|g| g.port()) });
    let t2 = tokio::spawn(async move { p2.get_or_load("a", 5).await.map(|g| g.port()) });
    while p.state("a") != SlotState::Loading {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(p.state("a"), SlotState::Loading);
    f.hold_start.notify_one();
    let (a, b) = (t1.await.unwrap().unwrap(), t2.await.unwrap().unwrap());
    assert_eq!(a, b);
    assert_eq!(f.created.load(Ordering::SeqCst), 1, "two callers, one load");
    assert_eq!(p.state("a"), SlotState::Ready);
    let p3 = p.clone();
    let unload = tokio::spawn(async move { p3.unload("a").await });
    while p.state("a") != SlotState::Stopping {
        tokio::task::yield_now().await;
    }
    f.hold_stop.notify_one();
    assert!(unload.await.unwrap().unwrap());
    assert_eq!(p.state("a"), SlotState::Idle);
    assert_eq!(fleet.used_mb(0).unwrap(), 300);
}

#[tokio::test]
async fn two_loads_at_once_never_take_the_same_room_without_a_ledger() {
    // Room for one 15 GB model beside an idle 5 GB one, two loads at once. Whichever places
    // first, the other must see its placement and give up for lack of room, not start a server
    // that cannot fit; and it evicts nothing, since only a load in progress is in its way.
    let fleet = one_gpu();
    let f = start_gate(&fleet);
    let p = pool(&fleet, f.clone(), None);
    p.register(model("idle", 5_000));
    let warm = tokio::spawn({
        let p = p.clone();
        async move { p.get_or_load("idle", 9).await.map(drop) }
    });
    while p.state("idle") != SlotState::Loading {
        tokio::task::yield_now().await;
    }
    f.hold_start.notify_one();
    warm.await.unwrap().unwrap();
    p.register(model("a", 15_000));
    p.register(model("b", 15_000));
    let load = |id: &'static str| {
        let p = p.clone();
        tokio::spawn(async move { p.get_or_load(id, 1).await.map(drop) })
    };
    let (a, b) = (load("a"), load("b"));
    // The winner's start is held by the gate; the loser ends on its own (were it placed too,
    // its start would be held as well: hence the time limit).
    wait_until(
        "one of the loads to be refused",
        Duration::from_secs(10),
        || async { a.is_finished() || b.is_finished() },
    )
    .await;
    let (loser, winner, winner_id) = if a.is_finished() {
        (a, b, "b")
    } else {
        (b, a, "a")
    };
    let refused = loser.await.unwrap();
    assert!(
        matches!(refused, Err(PoolError::InsufficientVram { .. })),
        "{refused:?}"
    );
    assert_eq!(
        f.created.load(Ordering::SeqCst),
        2,
        "one server started beside `idle`"
    );
    assert_eq!(
        p.state("idle"),
        SlotState::Ready,
        "evicted for a load in progress"
    );
    f.hold_start.notify_one();
    winner.await.unwrap().unwrap();
    assert_eq!(p.state(winner_id), SlotState::Ready);
    assert_eq!(fleet.used_mb(0).unwrap(), 300 + 5_000 + 15_000);
}

#[tokio::test]
async fn a_caller_that_gives_up_mid_load_leaves_the_load_to_finish() {
    let fleet = one_gpu();
    let f = start_gate(&fleet);
    let p = pool(&fleet, f.clone(), None);
    p.register(model("a", 8000));
    // The caller leaves while the server starts (its future dropped at the time limit).
    let gave_up = tokio::time::timeout(Duration::from_millis(50), p.get_or_load("a", 5)).await;
    assert!(gave_up.is_err());
    assert_eq!(p.state("a"), SlotState::Loading);
    f.hold_start.notify_one();
    // The load went on without it; the next caller gets the model, not a slot stuck LOADING.
    let g = tokio::time::timeout(Duration::from_secs(10), p.get_or_load("a", 5))
        .await
        .expect("the load finished in the background")
        .unwrap();
    assert_eq!(p.state("a"), SlotState::Ready);
    assert_eq!(f.created.load(Ordering::SeqCst), 1);
    drop(g);
    assert_eq!(
        p.slots()[0].active,
        0,
        "the lost caller's use was given back"
    );
}

#[tokio::test]
async fn eviction_takes_the_lowest_priority_first_then_the_least_recently_used() {
    let fleet = one_gpu();
    let p = pool(&fleet, gate(&fleet, 0), None);
    for id in ["low-old", "mid-old", "mid-new"] {
        p.register(model(id, 7000));
    }
    p.register(model("incoming", 7000));
    load_and_release(&p, "low-old", 9).await;
    load_and_release(&p, "mid-old", 5).await;
    load_and_release(&p, "mid-new", 5).await;
    // 300 + 3 × 7000 = 21300 used; the incoming 7000 needs one eviction: priority 9 goes first
    // even though it is not the least recently used... it is; make it the most recent.
    load_and_release(&p, "low-old", 9).await;
    let g = p.get_or_load("incoming", 1).await.unwrap();
    assert_eq!(p.state("low-old"), SlotState::Idle);
    assert_eq!(p.state("mid-old"), SlotState::Ready);
    assert_eq!(p.state("mid-new"), SlotState::Ready);
    drop(g);
    // Same priority: the least recently used goes.
    p.register(model("incoming2", 7000));
    let _g = p.get_or_load("incoming2", 1).await.unwrap();
    assert_eq!(p.state("mid-old"), SlotState::Idle);
    assert_eq!(p.state("mid-new"), SlotState::Ready);
}

#[tokio::test]
async fn pinned_busy_and_higher_priority_slots_are_never_evicted() {
    let fleet = one_gpu();
    let p = pool(&fleet, gate(&fleet, 0), None);
    p.register(ModelSpec {
        pin: true,
        ..model("pinned", 7000)
    });
    p.register(model("busy", 7000));
    p.register(model("important", 7000));
    p.register(model("incoming", 7000));
    load_and_release(&p, "pinned", 9).await;
    let _busy = p.get_or_load("busy", 9).await.unwrap();
    load_and_release(&p, "important", 0).await;
    let err = p.get_or_load("incoming", 5).await.unwrap_err();
    assert!(
        matches!(err, PoolError::InsufficientVram { need_mb: 7000, .. }),
        "{err}"
    );
    for id in ["pinned", "busy", "important"] {
        assert_eq!(p.state(id), SlotState::Ready, "{id}");
    }
    assert_eq!(p.state("incoming"), SlotState::Idle);
    // Equal priority is not lower priority either.
    let err = p.get_or_load("incoming", 0).await.unwrap_err();
    assert!(matches!(err, PoolError::InsufficientVram { .. }));
    // Unpinning makes it evictable.
    p.pin("pinned", false).unwrap();
    let _g = p.get_or_load("incoming", 5).await.unwrap();
    assert_eq!(p.state("pinned"), SlotState::Idle);
}

#[tokio::test]
async fn evicts_one_at_a_time_only_as_many_as_needed() {
    let fleet = one_gpu();
    let p = pool(&fleet, gate(&fleet, 0), None);
    for (id, prio) in [("a", 9), ("b", 8), ("c", 7)] {
        p.register(model(id, 7000));
        load_and_release(&p, id, prio).await;
    }
    // 13000 MB needs two evictions (free 2700 → 9700 → 16700): a then b; c stays.
    p.register(model("big", 13_000));
    let _g = p.get_or_load("big", 1).await.unwrap();
    assert_eq!(p.state("a"), SlotState::Idle);
    assert_eq!(p.state("b"), SlotState::Idle);
    assert_eq!(p.state("c"), SlotState::Ready);
}

#[tokio::test]
async fn waits_for_memory_to_be_reclaimed_instead_of_evicting_more() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = one_gpu();
    let ledger = Arc::new(VramLedger::open(dir.path().join("vram.db")).unwrap());
    ledger.register_from(fleet.as_ref()).unwrap();
    // The backend frees its memory 150 ms after stop; the pool sleeps 50 ms after the
    // eviction, then sees the memory free in the ledger but not yet on the GPU, and waits
    // (up to 3 × 50 ms) instead of evicting b.
    let p = pool(&fleet, gate(&fleet, 150), Some(Arc::clone(&ledger)));
    for (id, prio) in [("a", 9), ("b", 8)] {
        p.register(model(id, 10_000));
        load_and_release(&p, id, prio).await;
    }
    p.register(model("new", 10_000));
    let _g = p.get_or_load("new", 1).await.unwrap();
    assert_eq!(p.state("a"), SlotState::Idle);
    assert_eq!(
        p.state("b"),
        SlotState::Ready,
        "the pool should wait for a's memory, not evict b"
    );
    assert_eq!(fleet.used_mb(0).unwrap(), 300 + 20_000);
    let owners: Vec<String> = ledger
        .leases()
        .unwrap()
        .into_iter()
        .map(|r| r.owner)
        .collect();
    assert_eq!(owners.len(), 2);
    assert!(
        owners.contains(&"pool:b".to_owned()) && owners.contains(&"pool:new".to_owned()),
        "{owners:?}"
    );
}

#[tokio::test]
async fn stay_warm_timers_unload_idle_models_per_category_but_not_pinned_ones() {
    let fleet = Arc::new(SimFleet::new(1, 48_000));
    let p = pool(&fleet, gate(&fleet, 0), None);
    p.register(ModelSpec {
        category: Category::Vision,
        stay_warm_s: Some(1),
        ..model("vision", 5000)
    });
    p.register(ModelSpec {
        category: Category::Llm,
        ..model("llm", 5000)
    });
    p.register(ModelSpec {
        pin: true,
        stay_warm_s: Some(1),
        ..model("pinned", 5000)
    });
    let held = p.get_or_load("vision", 5).await.unwrap();
    load_and_release(&p, "llm", 5).await;
    load_and_release(&p, "pinned", 5).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // In use: not unloaded even past its timer.
    assert!(p.maintain().await.unwrap().is_empty());
    drop(held);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(p.maintain().await.unwrap(), vec!["vision".to_owned()]);
    assert_eq!(p.state("vision"), SlotState::Idle);
    assert_eq!(
        p.state("llm"),
        SlotState::Ready,
        "LLMs stay warm 300 s by default"
    );
    assert_eq!(p.state("pinned"), SlotState::Ready);
    let defaults = PoolConfig::default().stay_warm;
    assert_eq!(
        (defaults.diffusion_s, defaults.llm_s, defaults.vision_s),
        (900, 300, 60)
    );
    assert_eq!(
        defaults.for_category(Category::Speech),
        Duration::from_secs(defaults.speech_s)
    );
    assert_eq!(defaults.speech_s, 120);
}

#[tokio::test]
async fn ports_come_from_the_range_and_run_out() {
    let fleet = Arc::new(SimFleet::new(1, 48_000));
    let f = gate(&fleet, 0);
    let p = ModelPool::new(
        PoolConfig {
            port_min: 9300,
            port_max: 9301,
            ..cfg()
        },
        f,
        Arc::clone(&fleet) as Arc<dyn GpuMonitor>,
        None,
    );
    for id in ["a", "b", "c"] {
        p.register(model(id, 1000));
    }
    let a = p.get_or_load("a", 0).await.unwrap();
    let b = p.get_or_load("b", 0).await.unwrap();
    assert_eq!((a.port(), b.port()), (9300, 9301));
    assert!(matches!(
        p.get_or_load("c", 0).await,
        Err(PoolError::NoPort(9300, 9301))
    ));
    drop(a);
    p.unload("a").await.unwrap();
    assert_eq!(p.get_or_load("c", 0).await.unwrap().port(), 9300);
}

#[tokio::test]
async fn measured_usage_replaces_the_estimate_and_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = one_gpu();
    let ledger = Arc::new(VramLedger::open(dir.path().join("vram.db")).unwrap());
    ledger.register_from(fleet.as_ref()).unwrap();
    let p = pool(&fleet, gate(&fleet, 0), Some(Arc::clone(&ledger)));
    // The name says 7B fp16 (~16 GB); the server really takes 9 GB.
    p.register(ModelSpec {
        settings: json!({ "actual_mb": 9000 }),
        ..ModelSpec {
            id: "qwen2-7b".into(),
            ..ModelSpec::default()
        }
    });
    let est = p
        .estimator()
        .estimate(&ModelFacts {
            name: "qwen2-7b".into(),
            ..ModelFacts::default()
        })
        .unwrap();
    assert_eq!(est.source, EstimateSource::NamePattern);
    assert!(est.mb > 15_000, "{est:?}");
    let g = p.get_or_load("qwen2-7b", 0).await.unwrap();
    let est = p
        .estimator()
        .estimate(&ModelFacts {
            name: "qwen2-7b".into(),
            ..ModelFacts::default()
        })
        .unwrap();
    assert_eq!((est.mb, est.source), (9000, EstimateSource::Measured));
    let rows = ledger.leases().unwrap();
    assert_eq!(rows.iter().map(|r| r.mb).sum::<u64>(), 9000);
    drop(g);
}

#[tokio::test]
async fn a_model_larger_than_any_gpu_is_split_proportionally_with_leases_on_each() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Arc::new(SimFleet::new(2, 24_000));
    fleet.load(1, "other", 8000, None).unwrap();
    let ledger = Arc::new(VramLedger::open(dir.path().join("vram.db")).unwrap());
    ledger.register_from(fleet.as_ref()).unwrap();
    let backends = gate(&fleet, 0);
    let p = pool(&fleet, backends.clone(), Some(Arc::clone(&ledger)));
    p.register(model("huge", 30_000));
    let g = p.get_or_load("huge", 0).await.unwrap();
    let shares = g.shares().to_vec();
    assert_eq!(shares.len(), 2);
    assert_eq!(shares.iter().map(|s| s.mb).sum::<u64>(), 30_000);
    // Effective free: 24000-300-512 = 23188 and 24000-8300-512 = 15188.
    let expected0 = (30_000u128 * 23_188 / (23_188 + 15_188)) as u64;
    assert!(shares[0].mb.abs_diff(expected0) <= 1, "{shares:?}");
    let gpus: Vec<u32> = ledger.leases().unwrap().iter().map(|r| r.gpu).collect();
    assert_eq!(gpus, vec![0, 1]);
    // The server is told its shares (a process backend's `{tensor_split}`).
    let told = backends.told.lock().unwrap().clone();
    assert_eq!(told, vec![shares.iter().map(|s| s.mb).collect::<Vec<_>>()]);
}

#[test]
fn slot_state_names_are_their_serialised_form() {
    for s in SlotState::ALL {
        assert_eq!(
            serde_json::to_value(s).unwrap(),
            serde_json::json!(s.as_str())
        );
        assert_eq!(s.to_string(), s.as_str());
    }
    assert_eq!(SlotState::Ready.as_str(), "READY");
}
