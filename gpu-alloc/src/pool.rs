//! The model pool (feature A6): slots with the lifecycle IDLE → LOADING → READY → STOPPING →
//! IDLE, get-or-load, priority-aware LRU eviction, pinning, per-category stay-warm timers,
//! ports from a range, VRAM leases in the [`VramLedger`].
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
//! Priorities are numbers: **smaller is more important** (0 is the highest priority).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::estimate::{EstimateError, ModelFacts, VramEstimator};
use crate::ledger::{LeaseRequest, LedgerError, VramLedger};
use crate::monitor::sim_fleet::SimFleet;
use crate::monitor::{GpuMonitor, GpuSample, MonitorError};
use crate::split::{self, GpuFree, Share};

pub use horos_server_control::{Backend, BackendError, BackendFactory};

/// Model category (selects the default stay-warm time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Text LLM.
    #[default]
    Llm,
    /// Vision-language model.
    Vision,
    /// Image generation.
    Diffusion,
    /// Embedding / reranking.
    Embedding,
    /// Anything else.
    Other,
}

/// Per-category stay-warm times, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StayWarm {
    /// Diffusion (900).
    pub diffusion_s: u64,
    /// LLM (300).
    pub llm_s: u64,
    /// Vision (60).
    pub vision_s: u64,
    /// Embedding (300).
    pub embedding_s: u64,
    /// Other (300).
    pub other_s: u64,
}

impl Default for StayWarm {
    fn default() -> Self {
        Self {
            diffusion_s: 900,
            llm_s: 300,
            vision_s: 60,
            embedding_s: 300,
            other_s: 300,
        }
    }
}

impl StayWarm {
    /// The time for a category.
    pub fn for_category(&self, c: Category) -> Duration {
        Duration::from_secs(match c {
            Category::Diffusion => self.diffusion_s,
            Category::Llm => self.llm_s,
            Category::Vision => self.vision_s,
            Category::Embedding => self.embedding_s,
            Category::Other => self.other_s,
        })
    }
}

/// A model the pool may load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSpec {
    /// Model id (the key of its slot).
    pub id: String,
    /// Category.
    pub category: Category,
    /// Never evicted nor unloaded by the stay-warm timer.
    pub pin: bool,
    /// Overrides the category's stay-warm time, seconds.
    pub stay_warm_s: Option<u64>,
    /// What the estimation chain knows (`facts.name` defaults to the id when empty).
    pub facts: ModelFacts,
    /// Backend settings passed to [`Backend::start`].
    pub settings: serde_json::Value,
}

/// Pool settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolConfig {
    /// First port of the range.
    pub port_min: u16,
    /// Last port of the range (inclusive).
    pub port_max: u16,
    /// Wait after stopping a victim before re-checking free memory, ms (2000).
    pub reclaim_delay_ms: u64,
    /// How many times to wait for memory the ledger already shows free before giving up (3).
    pub reclaim_checks: u32,
    /// Safety margin per GPU, MB (512).
    pub margin_mb: u64,
    /// Stay-warm times.
    pub stay_warm: StayWarm,
    /// Lease time to live, seconds (renewed by [`ModelPool::maintain`]) (120).
    pub lease_ttl_s: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            port_min: 8300,
            port_max: 8399,
            reclaim_delay_ms: 2000,
            reclaim_checks: 3,
            margin_mb: split::DEFAULT_MARGIN_MB,
            stay_warm: StayWarm::default(),
            lease_ttl_s: 120,
        }
    }
}

/// Pool failures.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The model was never registered.
    #[error("unknown model {0:?}")]
    UnknownModel(String),
    /// No placement even after evicting every eligible slot.
    #[error(
        "not enough VRAM for {model:?}: {need_mb} MB needed, {available_mb} MB effectively free"
    )]
    InsufficientVram {
        /// The model.
        model: String,
        /// MB needed.
        need_mb: u64,
        /// MB effectively free (after margins) when giving up.
        available_mb: u64,
    },
    /// Every port of the range is in use.
    #[error("no free port in {0}..={1}")]
    NoPort(u16, u16),
    /// Estimation failed.
    #[error(transparent)]
    Estimate(#[from] EstimateError),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The monitor failed.
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A blocking task panicked or was cancelled.
    #[error("blocking task failed: {0}")]
    Join(String),
}

