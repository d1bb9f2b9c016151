//! The operations on a coordinator's admin API, as the seam's [`AdminExtension`]: the documents
//! ([`DocumentAdmin`], `/api/v1/documents/...`, in [`documents`]) and the lane jobs
//! ([`LaneAdmin`], serving `/api/v1/lanes/...`), both behind the admin key:
//!
//! - `POST /api/v1/lanes/jobs` with [`SubmitArgs`]: 201 and [`Submitted`] (`{"id", "queue",
//!   "duplicate": false}`); 200 with `"duplicate": true` and the earlier job's id when its
//!   `dedup_key` was already queued. `priority` is a rank, smaller runs first.
//! - `GET /api/v1/lanes/jobs/ID`: [`JobStatus`], the job's state and, once done, its `answer`;
//!   404 `job_not_found`.
//! - `GET /api/v1/lanes/stats`: [`Stats`] (`{"queues": [...]}`).
//! - `GET /api/v1/lanes/dead/QUEUE`: [`DeadLetters`] (the 100 oldest; a body `{"limit": N}`
//!   says how many, at most 1000).
//! - `POST /api/v1/lanes/dead/ID/requeue`: [`Requeued`] (`{"requeued", "id"}`); 404
//!   `dead_job_not_found`.
//! - `DELETE /api/v1/lanes/dead/QUEUE`: [`Purged`] (`{"queue", "purged"}`).
//!
//! Errors are the OpenAI error object every HOROS route answers with: 400 with `param` for a
//! bad argument, 404 for an unknown id, 409 for a refusal, 500 for the system's own failure.

mod documents;

pub use documents::DocumentAdmin;

use async_trait::async_trait;
use horos_server_control::{AdminAnswer, AdminExtension, error_answer};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ErrorKind, OpsError};
use crate::lanes::{DeadArgs, LaneJobs, StatsArgs, StatusArgs, SubmitArgs};
#[cfg(doc)]
use crate::lanes::{DeadLetters, JobStatus, Purged, Requeued, Stats, Submitted};

/// How many dead letters `GET /api/v1/lanes/dead/QUEUE` lists without a body.
const HTTP_DEAD_LIMIT: usize = 100;

/// The lane jobs of a queue database as admin routes under `/api/v1/lanes`.
#[derive(Debug, Clone)]
pub struct LaneAdmin(pub LaneJobs);

/// `GET /api/v1/lanes/dead/QUEUE`'s optional body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListBody {
    #[serde(default)]
    limit: Option<usize>,
}

/// The answer of an operation's error.
fn error(e: OpsError) -> AdminAnswer {
    let (status, kind) = match e.kind() {
        ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_request_error"),
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, "invalid_request_error"),
        ErrorKind::Conflict => (StatusCode::CONFLICT, "invalid_request_error"),
        ErrorKind::Unavailable => (StatusCode::BAD_GATEWAY, "server_error"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
    };
    let code = match &e {
        OpsError::NoJob(_) => Some("job_not_found"),
        OpsError::NoDeadJob { .. } => Some("dead_job_not_found"),
        OpsError::UnknownLane { .. } => Some("unknown_lane"),
        _ => None,
    };
    error_answer(status, kind, e.to_string(), code, e.param())
}

/// A body as `T` (`null`, no body, is an empty object); a 400 naming the mistake otherwise.
fn body<T: DeserializeOwned>(body: Value, what: &str) -> Result<T, AdminAnswer> {
    let body = if body.is_null() {
        Value::Object(Default::default())
    } else {
        body
    };
    serde_json::from_value(body).map_err(|e| {
        error_answer(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("{what}: {e}"),
            None,
            None,
        )
    })
}

/// An id of the path, or a 404 (no job can have it).
fn id(s: &str, code: &str) -> Result<i64, AdminAnswer> {
    s.parse()
        .map_err(|_| not_found(format!("`{s}` is not a job id"), code))
}

/// A 404 in the OpenAI error format, with its `code`.
fn not_found(message: String, code: &str) -> AdminAnswer {
    error_answer(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        message,
        Some(code),
        None,
    )
}

fn ok<T: serde::Serialize>(status: StatusCode, r: Result<T, OpsError>) -> AdminAnswer {
    match r.map(|v| serde_json::to_value(v)) {
        Ok(Ok(v)) => (status, v),
        Ok(Err(e)) => error_answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            e.to_string(),
            None,
            None,
        ),
        Err(e) => error(e),
    }
}

impl LaneAdmin {
    async fn route(
        &self,
        method: &Method,
        rest: &str,
        b: Value,
    ) -> Result<AdminAnswer, AdminAnswer> {
        let jobs = &self.0;
        let segments: Vec<&str> = rest.trim_matches('/').split('/').collect();
        Ok(match (method, segments.as_slice()) {
            (&Method::POST, ["jobs"]) => {
                let args: SubmitArgs = body(b, "a lane job")?;
                let submitted = jobs.submit(args).await;
                let status = match &submitted {
                    Ok(s) if s.duplicate => StatusCode::OK,
                    _ => StatusCode::CREATED,
                };
                ok(status, submitted)
            }
            (&Method::GET, ["jobs", job]) => {
                let id = id(job, "job_not_found")?;
                ok(StatusCode::OK, jobs.status(StatusArgs { id }).await)
            }
            (&Method::GET, ["stats"]) => {
                let args: StatsArgs = body(b, "stats")?;
                ok(StatusCode::OK, jobs.stats(args).await)
            }
            (&Method::GET, ["dead", queue]) => {
                let ListBody { limit } = body(b, "a dead-letter listing")?;
                let args = DeadArgs::list(*queue, limit.unwrap_or(HTTP_DEAD_LIMIT));
                ok(StatusCode::OK, jobs.dead(None, args).await)
            }
            (&Method::POST, ["dead", job, "requeue"]) => {
                let id = id(job, "dead_job_not_found")?;
                // The queue is the dead job's own: the name only labels the call.
                ok(
                    StatusCode::OK,
                    jobs.dead(None, DeadArgs::requeue("", id)).await,
                )
            }
            (&Method::DELETE, ["dead", queue]) => ok(
                StatusCode::OK,
                jobs.dead(None, DeadArgs::purge(*queue)).await,
            ),
            _ => {
                let message = format!("no route for {method} /api/v1/lanes{rest}");
                return Err(not_found(message, "unknown_url"));
            }
        })
    }
}

#[async_trait]
impl AdminExtension for LaneAdmin {
    fn name(&self) -> &str {
        "lanes"
    }

    async fn call(&self, method: &Method, rest: &str, body: Value) -> AdminAnswer {
        self.route(method, rest, body).await.unwrap_or_else(|e| e)
    }
}

#[cfg(test)]
mod tests;
