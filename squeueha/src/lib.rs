//! # squeueha — a durable SQLite visibility-timeout queue
//!
//! One SQLite file (WAL) holds named queues shared by any number of threads and processes.
//! Consumers claim batches in one `BEGIN IMMEDIATE` transaction (`priority DESC`, then oldest first);
//! claimed jobs are invisible for a visibility timeout and carry a lease token that ack, nack and
//! extend must present. Jobs whose worker dies reappear when the lease expires (**at-least-once**
//! delivery); jobs that exhaust their attempts move to a dead-letter table.
//!
//! A job's priority is a claim order: **higher is claimed first**. (The HOROS services built on
//! squeueha take ranks, smaller first, and convert at one place: see the
//! [workspace's convention](https://github.com/horos-rs/horos-rs/blob/main/docs/architecture.md#priorities).)
//!
//! ```
//! use std::time::Duration;
//! use squeueha::{NewJob, Queue};
//!
//! # fn main() -> squeueha::Result<()> {
//! let dir = tempfile::tempdir().map_err(|e| squeueha::Error::InvalidArgument(e.to_string()))?;
//! let queue = Queue::open(dir.path().join("jobs.db"))?;
//! queue.enqueue("ocr", NewJob::new(b"page-1".to_vec()).priority(5))?;
//! for job in queue.poll_batch("ocr", 16, Duration::from_secs(30))? {
//!     // ... do the work ...
//!     queue.ack(job.lease)?;
//! }
//! assert_eq!(queue.stats("ocr")?.pending(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! The same primitive covers three patterns: work distribution (N jobs, N consumers), leader
//! election ([`Queue::try_lead`], with fencing tokens) and elastic overflow (a visibility shorter
//! than the processing time lets another instance take over a slow job).
//!
//! Storage sits behind an internal seam (`storage::Storage`). SQLite is the default backend; with
//! the feature `postgres`, `Queue::open_postgres` (or a `postgres://` URL given to
//! [`Queue::open`]) opens the same queue on PostgreSQL, shared by several machines, with claims by
//! `FOR UPDATE SKIP LOCKED` and wake-ups by `LISTEN/NOTIFY`. [`Queue::transaction`] is the SQLite
//! backend's way to change queue state and the caller's own tables atomically; `Queue::pg_transaction`
//! is PostgreSQL's.

mod config;
mod error;
mod job;
mod leader;
pub mod migrate;
mod named;
pub mod nodes;
mod notify;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
mod sql;
mod sqlite;
mod stats;
mod storage;
mod tx;
mod wake;

#[cfg(feature = "tokio")]
mod async_tx;
#[cfg(feature = "tokio")]
mod asyncq;
#[cfg(feature = "tokio")]
pub mod periodic;
#[cfg(feature = "tokio")]
pub mod worker;

/// The PostgreSQL driver squeueha's PostgreSQL backend uses (feature `postgres`), re-exported so
/// that [`PgQueueTx::client`] can be used without matching its version by hand.
#[cfg(feature = "postgres")]
pub use ::postgres as pg;
#[cfg(feature = "tokio")]
pub use asyncq::{AsyncQueue, QueueWatch};
pub use config::{Config, DedupWindow, RetryBackoff, Synchronous};
pub use error::{Error, Result};
pub use job::{
    DeadJob, Dedup, Enqueued, Job, JobInfo, JobState, Lease, Millis, Nacked, NewJob, now_ms,
};
pub use leader::Leadership;
pub use migrate::{Migration, Migrations};
pub use named::NamedQueue;
#[cfg(feature = "postgres")]
pub use postgres::tx::PgQueueTx;
pub use queue::Queue;
pub use sql::{FromValue, Row, Value, sqlite_execute, sqlite_query};
pub use sqlite::schema::SCHEMA_VERSION;
pub use stats::QueueStats;
pub use storage::{AckReport, MaintenanceReport};
pub use tx::QueueTx;

/// The SQLite binding the public API exposes ([`Queue::read`], [`QueueTx::connection`]):
/// rusqlite with its bundled SQLite, re-exported so a caller uses the same version without
/// naming it in its own manifest.
pub use rusqlite;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
