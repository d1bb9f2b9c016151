//! PDF work in child processes: opening a document, rendering its pages, reading their text
//! layers and decoding images run in a worker process under OS limits, so that a document that
//! breaks a reader (an allocation past the limit, a loop, a crash) costs that document, never
//! the process that serves everyone.
//!
//! - [`protocol`]: the frames and messages between the two sides, versioned;
//! - [`serve`]/[`serve_with`]: the worker's side, which any binary can host on its standard
//!   input and output (`horos-ref worker pdf` does);
//! - [`Worker`]: one worker process, started under its [`WorkerLimits`] (`RLIMIT_AS`,
//!   `RLIMIT_CPU`, a wall-clock time per request, no network where the kernel allows it:
//!   [`crate::limits`]), whose failures are typed ([`WorkerError::Broken`] with a
//!   [`FailureReason`](crate::render::FailureReason): `resource_limit`, `timeout`, `crashed`);
//! - [`WorkerPool`]: a fixed pool of them, one document per worker.

mod client;
mod pool;
pub mod protocol;
mod serve;

pub use client::{DecodedImage, Worker, WorkerCommand, WorkerError, WorkerLimits, WorkerPage};
pub use pool::{PoolConfig, PoolCounts, PooledWorker, WorkerPool};
pub use serve::{MAX_REQUEST_BYTES, serve, serve_with};
