//! Stopping slots: eviction victims, explicit unloads, the stay-warm timer and lease
//! renewal ([`ModelPool::maintain`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::ledger::LedgerError;

use super::{Backend, ModelPool, PoolError, SlotState, blocking};

/// An eviction victim: model, its backend and its lease.
type Victim = (String, Option<Arc<dyn Backend>>, Option<String>);

impl ModelPool {
    /// Picks and marks STOPPING the next eviction victim for a request of `priority`.
    pub(super) fn take_victim(&self, incoming: &str, priority: i32) -> Option<Victim> {
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

    pub(super) async fn stop_slot(
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

    /// [`ModelPool::unload`] of every model (at shutdown, once no request runs). A failure is
    /// logged and the others are still unloaded.
    pub async fn unload_all(&self) {
        for slot in self.slots() {
            if let Err(e) = self.unload(&slot.model).await {
                tracing::warn!(model = %slot.model, error = %e, "unloading at shutdown failed");
            }
        }
    }

    /// Makes room on `gpus` for something outside the pool (a lane's server the allocator
    /// switched a GPU to): unloads the idle, unpinned model placed on any of them that has been
    /// idle longest, and returns its name; `None` when there is none. A model serving a request
    /// or pinned stays; one taken by a request between the look and the unload is skipped for
    /// the next. The pool loads it again on its next request, wherever there is room.
    pub async fn unload_one_idle(&self, gpus: &[u32]) -> Option<String> {
        let mut idle: Vec<_> = self
            .slots()
            .into_iter()
            .filter(|s| {
                s.state == SlotState::Ready
                    && s.active == 0
                    && !s.pinned
                    && s.shares.iter().any(|sh| gpus.contains(&sh.gpu))
            })
            .collect();
        idle.sort_by(|a, b| b.idle_s.total_cmp(&a.idle_s));
        for slot in idle {
            match self.unload(&slot.model).await {
                Ok(true) => return Some(slot.model),
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(model = %slot.model, error = %e, "could not unload an idle pooled model")
                }
            }
        }
        None
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
