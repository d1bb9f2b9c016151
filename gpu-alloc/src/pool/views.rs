//! What callers may read of the pool: slot states and snapshots, health.

use serde::{Deserialize, Serialize};

use crate::split::Share;
pub use horos_server_control::SlotState;

use super::{ModelPool, PoolError, catalogue_of, cost_key};
use crate::allocator::SwapKind;
use crate::catalogue::SleepLevel;

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
    /// The level it sleeps at, while SLEEPING.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep_level: Option<SleepLevel>,
}

impl ModelPool {
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
                sleep_level: s.asleep.map(|a| a.0),
            })
            .collect()
    }

    /// Seconds until `model` would serve if asked now, by what the pool measured (the spec's
    /// `swap_in_s` the prior): 0 when READY, a wake from its level when asleep, else a load.
    /// `None` for a model the pool does not know.
    pub fn expected_ready_s(&self, model: &str) -> Option<f64> {
        let (spec, state, level, gpu) = {
            let st = self.inner.lock();
            let spec = st.models.get(model)?.clone();
            match st.slots.get(model) {
                Some(s) => (spec, s.state, s.asleep.map(|a| a.0), s.gpu()),
                None => (spec, SlotState::Idle, None, 0),
            }
        };
        if state == SlotState::Ready {
            return Some(0.0);
        }
        let kind = level.map_or(SwapKind::Load, SwapKind::Wake);
        let costs = self.inner.costs();
        let catalogue = catalogue_of(&costs, &spec, gpu, 0);
        Some(costs.cost_s(&catalogue, &cost_key(model), gpu, kind))
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
}
