//! The data plane's handlers. Each takes the [`Admission`] that `admission::admit` made: none
//! runs for a caller that was not identified and admitted.

use std::sync::Arc;
use std::time::Instant;

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::admission::Admission;
use super::{App, job_not_found, jobs_disabled};
use crate::data::core::Call;
use crate::data::proxy::{self, RespBody, Tracker, error_response, json_response};
use crate::data::request::{RawObject, parse_object, take_meta};
use crate::data::route::Route;
use crate::data::search;
use crate::error::ApiError;
use crate::jobs::api::JobStatus;
use crate::jobs::{Cancelled, JobPayload, JobScope, Jobs};
use crate::tenancy::limits::Caller;

/// An inference call: forwarded upstream through the caller's ladder. A refused request is
/// counted in the route's metrics like an answered one.
pub(super) async fn infer(
    app: &App,
    route: Route,
    admission: Result<Admission, ApiError>,
    received: Instant,
) -> Response<RespBody> {
    let core = &app.core;
    let mut tracker = Tracker::new(Arc::clone(core.metrics()), route, received);
    let r = async {
        let a = admission?;
        tracker.admitted = a.place;
        tracker.caller = Some((a.caller.clone(), Arc::clone(core.callers().gate())));
        let body = a
            .body
            .ok_or_else(|| ApiError::internal("an inference call without its body"))?;
        let call = Call {
            route,
            body,
            meta: a.meta,
            received: a.received,
            default_budget_s: core.cfg().default_budget_s,
            caller: a.caller,
        };
        core.dispatch(call, &mut tracker).await
    }
    .await;
    match r {
        Ok(up) => {
            tracker.status = up.status().as_u16();
            proxy::pass_through(up, Box::new(tracker))
        }
        Err(e) => {
            tracker.status = e.status.as_u16();
            error_response(&e)
        }
    }
}

/// `GET /v1/models`: the models and tasks the caller may call (its key's and its profile's
/// allowed models); every one where no limit names models.
pub(super) fn models(app: &App, a: &Admission) -> Response<RespBody> {
    let core = &app.core;
    let profile = core.callers().profile_of(&a.caller);
    let may = |m: &str| core.callers().allows(&a.caller, profile.as_deref(), m);
    let mut data: Vec<Value> = core
        .upstream()
        .models()
        .into_iter()
        .filter(|m| may(m))
        .map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": "horos"}))
        .collect();
    for (name, task) in &core.cfg().tasks {
        if task.models.iter().any(|m| may(m)) {
            data.push(json!({"id": format!("task:{name}"), "object": "model", "created": 0, "owned_by": "horos-task"}));
        }
    }
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

/// `POST /v1/search`: the owner's [`Searcher`](crate::data::search::Searcher), the caller's place held
/// while it runs, over the documents of the caller's collections only (from its key, never from
/// the body).
pub(super) async fn search(app: &App, a: Admission) -> Result<Response<RespBody>, ApiError> {
    let Some(searcher) = &app.searcher else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "this coordinator has no search index",
        )
        .code("unknown_url"));
    };
    let body = Value::Object(body_object(&a)?);
    let (query, k) = search::parse(&body)?;
    let collections = app.core.callers().gate().collections(&a.caller);
    let hits = search::answer(searcher.search(&query, k, &body, &collections).await)?;
    drop(a);
    Ok(json_response(StatusCode::OK, &hits))
}

/// `POST /v1/jobs`: checked as its synchronous call would be (the caller may call its model,
/// which exists and serves the route), then queued as the caller's.
pub(super) async fn submit_job(app: &App, a: Admission) -> Result<Response<RespBody>, ApiError> {
    let jobs = jobs_of(app)?;
    let mut payload = JobPayload::from_body(&body_object(&a)?)?;
    payload.key = match &a.caller {
        Caller::Key(name) => Some(name.clone()),
        Caller::Client(_) | Caller::Anonymous => None,
    };
    let mut request = payload.request.clone();
    let meta = take_meta(&mut request)?;
    app.core.check_call(
        payload.kind.route(),
        &RawObject::from_map(&request)?,
        &meta,
        &a.caller,
    )?;
    let kind = payload.kind;
    let id = jobs.submit(payload).await?;
    app.core
        .metrics()
        .jobs_submitted
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"id": id, "object": "job", "kind": kind, "state": JobStatus::Queued}),
    ))
}

/// `GET /v1/jobs/{id}`: the caller's own job (another's answers 404, as a job that never was).
pub(super) async fn get_job(
    app: &App,
    a: &Admission,
    id: &str,
) -> Result<Response<RespBody>, ApiError> {
    job(app.jobs.as_ref(), id, JobScope::of(&a.caller)).await
}

/// Job `id` within `scope` (the admin API's scope is every job): its state and, once it
/// succeeded, its result; one outside the scope is a 404, as a job that never was.
pub(super) async fn job(
    jobs: Option<&Jobs>,
    id: &str,
    scope: JobScope,
) -> Result<Response<RespBody>, ApiError> {
    let jobs = jobs.ok_or_else(jobs_disabled)?;
    let n: i64 = id.parse().map_err(|_| job_not_found(id))?;
    match jobs.get(n, scope).await? {
        Some(v) => Ok(json_response(StatusCode::OK, &v)),
        None => Err(job_not_found(id)),
    }
}

/// `POST /v1/jobs/{id}/cancel`: the caller's own job only.
pub(super) async fn cancel_job(
    app: &App,
    a: &Admission,
    id: &str,
) -> Result<Response<RespBody>, ApiError> {
    cancel(app.jobs.as_ref(), id, JobScope::of(&a.caller)).await
}

/// Cancels job `id` within `scope` (the admin API's scope is every job): a queued job never
/// runs; a running one is abandoned and its answer discarded; a finished one is left as it is
/// (409); one outside the scope is a 404.
pub(super) async fn cancel(
    jobs: Option<&Jobs>,
    id: &str,
    scope: JobScope,
) -> Result<Response<RespBody>, ApiError> {
    let jobs = jobs.ok_or_else(jobs_disabled)?;
    let n: i64 = id.parse().map_err(|_| job_not_found(id))?;
    match jobs.cancel(n, scope).await? {
        None => Err(job_not_found(id)),
        Some(Cancelled::AlreadyFinished(state)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            format!("job {n} already finished ({state})"),
        )
        .code("job_finished")),
        Some(was) => Ok(json_response(
            StatusCode::OK,
            &json!({"id": n, "object": "job", "state": JobStatus::Cancelled,
                    "was": if was == Cancelled::Running { "running" } else { "queued" }}),
        )),
    }
}

fn jobs_of(app: &App) -> Result<&Jobs, ApiError> {
    app.jobs.as_ref().ok_or_else(jobs_disabled)
}

/// The admitted body as a JSON map.
pub(super) fn body_object(a: &Admission) -> Result<serde_json::Map<String, Value>, ApiError> {
    let raw = a
        .body
        .as_ref()
        .ok_or_else(|| ApiError::internal("a route without its body"))?;
    parse_object(&raw.to_vec())
}
