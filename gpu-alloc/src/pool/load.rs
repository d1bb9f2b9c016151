//! Get-or-load: a slot per model, the placement of a load on the GPUs (with the ledger or,
//! without one, against loads in progress), eviction when memory is short, the start of the
//! backend and the measurement of what it really took.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::ledger::{LeaseRequest, LedgerError};
use crate::monitor::GpuSample;
use crate::split::{self, GpuFree};

use super::{
    Backend, BackendError, ModelPool, ModelSpec, PoolError, PoolState, Slot, SlotGuard, SlotState,
    blocking, first_gpu,
};
use crate::allocator::SwapKind;
use crate::catalogue::SleepLevel;
use crate::split::Share;

enum Next {
    Ready(SlotGuard),
    Wait(watch::Receiver<SlotState>),
    Load(ModelSpec),
    Wake(Waking),
}

/// A sleeping slot taken to be woken: its spec, server, where it sleeps and at what level.
pub(super) struct Waking {
    spec: ModelSpec,
    backend: Arc<dyn Backend>,
    shares: Vec<Share>,
    level: SleepLevel,
}

/// `fixed`'s shares if every GPU of them has the room (after `margin`), else `None`.
fn place_on(fixed: &[Share], free: &[GpuFree], margin: u64) -> Option<Vec<Share>> {
    fixed
        .iter()
        .all(|s| {
            free.iter()
                .find(|g| g.gpu == s.gpu)
                .is_some_and(|g| g.free_mb.saturating_sub(margin) >= s.mb)
        })
        .then(|| fixed.to_vec())
}

