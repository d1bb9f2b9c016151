//! The seam's [`UpstreamPool`] on the [`ModelPool`]: get-or-load with priority-aware eviction,
//! stay-warm timers, and per-request keep-alive on top. A gateway (horos-coordinator) sends its
//! requests to the pool through it without knowing the pool.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use horos_server_control::{
    Readiness, SlotState, SlotView, UpstreamError, UpstreamLease, UpstreamPool,
};

use super::{Category, ModelPool, ModelSpec, PoolError};

#[derive(Default)]
struct State {
    models: BTreeSet<String>,
    /// The models of category vision (they read images).
    vision: BTreeSet<String>,
    /// The request paths models serve, where declared.
    paths: BTreeMap<String, Vec<String>>,
    /// Keep-alive deadlines set by requests: model → (until, priority to touch it with).
    keep: BTreeMap<String, (Instant, i32)>,
}

/// The model pool as an upstream. Cheap to clone.
#[derive(Clone)]
pub struct PoolUpstream {
    pool: ModelPool,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for PoolUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolUpstream")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl PoolUpstream {
    /// Wraps `pool` and registers `models` in it.
    pub fn new(pool: ModelPool, models: impl IntoIterator<Item = ModelSpec>) -> Self {
        let me = Self {
            pool,
            state: Arc::new(Mutex::new(State::default())),
        };
        for spec in models {
            me.register(spec);
        }
        me
    }

    /// Registers (or replaces) a model.
    pub fn register(&self, spec: ModelSpec) {
        let mut state = self.lock();
        state.models.insert(spec.id.clone());
        if spec.category == Category::Vision {
            state.vision.insert(spec.id.clone());
        } else {
            state.vision.remove(&spec.id);
        }
        drop(state);
        self.pool.register(spec);
    }

    /// Declares the request paths `model`'s server serves (its backend kind's, say): a request
    /// for another path is refused before the model is loaded. Undeclared: every request is
    /// forwarded.
    pub fn declare_paths(&self, model: &str, paths: impl IntoIterator<Item = impl Into<String>>) {
        let paths = paths.into_iter().map(Into::into).collect();
        self.lock().paths.insert(model.to_owned(), paths);
    }

    /// The pool.
    pub fn pool(&self) -> &ModelPool {
        &self.pool
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn map_err(e: PoolError) -> UpstreamError {
    match e {
        PoolError::UnknownModel(m) => UpstreamError::UnknownModel(m),
        PoolError::InsufficientVram { model, .. } => UpstreamError::NoCapacity(model),
        PoolError::NoPort(..) => UpstreamError::NoCapacity(e.to_string()),
        other => UpstreamError::Failed(other.to_string()),
    }
}

#[async_trait]
impl UpstreamPool for PoolUpstream {
    fn models(&self) -> Vec<String> {
        self.lock().models.iter().cloned().collect()
    }

    fn paths(&self, model: &str) -> Option<Vec<String>> {
        self.lock().paths.get(model).cloned()
    }

    fn serves_path(&self, model: &str, path: &str) -> Option<bool> {
        self.lock()
            .paths
            .get(model)
            .map(|p| p.iter().any(|x| x == path))
    }

    fn reads_images(&self, model: &str) -> Option<bool> {
        let state = self.lock();
        state
            .models
            .contains(model)
            .then(|| state.vision.contains(model))
    }

    fn readiness(&self, model: &str) -> Readiness {
        if !self.lock().models.contains(model) {
            return Readiness::Unknown;
        }
        match self.pool.state(model) {
            SlotState::Ready => Readiness::Ready,
            SlotState::Sleeping => Readiness::Asleep,
            _ => Readiness::Cold,
        }
    }

    fn expected_ready_s(&self, model: &str) -> Option<f64> {
        self.pool.expected_ready_s(model)
    }

    async fn acquire(&self, model: &str, priority: i32) -> Result<UpstreamLease, UpstreamError> {
        // Cancel-safe: the pool runs a load on a task of its own.
        let guard = self
            .pool
            .get_or_load(model, priority)
            .await
            .map_err(map_err)?;
        let endpoint = guard
            .endpoint()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", guard.port()));
        Ok(UpstreamLease::new(endpoint, Some(Box::new(guard))))
    }

    fn active(&self, model: &str) -> Option<usize> {
        Some(self.pool.active(model))
    }

    async fn unload(&self, model: &str) -> Result<bool, UpstreamError> {
        if !self.lock().models.contains(model) {
            return Err(UpstreamError::UnknownModel(model.to_owned()));
        }
        let gone = self.pool.unload(model).await.map_err(map_err)?;
        if gone {
            self.lock().keep.remove(model);
        }
        Ok(gone)
    }

    fn pin(&self, model: &str, pinned: bool) -> Result<(), UpstreamError> {
        self.pool.pin(model, pinned).map_err(map_err)
    }

    fn keep_alive(&self, model: &str, keep_alive: Duration) {
        let until = Instant::now() + keep_alive;
        let prio = self
            .pool
            .slots()
            .into_iter()
            .find(|s| s.model == model)
            .map_or(i32::MAX, |s| s.last_priority);
        self.lock().keep.insert(model.to_owned(), (until, prio));
    }

    async fn maintain(&self) -> Result<Vec<String>, UpstreamError> {
        let now = Instant::now();
        let keep: Vec<(String, Instant, i32)> = self
            .lock()
            .keep
            .iter()
            .map(|(m, (t, p))| (m.clone(), *t, *p))
            .collect();
        let mut unloaded = Vec::new();
        // A failed unload is reported after the pool's own housekeeping (lease renewal) ran.
        let mut failed = None;
        for (model, until, prio) in keep {
            let ready = self.pool.state(&model) == SlotState::Ready;
            if until <= now {
                // The request asked for less than the default stay-warm: unload now (no-op
                // while the model is busy; then its timer starts again at release).
                let gone = if ready {
                    match self.pool.unload(&model).await {
                        Ok(gone) => gone,
                        Err(e) => {
                            failed.get_or_insert(map_err(e));
                            continue;
                        }
                    }
                } else {
                    true
                };
                if gone {
                    self.lock().keep.remove(&model);
                    if ready {
                        unloaded.push(model);
                    }
                }
            } else if ready {
                // Longer than the default: touch the slot so its own timer does not fire
                // first. On a spawned task, so a load (after a race with an eviction) is
                // never interrupted.
                let pool = self.pool.clone();
                let _ = tokio::spawn(async move {
                    drop(pool.get_or_load(&model, prio).await);
                })
                .await;
            } else {
                self.lock().keep.remove(&model);
            }
        }
        unloaded.extend(self.pool.maintain().await.map_err(map_err)?);
        match failed {
            Some(e) => Err(e),
            None => Ok(unloaded),
        }
    }

    fn slots(&self) -> Vec<SlotView> {
        self.pool
            .slots()
            .into_iter()
            .map(|s| SlotView {
                model: s.model,
                state: s.state,
                sleep_level: s.sleep_level,
                port: s.port,
                active: s.active,
                pinned: s.pinned,
                idle_s: s.idle_s,
                gpus: s.shares,
            })
            .collect()
    }
}
