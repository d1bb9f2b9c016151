//! The model pool: slots with the lifecycle IDLE → LOADING → READY → STOPPING →
//! IDLE, and READY → SLEEPING → READY for a server that can sleep; get-or-load,
//! priority-aware LRU eviction, pinning, per-category stay-warm timers, ports from a range,
//! VRAM leases in the [`VramLedger`], host RAM for level-1 sleepers in a [`HostRam`], swap
//! costs measured and kept in a [`CostStore`].
//!
//! **Sleep.** A model evicted, or whose stay-warm time runs out, is put to sleep instead of
//! stopped where its server can sleep ([`Backend::can_sleep`]) and [`PoolConfig::sleep`] is on:
//! at level 1 (weights in host RAM), level 2 (weights dropped) or stopped, whichever costs the
//! least now and to bring back by its measured costs ([`crate::allocator::choose_outgoing`], the allocator's own
//! choice), level 1 only within the host RAM left (the pool's oldest, lowest-priority level-1
//! sleepers stopped first to make room). Asleep it holds no VRAM lease. A request wakes it on
//! the GPUs it sleeps on (evicting for room there as for a load); a wake that fails, or that
//! finds no room there, stops it and loads it again from scratch. A sleeper is stopped after
//! [`PoolConfig::stay_asleep_s`]. Every load, wake, sleep and stop is timed into the pool's
//! [`SwapCosts`] (and its store), under the key `pool:MODEL`.
//!
//! The [`Backend`] trait is the seam: the reference binary implements it with local
//! processes and Docker containers; [`SimBackendFactory`] drives a
//! [`SimFleet`](crate::monitor::sim_fleet::SimFleet) for tests and demos.
//!
//! Concurrency: the pool state sits behind a `std::sync::Mutex` that is never held across
//! an `.await`; a load in progress is a LOADING slot that other callers wait on (a
//! `tokio::sync::watch` channel). Eviction stops one victim at a time and waits for the
//! memory to be reclaimed (`reclaim_delay_ms`, 2 s) with the lock released, then re-checks
//! the actual free memory.
//!
//! Priorities are ranks: **smaller is more important** (0 is the highest priority), as in the
//! [workspace's convention](https://github.com/horos-rs/horos-rs/blob/main/docs/architecture.md#priorities).
//!
//! One concern per file: the seam ([`Backend`]), configuration ([`ModelSpec`],
//! [`PoolConfig`]), [`PoolError`], the views ([`SlotState`], [`SlotInfo`],
//! [`ModelPool::slots`]), get-or-load and placement ([`ModelPool::get_or_load`]), stops,
//! eviction and housekeeping ([`ModelPool::unload`], [`ModelPool::maintain`]), the simulated
//! backend ([`SimBackendFactory`]); [`settings`]: the pool as a configuration file describes it
//! ([`settings::PoolSettings`]).

// config: specs and settings; error: PoolError;
// views: states, snapshots, health; load: get-or-load, placement, eviction for a load;
// stop: victims, unloads, stay-warm and lease renewal; sim: the simulated backend.
mod config;
mod error;
mod health;
mod load;
pub mod settings;
mod sim;
mod stop;
mod upstream;
mod views;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::allocator::{SwapCosts, SwapKind, SwapMeasurement};
use crate::catalogue::{Catalogue, ModeSpec, SleepLevel, SleepSpec};
use crate::cost_store::{CostStore, CostStoreError};
use crate::estimate::VramEstimator;
use crate::host_ram::HostRam;
use crate::ledger::VramLedger;
use crate::monitor::GpuMonitor;
use crate::split::Share;

pub use config::{Category, InvalidPoolConfig, ModelSpec, PoolConfig, StayWarm};
pub use error::PoolError;
pub use health::PoolHealth;
pub use horos_server_control::{Backend, BackendError, BackendFactory};
pub use sim::SimBackendFactory;
pub use upstream::PoolUpstream;
pub use views::{SlotInfo, SlotState};

