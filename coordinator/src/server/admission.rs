//! The data plane's one admission path. Every route under `/v1/` is a [`DataRoute`]; the server
//! hands each to `data_routes::serve`, which has [`admit`] identify the caller (its key, or its
//! client id where callers without a key are let in) and take its place under its limits for
//! the routes that do work, and only then calls the route's handler with the [`Admission`]. A
//! handler cannot be reached any other way: an `Admission` is made here and nowhere else, and
//! every handler takes one. A route added later is a variant of [`DataRoute`], so it is admitted
//! like the others or does not compile.

use std::time::Instant;

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use super::{check_length, segment};
use crate::data::core::Core;
use crate::data::request::{RawObject, RequestMeta, read_limited};
use crate::data::route::Route;
use crate::error::ApiError;
use crate::tenancy::limits::{self, Caller, Charge};

/// A route of the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DataRoute {
    /// An inference call forwarded upstream (chat, completions, embeddings, images, rerank,
    /// speech).
    Infer(Route),
    /// `GET /v1/models`: the models the caller may call.
    Models,
    /// `POST /v1/search`.
    Search,
    /// `POST /v1/answers`: a question answered from the indexed pages, citing them.
    Answer,
    /// `POST /v1/jobs`.
    SubmitJob,
    /// `GET /v1/jobs/{id}`.
    GetJob(String),
    /// `POST /v1/jobs/{id}/cancel`.
    CancelJob(String),
}

/// Every data-plane path, for the 405 of a wrong method.
const PATHS: [&str; 10] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/images/generations",
    "/v1/rerank",
    "/v1/audio/speech",
    "/v1/models",
    "/v1/search",
    "/v1/answers",
    "/v1/jobs",
];

impl DataRoute {
    /// The data-plane route of `method` `path`: `None` for a path outside `/v1/`; a 405 for a
    /// data path asked with another method, a 404 for an unknown `/v1/` path.
    pub(super) fn of(method: &Method, path: &str) -> Option<Result<DataRoute, ApiError>> {
        if !path.starts_with("/v1/") {
            return None;
        }
        let route = match (method, path) {
            (&Method::POST, "/v1/chat/completions") => DataRoute::Infer(Route::Chat),
            (&Method::POST, "/v1/completions") => DataRoute::Infer(Route::Completions),
            (&Method::POST, "/v1/embeddings") => DataRoute::Infer(Route::Embeddings),
            (&Method::POST, "/v1/images/generations") => DataRoute::Infer(Route::Images),
            (&Method::POST, "/v1/rerank") => DataRoute::Infer(Route::Rerank),
            (&Method::POST, "/v1/audio/speech") => DataRoute::Infer(Route::Speech),
            (&Method::GET, "/v1/models") => DataRoute::Models,
            (&Method::POST, "/v1/search") => DataRoute::Search,
            (&Method::POST, "/v1/answers") => DataRoute::Answer,
            (&Method::POST, "/v1/jobs") => DataRoute::SubmitJob,
            (&Method::POST, p) if segment(p, "/v1/jobs/", "/cancel").is_some() => {
                DataRoute::CancelJob(
                    segment(p, "/v1/jobs/", "/cancel")
                        .unwrap_or_default()
                        .into(),
                )
            }
            (&Method::GET, p) if segment(p, "/v1/jobs/", "").is_some() => {
                DataRoute::GetJob(segment(p, "/v1/jobs/", "").unwrap_or_default().into())
            }
            (_, p) if PATHS.contains(&p) || p.starts_with("/v1/jobs/") => {
                return Some(Err(ApiError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "invalid_request_error",
                    format!("{method} is not allowed on {path}"),
                )));
            }
            _ => {
                return Some(Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    format!("no route for {method} {path}"),
                )
                .code("unknown_url")));
            }
        };
        Some(Ok(route))
    }

    /// Whether the route carries a JSON body.
    fn has_body(&self) -> bool {
        matches!(
            self,
            DataRoute::Infer(_) | DataRoute::Search | DataRoute::Answer | DataRoute::SubmitJob
        )
    }

    /// What the caller's limits charge for the route (`None`: nothing). Work run now (an
    /// inference call, a search, an answer) is a request and holds a place under the caller's
    /// concurrency; a job's submission is a request whose place its run will take
    /// ([`Charge::JobRun`], when a worker runs it). Listing models and reading or cancelling
    /// one's own job only identify the caller: a client polling its job must not spend the
    /// rate its work needs.
    fn charge(&self) -> Option<Charge> {
        match self {
            DataRoute::Infer(_) | DataRoute::Search | DataRoute::Answer => Some(Charge::Request),
            DataRoute::SubmitJob => Some(Charge::Submission),
            DataRoute::Models | DataRoute::GetJob(_) | DataRoute::CancelJob(_) => None,
        }
    }
}

