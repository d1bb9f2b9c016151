//! Stopping slots: eviction victims, explicit unloads, the stay-warm timer and lease
//! renewal ([`ModelPool::maintain`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::ledger::LedgerError;

use super::{
    Backend, BackendError, HOST_OWNER, ModelPool, ModelSpec, PoolError, PoolState, Slot, SlotState,
    blocking, catalogue_of, cost_key, first_gpu,
};
use crate::allocator::{
    Outgoing, OutgoingChoice, OutgoingReason, SwapCosts, SwapKind, choose_outgoing,
};
use crate::catalogue::SleepLevel;
use crate::split::Share;

/// A model taken out of service (marked STOPPING): to be put to sleep or stopped.
pub(super) struct Victim {
    pub(super) model: String,
    pub(super) spec: ModelSpec,
    pub(super) backend: Option<Arc<dyn Backend>>,
    pub(super) lease: Option<String>,
    pub(super) shares: Vec<Share>,
}

impl Victim {
    fn gpu(&self) -> u32 {
        first_gpu(&self.shares)
    }
}

/// What becomes of `spec`'s model, placed as `shares`, when it leaves its GPU: asleep at a
/// level or stopped, as [`choose_outgoing`] decides from the measured costs (where it
/// `can_sleep`, level 1 within `host_room`).
fn outgoing_of(
    costs: &SwapCosts,
    spec: &ModelSpec,
    shares: &[Share],
    can_sleep: bool,
    host_room: u64,
) -> OutgoingChoice {
    let gpu = first_gpu(shares);
    let catalogue = catalogue_of(costs, spec, gpu, shares.iter().map(|s| s.mb).sum());
    choose_outgoing(
        &catalogue,
        costs,
        &cost_key(&spec.id),
        gpu,
        can_sleep,
        host_room,
    )
}

/// Seconds to take `s`'s model off its GPU and bring it back, the cheapest way
/// [`outgoing_of`] knows (a sleep and a wake where it `can_sleep`, else a stop and a load).
fn round_trip_s(costs: &SwapCosts, s: &Slot, can_sleep: bool, host_room: u64) -> f64 {
    match outgoing_of(costs, &s.spec, &s.shares, can_sleep, host_room).reason {
        OutgoingReason::Cheapest { now_s, back_s, .. } => now_s + back_s,
        OutgoingReason::CannotSleep => {
            let (gpu, key) = (s.gpu(), cost_key(&s.spec.id));
            let catalogue = catalogue_of(costs, &s.spec, gpu, 0);
            costs.cost_s(&catalogue, &key, gpu, SwapKind::Stop)
                + costs.cost_s(&catalogue, &key, gpu, SwapKind::Load)
        }
    }
}

/// How round trip `a` compares with `b`, equal within the noise of a measurement (a tenth of
/// a second, or a fifth of the larger).
fn cheaper(a: f64, b: f64) -> std::cmp::Ordering {
    if (a - b).abs() <= (0.2 * a.max(b)).max(0.1) {
        std::cmp::Ordering::Equal
    } else {
        a.total_cmp(&b)
    }
}

impl ModelPool {
    /// Marks `model`'s slot STOPPING and takes it out of service, if `eligible` says so.
    fn take(&self, model: &str, eligible: impl Fn(&Slot) -> bool) -> Option<Victim> {
        let mut st = self.inner.lock();
        let victim = st.slots.get_mut(model).filter(|s| eligible(s))?.take_out();
        self.inner.sync_host(&st);
        Some(victim)
    }

    /// Picks and marks STOPPING the next eviction victim for a request of `priority` (one
    /// placed on `on`'s GPUs, where given): the least important idle model, and among equals
    /// the one cheapest to take off and bring back by the measured costs (a model that sleeps
    /// and wakes in seconds before one that reloads in minutes), then the least recently used.
    pub(super) fn take_victim(
        &self,
        incoming: &str,
        priority: i32,
        on: Option<&[u32]>,
    ) -> Option<Victim> {
        let costs = self.inner.costs().clone();
        let host_room = self.inner.host.get().map_or(0, |h| h.room_for(HOST_OWNER));
        let victim = {
            let st = self.inner.lock();
            let round_trip = |s: &Slot| {
                let can_sleep =
                    self.inner.cfg.sleep && s.backend.as_ref().is_some_and(|b| b.can_sleep());
                round_trip_s(&costs, s, can_sleep, host_room)
            };
            st.slots
                .values()
                .filter(|s| {
                    s.spec.id != incoming
                        && s.state == SlotState::Ready
                        && !s.spec.pin
                        && s.active == 0
                        && s.last_priority > priority
                        && on.is_none_or(|g| s.shares.iter().any(|x| g.contains(&x.gpu)))
                })
                .map(|s| (s, round_trip(s)))
                .max_by(|(a, ra), (b, rb)| {
                    a.last_priority
                        .cmp(&b.last_priority)
                        .then(cheaper(*rb, *ra))
                        .then(b.last_used.cmp(&a.last_used))
                })
                .map(|(s, _)| s.spec.id.clone())?
        };
        self.take(&victim, |s| s.state == SlotState::Ready && s.active == 0)
    }

