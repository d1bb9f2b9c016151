//! The control plane: what the coordinator shows and lets its operator change, reading only
//! atomics and a snapshot, never a lock of the data plane. The snapshot and its sources
//! ([`snapshot`]), the data plane's counters rendered for Prometheus (`/metrics`), the status
//! page ([`status`]), and the admin API's operations: models ([`model_admin`]), logs
//! ([`log_admin`]) and the owner's extensions ([`admin_ext`]).

pub(crate) mod admin_ext;
pub(crate) mod log_admin;
pub(crate) mod model_admin;
pub(crate) mod snapshot;
pub(crate) mod status;