struct Slot {
    spec: ModelSpec,
    state: SlotState,
    backend: Option<Arc<dyn Backend>>,
    port: Option<u16>,
    shares: Vec<Share>,
    /// While LOADING without a ledger: where the load was placed, not yet allocated perhaps.
    placing: Vec<Share>,
    lease: Option<String>,
    active: usize,
    last_used: Instant,
    last_priority: i32,
    unload_at: Option<Instant>,
    /// While SLEEPING: the level, and when it fell asleep.
    asleep: Option<(SleepLevel, Instant)>,
    /// Host RAM its weights hold while asleep at level 1, MB.
    host_mb: u64,
    tx: watch::Sender<SlotState>,
    /// When it entered its state.
    state_since: Instant,
}

impl Slot {
    fn set_state(&mut self, s: SlotState) {
        if self.state != s {
            self.state_since = Instant::now();
        }
        self.state = s;
        self.tx.send_replace(s);
    }

    /// The GPU its swaps are measured on ([`first_gpu`]).
    fn gpu(&self) -> u32 {
        first_gpu(&self.shares)
    }

    /// Takes it out of service: marked STOPPING, asleep no more, its host RAM given up, its
    /// server and lease handed over to be put to sleep or stopped.
    fn take_out(&mut self) -> stop::Victim {
        self.set_state(SlotState::Stopping);
        self.unload_at = None;
        self.asleep = None;
        self.host_mb = 0;
        stop::Victim {
            model: self.spec.id.clone(),
            spec: self.spec.clone(),
            backend: self.backend.take(),
            lease: self.lease.take(),
            shares: self.shares.clone(),
        }
    }
}

#[derive(Default)]
struct PoolState {
    models: BTreeMap<String, ModelSpec>,
    slots: BTreeMap<String, Slot>,
}

struct Inner {
    cfg: PoolConfig,
    factory: Arc<dyn BackendFactory>,
    monitor: Arc<dyn GpuMonitor>,
    ledger: Option<Arc<VramLedger>>,
    estimator: VramEstimator,
    state: Mutex<PoolState>,
    /// Host RAM for level-1 sleepers (owner [`HOST_OWNER`]); `None`: no level 1.
    host: OnceLock<Arc<HostRam>>,
    costs: Mutex<SwapCosts>,
    store: OnceLock<Arc<CostStore>>,
    observer: OnceLock<SwapObserver>,
    /// The GPUs the pool may place models on: `None`, every GPU the monitor reads; `Some`, the
    /// GPUs an allocator has given to the pool's mode at this moment (see
    /// [`ModelPool::confine_to_given_gpus`]).
    given: Mutex<Option<std::collections::BTreeSet<u32>>>,
}

/// Told of every swap the pool measures (metrics, say).
pub type SwapObserver = Arc<dyn Fn(&SwapMeasurement) + Send + Sync>;

/// The pool's owner name in a shared [`HostRam`].
pub const HOST_OWNER: &str = "pool";

/// The GPU a placement's swaps are measured on: the first of its shares (0 before a
/// placement).
fn first_gpu(shares: &[Share]) -> u32 {
    shares.first().map_or(0, |s| s.gpu)
}

/// How the keys of pooled models begin in the swap costs.
const COST_KEY_PREFIX: &str = "pool:";

/// The key of a pooled model in the swap costs (`pool:MODEL`), apart from the lanes' modes.
pub fn cost_key(model: &str) -> String {
    format!("{COST_KEY_PREFIX}{model}")
}