/// Lifecycle state of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SlotState {
    /// Not loaded.
    Idle,
    /// Being loaded.
    Loading,
    /// Serving.
    Ready,
    /// Being stopped.
    Stopping,
}

/// A snapshot of one slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotInfo {
    /// Model id.
    pub model: String,
    /// State.
    pub state: SlotState,
    /// Port.
    pub port: Option<u16>,
    /// GPU shares.
    pub shares: Vec<Share>,
    /// Pinned.
    pub pinned: bool,
    /// Requests in progress.
    pub active: usize,
    /// Priority of the last request.
    pub last_priority: i32,
    /// Seconds since last use.
    pub idle_s: f64,
}

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
    tx: watch::Sender<SlotState>,
}

impl Slot {
    fn set_state(&mut self, s: SlotState) {
        self.state = s;
        self.tx.send_replace(s);
    }
}

#[derive(Default)]
struct PoolState {
    models: BTreeMap<String, ModelSpec>,
    slots: BTreeMap<String, Slot>,
}

impl PoolState {
    /// `free` less what loads in progress (other than `model`'s) have placed and may not have
    /// allocated yet. Without a ledger this is what keeps two loads from taking the same room.
    /// Once a load allocates, its share counts twice until it is READY: the safe side, and a
    /// load refused only because of that evicts nothing (see `load`).
    fn minus_loading(&self, free: &[GpuFree], model: &str) -> Vec<GpuFree> {
        free.iter()
            .map(|g| {
                let placed: u64 = self
                    .slots
                    .values()
                    .filter(|s| s.state == SlotState::Loading && s.spec.id != model)
                    .flat_map(|s| &s.placing)
                    .filter(|share| share.gpu == g.gpu)
                    .map(|share| share.mb)
                    .sum();
                GpuFree {
                    gpu: g.gpu,
                    free_mb: g.free_mb.saturating_sub(placed),
                }
            })
            .collect()
    }
}