    /// What becomes of `v`: put to sleep at a level or stopped ([`outgoing_of`]), with the
    /// host RAM the pool could use.
    fn outgoing(&self, v: &Victim) -> OutgoingChoice {
        let can_sleep = self.inner.cfg.sleep && v.backend.as_ref().is_some_and(|b| b.can_sleep());
        let host_room = self.inner.host.get().map_or(0, |h| h.room_for(HOST_OWNER));
        outgoing_of(
            &self.inner.costs(),
            &v.spec,
            &v.shares,
            can_sleep,
            host_room,
        )
    }

    /// Reserves host RAM for `v`'s weights asleep at level 1, taking the pool's own level-1
    /// sleepers (lowest priority, then oldest, first) to be stopped to make room. Returns them
    /// and whether the room is held (`false`: even all of them would not make room; nothing
    /// taken then).
    fn hold_host(&self, v: &Victim) -> (Vec<Victim>, bool) {
        let need: u64 = v.shares.iter().map(|s| s.mb).sum();
        let Some(room) = self.inner.host.get().map(|h| h.room_for(HOST_OWNER)) else {
            return (Vec::new(), false);
        };
        let mut evict = Vec::new();
        let mut st = self.inner.lock();
        let held = |st: &PoolState| -> u64 { st.slots.values().map(|s| s.host_mb).sum() };
        let asleep = |s: &Slot| s.state == SlotState::Sleeping && s.host_mb > 0;
        let level_one: u64 = st
            .slots
            .values()
            .filter(|s| asleep(s))
            .map(|s| s.host_mb)
            .sum();
        if held(&st).saturating_sub(level_one) + need > room {
            return (evict, false);
        }
        while held(&st) + need > room {
            let next = st
                .slots
                .values()
                .filter(|s| asleep(s))
                .max_by(|a, b| {
                    a.last_priority
                        .cmp(&b.last_priority)
                        .then(b.asleep.map(|x| x.1).cmp(&a.asleep.map(|x| x.1)))
                })
                .map(|s| s.spec.id.clone());
            let Some(slot) = next.and_then(|m| st.slots.get_mut(&m)) else {
                break;
            };
            evict.push(slot.take_out());
        }
        let fits = held(&st) + need <= room;
        if fits && let Some(slot) = st.slots.get_mut(&v.model) {
            slot.host_mb = need;
        }
        self.inner.sync_host(&st);
        (evict, fits)
    }

    /// Puts `v` to sleep or stops it, as [`ModelPool::outgoing`] chooses (a sleep that fails
    /// stops it instead); each swap timed into the costs.
    pub(super) async fn retire_slot(&self, v: Victim) -> Result<(), PoolError> {
        let mut choice = self.outgoing(&v);
        if choice.choice == Outgoing::Sleep(SleepLevel::One) {
            let (evict, held) = self.hold_host(&v);
            for e in evict {
                tracing::info!(model = %e.model, room_for = %v.model, "asleep at level 1 stopped: host RAM");
                if let Err(err) = self.stop_victim(e).await {
                    tracing::warn!(error = %err, "stopping a sleeper for host RAM");
                }
            }
            if !held {
                // Taken meanwhile by others: level 2 keeps nothing in host RAM.
                choice.choice = Outgoing::Sleep(SleepLevel::Two);
            }
        }
        let reason = serde_json::to_string(&choice.reason).unwrap_or_default();
        let (Outgoing::Sleep(level), Some(backend)) = (choice.choice, v.backend.clone()) else {
            tracing::info!(model = %v.model, %reason, "stopped");
            return self.stop_victim(v).await;
        };
        let t = Instant::now();
        match backend.sleep(level).await {
            Ok(()) => {
                self.inner
                    .measured(&v.model, v.gpu(), SwapKind::Sleep(level), t.elapsed())
                    .await;
                self.release_lease(&v.model, v.lease.clone()).await?;
                let mut st = self.inner.lock();
                if let Some(slot) = st.slots.get_mut(&v.model) {
                    slot.backend = Some(backend);
                    slot.asleep = Some((level, Instant::now()));
                    if level != SleepLevel::One {
                        slot.host_mb = 0;
                    }
                    slot.set_state(SlotState::Sleeping);
                }
                self.inner.sync_host(&st);
                tracing::info!(model = %v.model, level = level.number(), %reason, "model asleep");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(model = %v.model, error = %e, "sleep failed: stopping it");
                self.stop_victim(v).await
            }
        }
    }