/// A catalogue of one mode: `spec`'s model under its [`cost_key`], of `vram_mb`, its server
/// able to sleep, loaded in what its loads on `gpu` measured (the spec's `swap_in_s` before the
/// first): its wake and sleep priors derive from that load, as a mode's do from its
/// `swap_in_s`.
fn catalogue_of(costs: &SwapCosts, spec: &ModelSpec, gpu: u32, vram_mb: u64) -> Catalogue {
    let key = cost_key(&spec.id);
    let one = |swap_in_s| Catalogue {
        modes: vec![ModeSpec {
            name: key.clone(),
            vram_mb,
            swap_in_s,
            sleep: SleepSpec {
                can_sleep: true,
                ..SleepSpec::default()
            },
            ..ModeSpec::default()
        }],
        initial: Vec::new(),
    };
    let prior = spec.swap_in_s.unwrap_or(ModeSpec::default().swap_in_s);
    one(costs.cost_s(&one(prior), &key, gpu, SwapKind::Load))
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stay_warm(&self, spec: &ModelSpec) -> Duration {
        spec.stay_warm_s.map_or_else(
            || self.cfg.stay_warm.for_category(spec.category),
            Duration::from_secs,
        )
    }

    /// Forgets `model`'s slot (its load failed, or it stopped), waking its waiters.
    fn remove_slot(&self, model: &str) {
        let mut st = self.lock();
        if let Some(mut slot) = st.slots.remove(model) {
            slot.set_state(SlotState::Idle);
        }
        self.sync_host(&st);
    }

    /// Tells the shared host RAM what the pool's level-1 sleepers (and those being put to
    /// sleep) hold now.
    fn sync_host(&self, st: &PoolState) {
        if let Some(h) = self.host.get() {
            h.set_held(HOST_OWNER, st.slots.values().map(|s| s.host_mb).sum());
        }
    }

    fn costs(&self) -> MutexGuard<'_, SwapCosts> {
        self.costs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a swap of `model` on `gpu` that took `took`, in the costs and their store.
    async fn measured(&self, model: &str, gpu: u32, kind: SwapKind, took: Duration) {
        let m = SwapMeasurement::new(&cost_key(model), gpu, kind, took.as_secs_f64());
        self.costs().record(&m);
        if let Some(observe) = self.observer.get() {
            observe(&m);
        }
        tracing::info!(model, gpu, ?kind, seconds = m.seconds, "swap measured");
        if let Some(store) = self.store.get().cloned() {
            match tokio::task::spawn_blocking(move || store.record(&m)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "swap cost not kept"),
                Err(e) => tracing::warn!(error = %e, "swap cost not kept"),
            }
        }
    }

    fn release_use(&self, model: &str) {
        let mut st = self.lock();
        let warm = st.slots.get(model).map(|s| self.stay_warm(&s.spec));
        if let (Some(slot), Some(warm)) = (st.slots.get_mut(model), warm) {
            slot.active = slot.active.saturating_sub(1);
            slot.last_used = Instant::now();
            if slot.active == 0 && !slot.spec.pin {
                slot.unload_at = Some(Instant::now() + warm);
            }
        }
    }
}

/// A model in use: keeps its slot READY and unevictable until dropped.
pub struct SlotGuard {
    inner: Arc<Inner>,
    model: String,
    port: u16,
    shares: Vec<Share>,
    endpoint: Option<String>,
}

impl std::fmt::Debug for SlotGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotGuard")
            .field("model", &self.model)
            .field("port", &self.port)
            .finish()
    }
}

impl SlotGuard {
    /// Model id.
    pub fn model(&self) -> &str {
        &self.model
    }
    /// Port the backend listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// GPUs and MB per GPU.
    pub fn shares(&self) -> &[Share] {
        &self.shares
    }
    /// The backend's endpoint.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.inner.release_use(&self.model);
    }
}

/// The model pool. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ModelPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ModelPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelPool")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PoolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PoolError::Join(e.to_string()))
}

