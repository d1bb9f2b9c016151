//! # fanin — exactly-once fan-in of fragmented jobs
//!
//! A parent job is split into N fragments (tiles of a page, pages of a document). Each fragment is a
//! [`squeueha`] job. When a worker reports a fragment, fan-in records the result, acks the job and —
//! if it was the last fragment — completes the parent and enqueues the next stage, all in **one**
//! SQLite transaction. Delivery is at least once, completion exactly once: a fragment reported twice
//! counts once, and the parent finishes once.
//!
//! ```
//! use std::time::Duration;
//! use fanin::{FanIn, FanInConfig, FragmentResult, ParentSpec, Recorded, ParentState};
//! use squeueha::{NewJob, Queue};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let fan = FanIn::open(Queue::open(dir.path().join("q.db"))?, FanInConfig::default())?;
//! let page = fan.create_parent(
//!     ParentSpec::new("page-1", "tiles")
//!         .jobs((0..4).map(|i| NewJob::new(vec![i])))
//!         .then("page-done", serde_json::json!({"doc": "manual.pdf"})),
//! )?;
//! let mut last = Recorded::Recorded;
//! for job in fan.queue().poll_batch("tiles", 4, Duration::from_secs(60))? {
//!     last = fan.complete(&job, FragmentResult::Bytes(format!("text of tile {}", job.payload[0]).into_bytes()))?;
//! }
//! assert_eq!(last, Recorded::ParentFinished(ParentState::Completed));
//! assert_eq!(fan.queue().stats("page-done")?.ready, 1);
//! assert_eq!(fan.results(page)?.len(), 4);
//! # Ok(())
//! # }
//! ```
//!
//! Failure policy per parent: fail fast (the first failed fragment fails the parent and cancels
//! the rest) or partial (the parent completes with the list of failed fragments). Parents nest: a
//! parent can fill a slot of a higher parent ([`ParentSpec::child_of`]), and its completion is
//! recorded there in the same transaction. The "last fragment?" check reads one counter row, so its
//! cost does not grow with N.

mod delete;
mod error;
mod fanin;
mod model;
mod paths;
mod record;
mod rows;
mod schema;

pub use error::{Error, Result};
pub use fanin::{FanIn, FanInConfig};
pub use model::{
    Completion, FailurePolicy, FragmentOutcome, FragmentRef, FragmentResult, FragmentSpec,
    NextStage, ParentSpec, ParentState, Progress, Recorded,
};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