/// MB free over all GPUs after each one's margin.
fn total_free(free: &[GpuFree], margin: u64) -> u64 {
    free.iter().map(|g| g.free_mb.saturating_sub(margin)).sum()
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

impl ModelPool {
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
                    Some(slot) if slot.state == SlotState::Sleeping => {
                        match (slot.backend.clone(), slot.asleep) {
                            (Some(backend), Some((level, _))) => {
                                // LOADING while it wakes: others wait for it as for a load.
                                slot.set_state(SlotState::Loading);
                                slot.last_priority = priority;
                                Next::Wake(Waking {
                                    spec: slot.spec.clone(),
                                    backend,
                                    shares: slot.shares.clone(),
                                    level,
                                })
                            }
                            // Not a sleeper after all: loaded again from scratch.
                            _ => {
                                slot.set_state(SlotState::Loading);
                                slot.asleep = None;
                                Next::Load(slot.spec.clone())
                            }
                        }
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
                                asleep: None,
                                host_mb: 0,
                                tx,
                                state_since: Instant::now(),
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
                Next::Wake(waking) => {
                    // On a task of its own, like a load.
                    let pool = self.clone();
                    return tokio::spawn(async move {
                        let id = waking.spec.id.clone();
                        let woken = pool.wake_slot(waking, priority).await;
                        if woken.is_err() {
                            pool.inner.remove_slot(&id);
                        }
                        woken
                    })
                    .await
                    .map_err(|e| PoolError::Join(e.to_string()))?;
                }
            }
        }
    }

    /// The GPUs' samples, and the room of those the pool may place on now (its given GPUs,
    /// where it is confined): by the ledger and the monitor together, and by the ledger alone.
    async fn frees(&self) -> Result<(Vec<GpuSample>, Vec<GpuFree>, Vec<GpuFree>), PoolError> {
        let monitor = Arc::clone(&self.inner.monitor);
        let ledger = self.inner.ledger.clone();
        let given = self.given_gpus();
        blocking(move || -> Result<_, PoolError> {
            let samples = monitor.sample()?;
            let mut effective = Vec::new();
            let mut by_ledger = Vec::new();
            let placeable = |gpu: u32| given.as_ref().is_none_or(|g| g.contains(&gpu));
            for s in samples.iter().filter(|s| placeable(s.index)) {
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

    /// Wakes a sleeping model on the GPUs it sleeps on, once there is room there (evicting
    /// for it as for a load). A wake that fails, or that finds no room there, stops the
    /// sleeper and loads the model again from scratch, wherever there is room.
    async fn wake_slot(&self, w: Waking, priority: i32) -> Result<SlotGuard, PoolError> {
        let Waking {
            spec,
            backend,
            shares,
            level,
        } = w;
        let need: u64 = shares.iter().map(|s| s.mb).sum();
        let gpu = first_gpu(&shares);
        let restart = |why: String| {
            tracing::warn!(model = %spec.id, reason = %why, "wake failed: stopping the sleeper and loading it again");
        };
        match self.room(&spec, need, Some(&shares), priority).await {
            Ok((_, shares, lease)) => {
                let t = Instant::now();
                match backend.wake().await {
                    Ok(()) => {
                        self.inner
                            .measured(&spec.id, gpu, SwapKind::Wake(level), t.elapsed())
                            .await;
                        let mut st = self.inner.lock();
                        let Some(slot) = st.slots.get_mut(&spec.id) else {
                            return Err(PoolError::Backend(BackendError::Other(
                                "slot vanished during wake".into(),
                            )));
                        };
                        slot.asleep = None;
                        slot.host_mb = 0;
                        slot.lease = lease;
                        slot.shares = shares.clone();
                        slot.active = 1;
                        slot.last_used = Instant::now();
                        slot.last_priority = priority;
                        slot.set_state(SlotState::Ready);
                        let port = slot.port.unwrap_or_default();
                        self.inner.sync_host(&st);
                        tracing::info!(model = %spec.id, level = level.number(), "model awake");
                        return Ok(SlotGuard {
                            inner: Arc::clone(&self.inner),
                            model: spec.id.clone(),
                            port,
                            shares,
                            endpoint: backend.endpoint(),
                        });
                    }
                    Err(e) => {
                        restart(e.to_string());
                        let _ = self.release_lease(&spec.id, lease).await;
                    }
                }
            }
            Err(e) => restart(format!("no room where it sleeps: {e}")),
        }
        if let Err(e) = self.stop_server(&spec.id, gpu, backend.as_ref()).await {
            tracing::warn!(model = %spec.id, error = %e, "stopping a sleeper that did not wake");
        }
        {
            let mut st = self.inner.lock();
            if let Some(slot) = st.slots.get_mut(&spec.id) {
                slot.asleep = None;
                slot.host_mb = 0;
                slot.backend = None;
                slot.shares.clear();
                slot.port = None;
            }
            self.inner.sync_host(&st);
        }
        self.load(&spec, priority).await
    }

    /// Makes room for `need` MB of `spec` (on `fixed`'s GPUs and shares, where given: a
    /// sleeper wakes where it sleeps), evicting lower-priority idle models when memory is
    /// short, and takes the VRAM lease. Returns the samples before, the shares and the lease.
    async fn room(
        &self,
        spec: &ModelSpec,
        need: u64,
        fixed: Option<&[Share]>,
        priority: i32,
    ) -> Result<(Vec<GpuSample>, Vec<Share>, Option<String>), PoolError> {
        let margin = self.inner.cfg.margin_mb;
        let delay = Duration::from_millis(self.inner.cfg.reclaim_delay_ms);
        let mut reclaim_waits = 0;
        let mut races = 0;
        let place = |free: &[GpuFree]| match fixed {
            Some(f) => place_on(f, free, margin).ok_or(()),
            None => split::place(need, free, margin).map_err(drop),
        };
        loop {
            let (samples, mut effective, by_ledger) = self.frees().await?;
            // Without a ledger, check and claim in one step: a concurrent load sees this one's
            // placement. `held_by_loads`: it would fit but for loads in progress.
            let mut held_by_loads = false;
            let placed = if self.inner.ledger.is_none() {
                let mut st = self.inner.lock();
                let left = st.minus_loading(&effective, &spec.id);
                let placed = place(&left);
                match (&placed, st.slots.get_mut(&spec.id)) {
                    (Ok(shares), Some(slot)) => slot.placing.clone_from(shares),
                    (Err(()), _) => held_by_loads = place(&effective).is_ok(),
                    (Ok(_), None) => {}
                }
                effective = left;
                placed
            } else {
                place(&effective)
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
                        let (owner, parts) = (req.owner.clone(), req.parts.clone());
                        match blocking(move || l.acquire_checked(&req, m.as_ref())).await? {
                            Ok(lease) => {
                                self.inner.monitor.occupy(&owner, &parts);
                                Some(lease.id)
                            }
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
                return Ok((samples, shares, lease));
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
                && place(&by_ledger).is_ok()
                && reclaim_waits < self.inner.cfg.reclaim_checks
            {
                reclaim_waits += 1;
                tokio::time::sleep(delay).await;
                continue;
            }
            let on: Option<Vec<u32>> = fixed.map(|f| f.iter().map(|s| s.gpu).collect());
            match self.take_victim(&spec.id, priority, on.as_deref()) {
                Some(victim) => {
                    tracing::info!(model = %spec.id, victim = %victim.model, need_mb = need, "evicting for a load");
                    self.retire_slot(victim).await?;
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
        }
    }

    async fn load(&self, spec: &ModelSpec, priority: i32) -> Result<SlotGuard, PoolError> {
        let est = self.inner.estimator.estimate(&spec.facts)?;
        let need = est.mb;
        let (samples, shares, lease) = self.room(spec, need, None, priority).await?;

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
            let _ = self.release_lease(&spec.id, lease).await;
            return Err(PoolError::NoPort(
                self.inner.cfg.port_min,
                self.inner.cfg.port_max,
            ));
        };
        let backend = match self.inner.factory.create(&spec.id, &spec.settings) {
            Ok(b) => b,
            Err(e) => {
                let _ = self.release_lease(&spec.id, lease).await;
                return Err(e.into());
            }
        };
        let gpus: Vec<u32> = shares.iter().map(|s| s.gpu).collect();
        let shares_mb: Vec<u64> = shares.iter().map(|s| s.mb).collect();
        let started = Instant::now();
        if let Err(e) = backend
            .start_split(port, &gpus, &shares_mb, &spec.settings)
            .await
        {
            let _ = backend.stop().await;
            let _ = self.release_lease(&spec.id, lease).await;
            return Err(e.into());
        }
        self.inner
            .measured(
                &spec.id,
                first_gpu(&shares),
                SwapKind::Load,
                started.elapsed(),
            )
            .await;

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
}
