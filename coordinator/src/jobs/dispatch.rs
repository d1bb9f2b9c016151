//! The one thing the job workers need from the gateway: a call dispatched through the admission
//! path a synchronous request takes, and its answer read whole.
//!
//! The workers are a client of the data plane: they know a job's route, body, caller and
//! budget, and what an answer or a refusal means for the job (stored, postponed, retried); the
//! gateway knows the rest (the caller still let in, its limits, its profile and allowed models,
//! the task ladder, priorities, the model's load, usage). [`Dispatch`] is the seam between the
//! two, so the workers never reach into the gateway's state and can be tested against a scripted
//! gateway, without HTTP.
//!
//! The seam is the coordinator's own, not horos-server-control's: only the coordinator's
//! workers call it and only its gateway implements it (in `server/job_dispatch.rs`, with the
//! admission it adapts). It moves to the seam crate when a second crate implements or calls it.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use crate::data::request::{RawObject, RequestMeta};
use crate::data::route::Route;
use crate::error::ApiError;
use crate::tenancy::limits::Caller;

/// One call of a job, as the gateway receives it.
#[derive(Debug)]
pub(crate) struct JobCall {
    /// The synchronous route the job's kind takes.
    pub route: Route,
    /// The request's body, its extension fields taken out.
    pub body: RawObject,
    /// The request's extension fields (the job's priority in `priority`).
    pub meta: RequestMeta,
    /// Who submitted the job: it runs as that caller.
    pub caller: Caller,
    /// When the run started.
    pub received: Instant,
    /// What the whole call may take, answer included.
    pub budget: Duration,
    /// The longest answer read (a longer one is [`DispatchError::Broken`]).
    pub max_answer_bytes: usize,
}

/// An upstream's answer, read whole (any status: what it means for the job is the worker's
/// call).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answered {
    /// The answer's HTTP status.
    pub status: u16,
    /// Its `Content-Type`, if any.
    pub content_type: Option<String>,
    /// Its body.
    pub body: Bytes,
}

/// Why a job's call has no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DispatchError {
    /// The gateway answered with its own error, as a synchronous caller would get it: its
    /// status, code and `Retry-After` tell the worker whether to store it, retry or postpone.
    #[error(transparent)]
    Refused(ApiError),
    /// The answer broke while it was read.
    #[error("reading the answer: {0}")]
    Broken(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The answer did not end within the call's budget.
    #[error("the answer did not end within the job's {:.0} s budget", .0.as_secs_f64())]
    OverBudget(Duration),
}

/// The gateway as the job workers see it.
#[async_trait]
pub(crate) trait Dispatch: Send + Sync {
    /// Dispatches `call` through the admission a synchronous request on its route takes (the
    /// caller still let in, its limits, allowed models and profile, the ladder, the priority,
    /// the budget) and reads the answer whole, within the call's budget and its
    /// `max_answer_bytes`; usage is counted to
    /// the caller as for a synchronous answer.
    async fn dispatch(&self, call: JobCall) -> Result<Answered, DispatchError>;
}