/// A request that passed admission: who calls, its place under its limits (given back when
/// dropped), and its body. Made only by [`serve`].
pub(super) struct Admission {
    /// Who calls.
    pub caller: Caller,
    /// Its place under its limits (`None`: no limit applies, or the route is not charged).
    pub place: Option<limits::Admitted>,
    /// The JSON body, extension fields taken out for an inference call (`None` for the routes
    /// without one).
    pub body: Option<RawObject>,
    /// An inference call's extension fields.
    pub meta: RequestMeta,
    /// When the request arrived.
    pub received: Instant,
    /// Private: an `Admission` is made in this module only.
    _sealed: (),
}

/// Reads the body (bounded in size and time), identifies the caller and, for a route that does
/// work, takes its place under its limits.
pub(super) async fn admit(
    core: &Core,
    route: &DataRoute,
    req: Request<Incoming>,
    received: Instant,
) -> Result<Admission, ApiError> {
    let authorization = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The key (or its absence) is judged from the headers before the body is read: a stranger
    // is refused without the server reading, parsing or recording anything it sent.
    core.callers()
        .gate()
        .identify(authorization.as_deref(), None)?;
    let mut meta = RequestMeta::default();
    let mut body = None;
    let mut client_id = None;
    if route.has_body() {
        let limit = core.cfg().max_body_bytes;
        check_length(&req, limit)?;
        let bytes: Bytes = read_limited(req.into_body(), limit, core.body_timeout()).await?;
        let mut raw = RawObject::parse(bytes)?;
        match route {
            DataRoute::Infer(_) => {
                meta = raw.take_meta()?;
                client_id.clone_from(&meta.client_id);
            }
            DataRoute::SubmitJob => {
                client_id = raw
                    .get("request")
                    .and_then(|r| r.get("x_client_id").map(client_label));
            }
            _ => client_id = raw.get("x_client_id").as_ref().map(client_label),
        }
        body = Some(raw);
    }
    // Checked on every route before anything is recorded (the chat routes' check in
    // `take_meta` is the same function).
    if let Some(id) = &client_id {
        crate::tenancy::caller::checked_client_id(id)?;
    }
    let (caller, place) = admit_caller(
        core,
        authorization.as_deref(),
        client_id.as_deref(),
        route.charge(),
    )?;
    Ok(Admission {
        caller,
        place,
        body,
        meta,
        received,
        _sealed: (),
    })
}

