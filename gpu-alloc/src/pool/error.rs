//! The pool's error.

use crate::estimate::EstimateError;
use crate::ledger::LedgerError;
use crate::monitor::MonitorError;

use super::BackendError;

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