    /// Gives `model`'s `lease` back to the ledger, if there are both (its memory vacated).
    pub(super) async fn release_lease(
        &self,
        model: &str,
        lease: Option<String>,
    ) -> Result<(), PoolError> {
        match (self.inner.ledger.clone(), lease) {
            (Some(l), Some(id)) => {
                self.inner.monitor.vacate(&format!("pool:{model}"));
                blocking(move || l.release(&id))
                    .await
                    .and_then(|r| r.map(drop).map_err(PoolError::from))
            }
            _ => Ok(()),
        }
    }

    /// Stops `model`'s server, timed into the costs (on `gpu`) when it stopped.
    pub(super) async fn stop_server(
        &self,
        model: &str,
        gpu: u32,
        backend: &dyn Backend,
    ) -> Result<(), BackendError> {
        let t = Instant::now();
        backend.stop().await?;
        self.inner
            .measured(model, gpu, SwapKind::Stop, t.elapsed())
            .await;
        Ok(())
    }

    /// Stops `v`'s server (timed), gives its lease back and forgets its slot.
    pub(super) async fn stop_victim(&self, v: Victim) -> Result<(), PoolError> {
        let stopped = match &v.backend {
            Some(b) => self.stop_server(&v.model, v.gpu(), b.as_ref()).await,
            None => Ok(()),
        };
        let released = self.release_lease(&v.model, v.lease).await;
        // The slot goes whatever failed: left STOPPING, its callers would wait for ever.
        self.inner.remove_slot(&v.model);
        tracing::info!(model = %v.model, "model unloaded");
        stopped.map_err(PoolError::from)?;
        released
    }

    /// Unloads a model if it is READY, unpinned and unused, or asleep; returns whether it did.
    /// Cancel-safe: the stop runs on a task of its own.
    pub async fn unload(&self, model: &str) -> Result<bool, PoolError> {
        let taken = self.take(model, |s| {
            s.state == SlotState::Sleeping
                || (s.state == SlotState::Ready && s.active == 0 && !s.spec.pin)
        });
        let Some(victim) = taken else {
            return Ok(false);
        };
        // On a task of its own, like a load: a dropped caller must not leave it STOPPING.
        let pool = self.clone();
        tokio::spawn(async move { pool.stop_victim(victim).await })
            .await
            .map_err(|e| PoolError::Join(e.to_string()))??;
        Ok(true)
    }

    /// Takes `model`'s GPU memory back if it is READY, unpinned and unused: puts it to sleep
    /// where it can sleep and that is the cheaper choice, else stops it; returns whether it
    /// did. Cancel-safe, like [`ModelPool::unload`].
    pub async fn retire(&self, model: &str) -> Result<bool, PoolError> {
        let taken = self.take(model, |s| {
            s.state == SlotState::Ready && s.active == 0 && !s.spec.pin
        });
        let Some(victim) = taken else {
            return Ok(false);
        };
        let pool = self.clone();
        tokio::spawn(async move { pool.retire_slot(victim).await })
            .await
            .map_err(|e| PoolError::Join(e.to_string()))??;
        Ok(true)
    }