/// A client id as the caller's label: a string as it is, any other JSON as its text.
fn client_label(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// Who calls (its key, or its client id) and, where limits apply and the route is charged, its
/// place (taken until dropped); over a limit: the 429 to answer, counted.
fn admit_caller(
    core: &Core,
    authorization: Option<&str>,
    client_id: Option<&str>,
    charge: Option<Charge>,
) -> Result<(Caller, Option<limits::Admitted>), ApiError> {
    let caller = core.callers().gate().identify(authorization, client_id)?;
    core.metrics()
        .requestors
        .seen(&caller.label(), crate::clock::now_ms());
    let Some(charge) = charge else {
        return Ok((caller, None));
    };
    let place = take_place(core, &caller, charge)?;
    Ok((caller, place))
}

/// `caller`'s place under its limits, charged as `charge` says (`None` where no limit is
/// configured); over a limit: the 429 to answer, counted in `/metrics` and the callers' table
/// (a job's run postponed so is counted as a refused request is).
/// A synchronous request takes its place here through [`serve`], and an async job's run through
/// [`Dispatch`](crate::jobs::Dispatch): one check, one count.
pub(super) fn take_place(
    core: &Core,
    caller: &Caller,
    charge: Charge,
) -> Result<Option<limits::Admitted>, ApiError> {
    if core.callers().gate().is_open() {
        return Ok(None);
    }
    let admitted = core
        .callers()
        .gate()
        .admit_as(caller, charge)
        .inspect_err(|e| {
            let label = caller.label();
            core.metrics().rate_limited(&label);
            let until = (e.code == Some(crate::tenancy::limits::COOLDOWN_CODE))
                .then(|| crate::clock::now_ms() + e.retry_after_s.unwrap_or(0) * 1000);
            core.metrics().requestors.refused(&label, until);
        })?;
    Ok(Some(admitted))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_v1_path_is_a_data_route_or_an_error() {
        let post = |p: &str| DataRoute::of(&Method::POST, p).unwrap();
        let get = |p: &str| DataRoute::of(&Method::GET, p).unwrap();
        assert_eq!(
            post("/v1/chat/completions").unwrap(),
            DataRoute::Infer(Route::Chat)
        );
        assert_eq!(get("/v1/models").unwrap(), DataRoute::Models);
        assert_eq!(
            post("/v1/audio/speech").unwrap(),
            DataRoute::Infer(Route::Speech)
        );
        assert_eq!(
            get("/v1/audio/speech").unwrap_err().status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(post("/v1/search").unwrap(), DataRoute::Search);
        assert_eq!(post("/v1/answers").unwrap(), DataRoute::Answer);
        assert_eq!(post("/v1/jobs").unwrap(), DataRoute::SubmitJob);
        assert_eq!(get("/v1/jobs/7").unwrap(), DataRoute::GetJob("7".into()));
        assert_eq!(
            post("/v1/jobs/7/cancel").unwrap(),
            DataRoute::CancelJob("7".into())
        );
        assert_eq!(
            get("/v1/chat/completions").unwrap_err().status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            DataRoute::of(&Method::DELETE, "/v1/jobs/7")
                .unwrap()
                .unwrap_err()
                .status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            get("/v1/unknown").unwrap_err().status,
            StatusCode::NOT_FOUND
        );
        // Short and odd job paths are typed errors, never a slice out of range.
        for p in [
            "/v1/jobs/cancel",
            "/v1/jobs//cancel",
            "/v1/jobs/1/2/cancel",
            "/v1/jobs/",
        ] {
            let e = post(p).unwrap_err();
            assert!(e.status.is_client_error(), "{p}: {}", e.status);
        }
        assert!(get("/v1/jobs/1/2").unwrap_err().status.is_client_error());
        assert!(DataRoute::of(&Method::GET, "/status").is_none());
        assert!(DataRoute::of(&Method::GET, "/api/v1/jobs").is_none());
    }

    #[test]
    fn work_spends_limits_and_reads_only_identify() {
        for r in [
            DataRoute::Infer(Route::Embeddings),
            DataRoute::Search,
            DataRoute::Answer,
        ] {
            assert!(r.charge() == Some(Charge::Request) && r.has_body(), "{r:?}");
        }
        // A submission is a request; its place is its run's.
        assert_eq!(DataRoute::SubmitJob.charge(), Some(Charge::Submission));
        assert!(DataRoute::SubmitJob.has_body());
        for r in [
            DataRoute::Models,
            DataRoute::GetJob("1".into()),
            DataRoute::CancelJob("1".into()),
        ] {
            assert!(r.charge().is_none() && !r.has_body(), "{r:?}");
        }
    }
}
