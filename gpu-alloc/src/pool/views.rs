//! What callers may read of the pool: slot states and snapshots, health.

use serde::{Deserialize, Serialize};

use crate::split::Share;
pub use horos_server_control::SlotState;

use super::{ModelPool, PoolError};

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