    /// Stops every model at shutdown (once no request runs): pinned ones and sleepers too, and
    /// those loading or waking once their load ends (it runs on a task of its own and would
    /// otherwise leave a server and its lease behind), waiting at most two minutes for them.
    /// A failure is logged and the others are still stopped.
    pub async fn unload_all(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let slots = self.slots();
            if slots.is_empty() {
                return;
            }
            let mut busy = Vec::new();
            for slot in slots {
                let taken = self.take(&slot.model, |s| {
                    matches!(
                        s.state,
                        SlotState::Ready | SlotState::Sleeping | SlotState::Idle
                    )
                });
                let Some(victim) = taken else {
                    busy.push(slot.model);
                    continue;
                };
                let pool = self.clone();
                match tokio::spawn(async move { pool.stop_victim(victim).await }).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(model = %slot.model, error = %e, "unloading at shutdown failed")
                    }
                    Err(e) => {
                        tracing::warn!(model = %slot.model, error = %e, "unloading at shutdown failed")
                    }
                }
            }
            if busy.is_empty() {
                continue;
            }
            if std::time::Instant::now() >= deadline {
                tracing::warn!(models = ?busy, "still loading or stopping at shutdown: left");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The idle READY models placed on any of `gpus` (pinned ones too when `pinned`), unpinned
    /// first, the longest idle first.
    fn idle_on(&self, gpus: &[u32], pinned: bool) -> Vec<super::SlotInfo> {
        let mut idle: Vec<_> = self
            .slots()
            .into_iter()
            .filter(|s| {
                s.state == SlotState::Ready
                    && s.active == 0
                    && (pinned || !s.pinned)
                    && s.shares.iter().any(|sh| gpus.contains(&sh.gpu))
            })
            .collect();
        idle.sort_by(|a, b| a.pinned.cmp(&b.pinned).then(b.idle_s.total_cmp(&a.idle_s)));
        idle
    }

    /// A GPU leaves a confined pool (see [`ModelPool::confine_to_given_gpus`]): unloads one idle
    /// model placed on any of `gpus`, pinned ones included (a pinned model belongs on the pool's
    /// GPUs, not on a lane's: its next request loads it again where the pool has room), and
    /// returns its name; `None` when no idle model is left there.
    pub async fn evacuate_one_idle(&self, gpus: &[u32]) -> Option<String> {
        for slot in self.idle_on(gpus, true) {
            let taken = self.take(&slot.model, |s| {
                s.state == SlotState::Ready && s.active == 0
            });
            let Some(victim) = taken else {
                continue;
            };
            let pool = self.clone();
            match tokio::spawn(async move { pool.retire_slot(victim).await }).await {
                Ok(Ok(())) => return Some(slot.model),
                Ok(Err(e)) => {
                    tracing::warn!(model = %slot.model, error = %e, "could not take a pooled model off a GPU leaving the pool")
                }
                Err(e) => tracing::warn!(model = %slot.model, error = %e, "unload task failed"),
            }
        }
        None
    }

    /// Makes room on `gpus` for something outside the pool (a lane's server the allocator
    /// switched a GPU to): unloads the idle, unpinned model placed on any of them that has been
    /// idle longest, and returns its name; `None` when there is none. A model serving a request
    /// or pinned stays; one taken by a request between the look and the unload is skipped for
    /// the next. The pool loads it again on its next request, wherever there is room.
    pub async fn unload_one_idle(&self, gpus: &[u32]) -> Option<String> {
        for slot in self.idle_on(gpus, false) {
            match self.retire(&slot.model).await {
                Ok(true) => return Some(slot.model),
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(model = %slot.model, error = %e, "could not unload an idle pooled model")
                }
            }
        }
        None
    }

    /// Housekeeping, to call every few seconds: retires slots whose stay-warm time ran out
    /// (asleep or stopped, [`ModelPool::retire`]), stops those asleep for longer than
    /// `stay_asleep_s`, and renews the VRAM leases of live slots. Returns the models taken off
    /// their GPUs.
    pub async fn maintain(&self) -> Result<Vec<String>, PoolError> {
        let now = Instant::now();
        let asleep_for = Duration::from_secs(self.inner.cfg.stay_asleep_s);
        let (expired, sleepy, leases): (Vec<String>, Vec<String>, Vec<String>) = {
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
                st.slots
                    .values()
                    .filter(|s| {
                        s.state == SlotState::Sleeping
                            && s.asleep
                                .is_some_and(|(_, t)| now.duration_since(t) >= asleep_for)
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
            match self.retire(&m).await {
                Ok(true) => out.push(m),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(model = %m, error = %e, "stay-warm unload failed");
                    failed.get_or_insert(e);
                }
            }
        }
        for m in sleepy {
            if let Err(e) = self.unload(&m).await {
                tracing::warn!(model = %m, error = %e, "stopping a sleeper failed");
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}
