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

use std::borrow::Cow;
use std::sync::OnceLock;

use async_trait::async_trait;
use horos_server_control::routes::{Found, PathParams, RouteError, RouteTable};
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

/// A lane route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Submit,
    Job,
    Stats,
    Dead,
    Requeue,
    Purge,
}

/// The lane routes (under `/api/v1/lanes`), built once.
fn lane_routes() -> Result<&'static RouteTable<Lane>, AdminAnswer> {
    static TABLE: OnceLock<Result<RouteTable<Lane>, RouteError>> = OnceLock::new();
    table(TABLE.get_or_init(|| {
        RouteTable::new([
            (Some(Method::POST), "/jobs", Lane::Submit),
            (Some(Method::GET), "/jobs/{id}", Lane::Job),
            (Some(Method::GET), "/stats", Lane::Stats),
            (Some(Method::GET), "/dead/{queue}", Lane::Dead),
            (Some(Method::DELETE), "/dead/{queue}", Lane::Purge),
            (Some(Method::POST), "/dead/{id}/requeue", Lane::Requeue),
        ])
    }))
}

/// A table built once, or the 500 of one that could not be (a route its tests refuse).
fn table<R>(
    built: &'static Result<RouteTable<R>, RouteError>,
) -> Result<&'static RouteTable<R>, AdminAnswer> {
    built.as_ref().map_err(RouteError::answer)
}

/// The route of `method` on an extension's `rest` (`""` is `/`) in `routes`, or the 404 or
/// 405 the same table answers (`prefix`: the extension's path, for the message).
fn find<'t, 'p, R>(
    routes: &'t RouteTable<R>,
    method: &Method,
    prefix: &str,
    rest: &'p str,
) -> Result<Found<'t, 'p, R>, AdminAnswer> {
    let path = if rest.is_empty() { "/" } else { rest };
    routes
        .at(method, path)
        .map_err(|miss| miss.answer(method, &format!("{prefix}{rest}")))
}

/// A path parameter, `%XX` decoded; a 400 naming it if it is not UTF-8 once decoded.
fn param(params: &PathParams<'_, '_>, name: &str) -> Result<String, AdminAnswer> {
    params.decoded(name).map(Cow::into_owned).map_err(|e| {
        error_answer(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            e.to_string(),
            None,
            Some(name),
        )
    })
}

impl LaneAdmin {
    async fn route(
        &self,
        method: &Method,
        rest: &str,
        b: Value,
    ) -> Result<AdminAnswer, AdminAnswer> {
        let jobs = &self.0;
        let found = find(lane_routes()?, method, "/api/v1/lanes", rest)?;
        let params = &found.params;
        Ok(match *found.route {
            Lane::Submit => {
                let args: SubmitArgs = body(b, "a lane job")?;
                let submitted = jobs.submit(args).await;
                let status = match &submitted {
                    Ok(s) if s.duplicate => StatusCode::OK,
                    _ => StatusCode::CREATED,
                };
                ok(status, submitted)
            }
            Lane::Job => {
                let id = id(&param(params, "id")?, "job_not_found")?;
                ok(StatusCode::OK, jobs.status(StatusArgs { id }).await)
            }
            Lane::Stats => {
                let args: StatsArgs = body(b, "stats")?;
                ok(StatusCode::OK, jobs.stats(args).await)
            }
            Lane::Dead => {
                let ListBody { limit } = body(b, "a dead-letter listing")?;
                let args =
                    DeadArgs::list(param(params, "queue")?, limit.unwrap_or(HTTP_DEAD_LIMIT));
                ok(StatusCode::OK, jobs.dead(None, args).await)
            }
            Lane::Requeue => {
                let id = id(&param(params, "id")?, "dead_job_not_found")?;
                // The queue is the dead job's own: the name only labels the call.
                ok(
                    StatusCode::OK,
                    jobs.dead(None, DeadArgs::requeue("", id)).await,
                )
            }
            Lane::Purge => ok(
                StatusCode::OK,
                jobs.dead(None, DeadArgs::purge(param(params, "queue")?))
                    .await,
            ),
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