impl ModelPool {
    /// A pool over a monitor (actual free memory), an optional shared ledger and a backend
    /// factory.
    pub fn new(
        cfg: PoolConfig,
        factory: Arc<dyn BackendFactory>,
        monitor: Arc<dyn GpuMonitor>,
        ledger: Option<Arc<VramLedger>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cfg,
                factory,
                monitor,
                ledger,
                estimator: VramEstimator::new(),
                state: Mutex::new(PoolState::default()),
                host: OnceLock::new(),
                costs: Mutex::new(SwapCosts::new()),
                store: OnceLock::new(),
                observer: OnceLock::new(),
                given: Mutex::new(None),
            }),
        }
    }

    /// From now on, models are placed (loaded, woken) only on the GPUs given to the pool with
    /// [`give_gpu`](Self::give_gpu) and not taken back: for a pool that is one mode of an
    /// allocator's plan, whose other GPUs belong to lanes. Until a GPU is given, a load finds no
    /// room (and its request waits, counted as the pool's demand). Call it before anything is
    /// loaded (at construction), so that no preload races the allocator's first plan.
    pub fn confine_to_given_gpus(&self) {
        let mut g = self.inner.given.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(std::collections::BTreeSet::new());
        }
    }

    /// `gpu` is the pool's now (its mode's instance there opened).
    pub fn give_gpu(&self, gpu: u32) {
        let mut g = self.inner.given.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = g.as_mut() {
            set.insert(gpu);
        }
    }

    /// `gpu` leaves the pool: no load or wake is placed there any more (the models already
    /// there are the leaving mode's to unload).
    pub fn take_gpu(&self, gpu: u32) {
        let mut g = self.inner.given.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = g.as_mut() {
            set.remove(&gpu);
        }
    }

    /// The GPUs the pool may place models on now: `None` when it is not confined (every GPU
    /// the monitor reads).
    pub fn given_gpus(&self) -> Option<Vec<u32>> {
        let g = self.inner.given.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|set| set.iter().copied().collect())
    }

    /// Level-1 sleepers hold their weights within `host` (shared with whoever else puts
    /// servers to sleep on this machine). Without it the pool never sleeps at level 1. The
    /// first call sets it.
    pub fn with_host_ram(self, host: Arc<HostRam>) -> Self {
        let _ = self.inner.host.set(host);
        self
    }

    /// The pooled models' swap costs measured by earlier runs are read from `store` (the
    /// others it keeps, the lanes', are not the pool's) and new ones kept there (blocking: call
    /// at start-up). The first call sets it.
    pub fn with_cost_store(self, store: Arc<CostStore>) -> Result<Self, CostStoreError> {
        let mut kept = SwapCosts::new();
        for (mode, gpu, kind, m) in store.load()?.iter() {
            if mode.starts_with(COST_KEY_PREFIX) {
                kept.restore(mode, gpu, kind, m);
            }
        }
        if self.inner.store.set(store).is_ok() {
            *self.inner.costs() = kept;
        }
        Ok(self)
    }

    /// `observe` is told of every load, wake, sleep and stop measured (under [`cost_key`]).
    /// The first call sets it.
    pub fn with_swap_observer(self, observe: SwapObserver) -> Self {
        let _ = self.inner.observer.set(observe);
        self
    }

    /// The swap costs of the pooled models (under [`cost_key`]): measured so far, and by earlier
    /// runs where the pool has a [`CostStore`].
    pub fn swap_costs(&self) -> SwapCosts {
        self.inner.costs().clone()
    }

    /// Registers (or replaces) a model.
    pub fn register(&self, mut spec: ModelSpec) {
        if spec.facts.name.is_empty() {
            spec.facts.name = spec.id.clone();
        }
        self.inner.lock().models.insert(spec.id.clone(), spec);
    }

    /// Pins or unpins a model (a pinned slot is never evicted nor unloaded by its timer).
    pub fn pin(&self, model: &str, pinned: bool) -> Result<(), PoolError> {
        let mut st = self.inner.lock();
        let spec = st
            .models
            .get_mut(model)
            .ok_or_else(|| PoolError::UnknownModel(model.to_owned()))?;
        spec.pin = pinned;
        if let Some(slot) = st.slots.get_mut(model) {
            slot.spec.pin = pinned;
            if pinned {
                slot.unload_at = None;
            }
        }
        Ok(())
    }

    /// The estimator (its measurements replace estimates after real loads).
    pub fn estimator(&self) -> &VramEstimator {
        &self.inner.estimator
    }
}