struct Inner {
    cfg: PoolConfig,
    factory: Arc<dyn BackendFactory>,
    monitor: Arc<dyn GpuMonitor>,
    ledger: Option<Arc<VramLedger>>,
    estimator: VramEstimator,
    state: Mutex<PoolState>,
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
        if let Some(mut slot) = self.lock().slots.remove(model) {
            slot.set_state(SlotState::Idle);
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

/// An eviction victim: model, its backend and its lease.
type Victim = (String, Option<Arc<dyn Backend>>, Option<String>);

enum Next {
    Ready(SlotGuard),
    Wait(watch::Receiver<SlotState>),
    Load(ModelSpec),
}

/// MB free over all GPUs after each one's margin.
fn total_free(free: &[GpuFree], margin: u64) -> u64 {
    free.iter().map(|g| g.free_mb.saturating_sub(margin)).sum()
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
            }),
        }
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

    /// A snapshot of every slot.
    pub fn slots(&self) -> Vec<SlotInfo> {
        let st = self.inner.lock();
        st.slots
            .values()
            .map(|s| SlotInfo {
                model: s.spec.id.clone(),
                state: s.state,
                port: s.port,
                shares: s.shares.clone(),
                pinned: s.spec.pin,
                active: s.active,
                last_priority: s.last_priority,
                idle_s: s.last_used.elapsed().as_secs_f64(),
            })
            .collect()
    }

    /// State of a model's slot (IDLE when it has none).
    pub fn state(&self, model: &str) -> SlotState {
        self.inner
            .lock()
            .slots
            .get(model)
            .map_or(SlotState::Idle, |s| s.state)
    }

    /// Requests in progress on `model` (0 when it has no slot).
    pub fn active(&self, model: &str) -> usize {
        self.inner.lock().slots.get(model).map_or(0, |s| s.active)
    }

    /// Returns a guard on a READY slot of `model`, loading it first if needed (evicting
    /// lower-priority idle slots when memory is short). `priority`: smaller is more important.
    /// Cancel-safe: the load runs on a task of its own and finishes without its caller.
    pub async fn get_or_load(&self, model: &str, priority: i32) -> Result<SlotGuard, PoolError> {
        loop {
            let next = {
                let mut st = self.inner.lock();
                match st.slots.get_mut(model) {
                    Some(slot) if slot.state == SlotState::Ready => {
                        slot.active += 1;
                        slot.last_used = Instant::now();
                        slot.last_priority = priority;
                        slot.unload_at = None;
                        let backend_endpoint = slot.backend.as_ref().and_then(|b| b.endpoint());
                        Next::Ready(SlotGuard {
                            inner: Arc::clone(&self.inner),
                            model: model.to_owned(),
                            port: slot.port.unwrap_or_default(),
                            shares: slot.shares.clone(),
                            endpoint: backend_endpoint,
                        })
                    }
                    Some(slot)
                        if matches!(slot.state, SlotState::Loading | SlotState::Stopping) =>
                    {
                        Next::Wait(slot.tx.subscribe())
                    }
                    _ => {
                        let spec = st
                            .models
                            .get(model)
                            .cloned()
                            .ok_or_else(|| PoolError::UnknownModel(model.to_owned()))?;
                        let (tx, _) = watch::channel(SlotState::Loading);
                        st.slots.insert(
                            model.to_owned(),
                            Slot {
                                spec: spec.clone(),
                                state: SlotState::Loading,
                                backend: None,
                                port: None,
                                shares: Vec::new(),
                                placing: Vec::new(),
                                lease: None,
                                active: 0,
                                last_used: Instant::now(),
                                last_priority: priority,
                                unload_at: None,
                                tx,
                            },
                        );
                        Next::Load(spec)
                    }
                }
            };
            match next {
                Next::Ready(g) => return Ok(g),
                Next::Wait(mut rx) => {
                    // Sender dropped (slot removed) or state changed: look again.
                    let _ = rx.changed().await;
                }
                Next::Load(spec) => {
                    // On a task of its own: a caller that gives up must not leave the slot
                    // LOADING for good (its waiters waiting, its placement held) or a server
                    // half started.
                    let pool = self.clone();
                    return tokio::spawn(async move {
                        let loaded = pool.load(&spec, priority).await;
                        if loaded.is_err() {
                            pool.inner.remove_slot(&spec.id);
                        }
                        loaded
                    })
                    .await
                    .map_err(|e| PoolError::Join(e.to_string()))?;
                }
            }
        }
    }

    async fn frees(&self) -> Result<(Vec<GpuSample>, Vec<GpuFree>, Vec<GpuFree>), PoolError> {
        let monitor = Arc::clone(&self.inner.monitor);
        let ledger = self.inner.ledger.clone();
        blocking(move || -> Result<_, PoolError> {
            let samples = monitor.sample()?;
            let mut effective = Vec::new();
            let mut by_ledger = Vec::new();
            for s in &samples {
                let lf = match &ledger {
                    Some(l) => l.free_mb(s.index)?,
                    None => s.memory_free_mb,
                };
                by_ledger.push(GpuFree {
                    gpu: s.index,
                    free_mb: lf,
                });
                effective.push(GpuFree {
                    gpu: s.index,
                    free_mb: lf.min(s.memory_free_mb),
                });
            }
            Ok((samples, effective, by_ledger))
        })
        .await?
    }

    /// Picks and marks STOPPING the next eviction victim for a request of `priority`.
    fn take_victim(&self, incoming: &str, priority: i32) -> Option<Victim> {
        let mut st = self.inner.lock();
        let victim = st
            .slots
            .values()
            .filter(|s| {
                s.spec.id != incoming
                    && s.state == SlotState::Ready
                    && !s.spec.pin
                    && s.active == 0
                    && s.last_priority > priority
            })
            .max_by(|a, b| {
                a.last_priority
                    .cmp(&b.last_priority)
                    .then(b.last_used.cmp(&a.last_used))
            })
            .map(|s| s.spec.id.clone())?;
        let slot = st.slots.get_mut(&victim)?;
        slot.set_state(SlotState::Stopping);
        Some((victim, slot.backend.take(), slot.lease.take()))
    }

    async fn stop_slot(
        &self,
        model: &str,
        backend: Option<Arc<dyn Backend>>,
        lease: Option<String>,
    ) -> Result<(), PoolError> {
        let stopped = match backend {
            Some(b) => b.stop().await,
            None => Ok(()),
        };
        let released = match (self.inner.ledger.clone(), lease) {
            (Some(l), Some(id)) => blocking(move || l.release(&id))
                .await
                .and_then(|r| r.map(drop).map_err(PoolError::from)),
            _ => Ok(()),
        };
        // The slot goes whatever failed: left STOPPING, its callers would wait for ever.
        self.inner.remove_slot(model);
        tracing::info!(model, "model unloaded");
        stopped.map_err(PoolError::from)?;
        released
    }

    async fn load(&self, spec: &ModelSpec, priority: i32) -> Result<SlotGuard, PoolError> {
        let est = self.inner.estimator.estimate(&spec.facts)?;
        let need = est.mb;
        let margin = self.inner.cfg.margin_mb;
        let delay = Duration::from_millis(self.inner.cfg.reclaim_delay_ms);
        let mut reclaim_waits = 0;
        let mut races = 0;
        let (samples, shares, lease) = loop {
            let (samples, mut effective, by_ledger) = self.frees().await?;
            // Without a ledger, check and claim in one step: a concurrent load sees this one's
            // placement. `held_by_loads`: it would fit but for loads in progress.
            let mut held_by_loads = false;
            let placed = if self.inner.ledger.is_none() {
                let mut st = self.inner.lock();
                let left = st.minus_loading(&effective, &spec.id);
                let placed = split::place(need, &left, margin);
                match (&placed, st.slots.get_mut(&spec.id)) {
                    (Ok(shares), Some(slot)) => slot.placing.clone_from(shares),
                    (Err(_), _) => held_by_loads = split::place(need, &effective, margin).is_ok(),
                    (Ok(_), None) => {}
                }
                effective = left;
                placed
            } else {
                split::place(need, &effective, margin)
            };
            if let Ok(shares) = placed {
                let lease = match &self.inner.ledger {
                    Some(l) => {
                        let req = LeaseRequest {
                            owner: format!("pool:{}", spec.id),
                            pid: Some(std::process::id()),
                            parts: shares.iter().map(|s| (s.gpu, s.mb)).collect(),
                            ttl: Duration::from_secs(self.inner.cfg.lease_ttl_s),
                        };
                        let l = Arc::clone(l);
                        let m = Arc::clone(&self.inner.monitor);
                        match blocking(move || l.acquire_checked(&req, m.as_ref())).await? {
                            Ok(lease) => Some(lease.id),
                            // Someone else took it meanwhile: look again (a bounded
                            // number of times).
                            Err(LedgerError::Insufficient { .. }) if races < 10 => {
                                races += 1;
                                continue;
                            }
                            Err(LedgerError::Insufficient { available_mb, .. }) => {
                                return Err(PoolError::InsufficientVram {
                                    model: spec.id.clone(),
                                    need_mb: need,
                                    available_mb,
                                });
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    None => None,
                };
                break (samples, shares, lease);
            }
            // Room taken only by loads in progress (counted at their placement until READY,
            // though they may have allocated it already): evicting would be premature. Give up
            // for now; the caller tries again once they are READY.
            if held_by_loads {
                return Err(PoolError::InsufficientVram {
                    model: spec.id.clone(),
                    need_mb: need,
                    available_mb: total_free(&effective, margin),
                });
            }
            // Memory the ledger already shows free but the GPU does not yet: a reclaim in
            // progress. Wait for it before evicting more.
            if self.inner.ledger.is_some()
                && split::place(need, &by_ledger, margin).is_ok()
                && reclaim_waits < self.inner.cfg.reclaim_checks
            {
                reclaim_waits += 1;
                tokio::time::sleep(delay).await;
                continue;
            }
            match self.take_victim(&spec.id, priority) {
                Some((victim, backend, lease)) => {
                    tracing::info!(model = %spec.id, victim = %victim, need_mb = need, "evicting for a load");
                    self.stop_slot(&victim, backend, lease).await?;
                    reclaim_waits = 0;
                    tokio::time::sleep(delay).await;
                }
                None => {
                    return Err(PoolError::InsufficientVram {
                        model: spec.id.clone(),
                        need_mb: need,
                        available_mb: total_free(&effective, margin),
                    });
                }
            }
        };

        let release_lease = |lease: Option<String>| {
            let ledger = self.inner.ledger.clone();
            async move {
                if let (Some(l), Some(id)) = (ledger, lease) {
                    let _ = blocking(move || l.release(&id)).await;
                }
            }
        };
        let port = {
            let mut st = self.inner.lock();
            let used: Vec<u16> = st.slots.values().filter_map(|s| s.port).collect();
            let port =
                (self.inner.cfg.port_min..=self.inner.cfg.port_max).find(|p| !used.contains(p));
            if let (Some(p), Some(slot)) = (port, st.slots.get_mut(&spec.id)) {
                slot.port = Some(p);
            }
            port
        };
        let Some(port) = port else {
            release_lease(lease).await;
            return Err(PoolError::NoPort(
                self.inner.cfg.port_min,
                self.inner.cfg.port_max,
            ));
        };
        let backend = match self.inner.factory.create(&spec.id, &spec.settings) {
            Ok(b) => b,
            Err(e) => {
                release_lease(lease).await;
                return Err(e.into());
            }
        };
        let gpus: Vec<u32> = shares.iter().map(|s| s.gpu).collect();
        if let Err(e) = backend.start(port, &gpus, &spec.settings).await {
            let _ = backend.stop().await;
            release_lease(lease).await;
            return Err(e.into());
        }

        // Measure what the load really took; it replaces the estimate from now on.
        let monitor = Arc::clone(&self.inner.monitor);
        if let Ok(Ok(after)) = blocking(move || monitor.sample()).await {
            let mut total = 0;
            let mut per_gpu = Vec::new();
            for s in &shares {
                let before = samples
                    .iter()
                    .find(|x| x.index == s.gpu)
                    .map_or(0, |x| x.memory_used_mb);
                let now = after
                    .iter()
                    .find(|x| x.index == s.gpu)
                    .map_or(0, |x| x.memory_used_mb);
                let d = now.saturating_sub(before);
                total += d;
                per_gpu.push((s.gpu, d));
            }
            if total > 0 {
                self.inner
                    .estimator
                    .record_measured(&spec.facts.name, total);
                if let (Some(l), Some(id)) = (self.inner.ledger.clone(), lease.clone()) {
                    let _ = blocking(move || {
                        for (gpu, mb) in per_gpu.into_iter().filter(|p| p.1 > 0) {
                            let _ = l.resize(&id, gpu, mb);
                        }
                    })
                    .await;
                }
            }
        }

        let mut st = self.inner.lock();
        let Some(slot) = st.slots.get_mut(&spec.id) else {
            return Err(PoolError::Backend(BackendError::Other(
                "slot vanished during load".into(),
            )));
        };
        slot.backend = Some(Arc::clone(&backend));
        slot.shares = shares.clone();
        slot.lease = lease;
        slot.active = 1;
        slot.last_used = Instant::now();
        slot.last_priority = priority;
        slot.set_state(SlotState::Ready);
        tracing::info!(model = %spec.id, port, ?gpus, need_mb = need, source = ?est.source, "model ready");
        Ok(SlotGuard {
            inner: Arc::clone(&self.inner),
            model: spec.id.clone(),
            port,
            shares,
            endpoint: backend.endpoint(),
        })
    }

    /// Asks a READY model's backend whether it is healthy (`Ok(false)` when the model is not
    /// READY).
    pub async fn health(&self, model: &str) -> Result<bool, PoolError> {
        let backend = {
            let st = self.inner.lock();
            st.slots
                .get(model)
                .filter(|s| s.state == SlotState::Ready)
                .and_then(|s| s.backend.clone())
        };
        match backend {
            Some(b) => b.health().await.map(|()| true).map_err(PoolError::from),
            None => Ok(false),
        }
    }

    /// Unloads a model if it is READY, unpinned and unused; returns whether it did. Cancel-safe:
    /// the stop runs on a task of its own.
    pub async fn unload(&self, model: &str) -> Result<bool, PoolError> {
        let taken = {
            let mut st = self.inner.lock();
            match st.slots.get_mut(model) {
                Some(s) if s.state == SlotState::Ready && s.active == 0 && !s.spec.pin => {
                    s.set_state(SlotState::Stopping);
                    Some((s.backend.take(), s.lease.take()))
                }
                _ => None,
            }
        };
        let Some((backend, lease)) = taken else {
            return Ok(false);
        };
        // On a task of its own, like a load: a dropped caller must not leave it STOPPING.
        let (pool, model) = (self.clone(), model.to_owned());
        tokio::spawn(async move { pool.stop_slot(&model, backend, lease).await })
            .await
            .map_err(|e| PoolError::Join(e.to_string()))??;
        Ok(true)
    }

    /// Housekeeping, to call every few seconds: unloads slots whose stay-warm time ran out
    /// and renews the VRAM leases of live slots. Returns the models unloaded.
    pub async fn maintain(&self) -> Result<Vec<String>, PoolError> {
        let now = Instant::now();
        let (expired, leases): (Vec<String>, Vec<String>) = {
            let st = self.inner.lock();
            (
                st.slots
                    .values()
                    .filter(|s| {
                        s.state == SlotState::Ready
                            && s.active == 0
                            && !s.spec.pin
                            && s.unload_at.is_some_and(|t| t <= now)
                    })
                    .map(|s| s.spec.id.clone())
                    .collect(),
                st.slots.values().filter_map(|s| s.lease.clone()).collect(),
            )
        };
        if let Some(l) = self.inner.ledger.clone() {
            let ttl = Duration::from_secs(self.inner.cfg.lease_ttl_s);
            blocking(move || {
                leases.iter().try_for_each(|id| {
                    if !l.renew(id, ttl)? {
                        tracing::warn!(lease = %id, "VRAM lease expired before renewal (maintain not called often enough?)");
                    }
                    Ok::<(), LedgerError>(())
                })
            })
            .await??;
        }
        let mut out = Vec::new();
        // One model failing to stop does not keep the others loaded past their time.
        let mut failed = None;
        for m in expired {
            match self.unload(&m).await {
                Ok(true) => out.push(m),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(model = %m, error = %e, "stay-warm unload failed");
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// A backend factory over a [`SimFleet`]: starting a model allocates its VRAM (the
/// `actual_mb` setting, else `default_mb`) split evenly over its GPUs; stopping frees it
/// after `reclaim_ms` (as CUDA does). For tests and demos.
#[derive(Debug, Clone)]
pub struct SimBackendFactory {
    fleet: Arc<SimFleet>,
    /// MB a model takes when its settings carry no `actual_mb`.
    pub default_mb: u64,
    /// Delay before a stopped model's memory is freed, ms.
    pub reclaim_ms: u64,
}

impl SimBackendFactory {
    /// A factory over a fleet.
    pub fn new(fleet: Arc<SimFleet>, default_mb: u64, reclaim_ms: u64) -> Self {
        Self {
            fleet,
            default_mb,
            reclaim_ms,
        }
    }
}

struct SimBackend {
    fleet: Arc<SimFleet>,
    key: String,
    mb: u64,
    reclaim_ms: u64,
    endpoint: Mutex<Option<String>>,
}

impl BackendFactory for SimBackendFactory {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let mb = settings
            .get("actual_mb")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(self.default_mb);
        Ok(Arc::new(SimBackend {
            fleet: Arc::clone(&self.fleet),
            key: model_id.to_owned(),
            mb,
            reclaim_ms: self.reclaim_ms,
            endpoint: Mutex::new(None),
        }))
    }
}

#[async_trait]
impl Backend for SimBackend {
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        _settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        if gpus.is_empty() {
            return Err(BackendError::Config("no GPU".into()));
        }
        let n = gpus.len() as u64;
        for (i, &g) in gpus.iter().enumerate() {
            let part = self.mb / n + u64::from((i as u64) < self.mb % n);
            if let Err(e) = self.fleet.load(g, &self.key, part, None) {
                self.fleet.unload_everywhere(&self.key);
                return Err(BackendError::StartFailed(e.to_string()));
            }
        }
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(format!("http://127.0.0.1:{port}"));
        Ok(())
    }

    async fn stop(&self) -> Result<(), BackendError> {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let fleet = Arc::clone(&self.fleet);
        let key = self.key.clone();
        let delay = Duration::from_millis(self.reclaim_ms);
        if delay.is_zero() {
            fleet.unload_everywhere(&key);
        } else {
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                fleet.unload_everywhere(&key);
            });
        }
        Ok(())
    }

    async fn health(&self) -> Result<(), BackendError> {
        if self
            .endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            Ok(())
        } else {
            Err(BackendError::NotRunning("not started".into()))
        }
    }

    fn endpoint(&self) -> Option<String> {
        self.endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
