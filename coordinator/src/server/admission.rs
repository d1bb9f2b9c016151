//! The data plane's one admission path. Every route under `/v1/` is a [`DataRoute`]; the server
//! hands each to `data_routes::serve`, which has [`admit`] identify the caller (its key, or its
//! client id where callers without a key are let in) and take its place under its limits for
//! the routes that do work, and only then calls the route's handler with the [`Admission`]. A
//! handler cannot be reached any other way: an `Admission` is made here and nowhere else, and
//! every handler takes one. A route added later is a variant of [`DataRoute`], so it is admitted
//! like the others or does not compile.

use std::borrow::Cow;
use std::time::Instant;

use bytes::Bytes;
use horos_server_control::routes::PathParams;
use http::header::AUTHORIZATION;
use http::{Method, Request};
use hyper::body::Incoming;
use serde_json::Value;

use super::check_length;
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

/// A data-plane route as the route table holds it: a [`DataRoute`] before its path's
/// parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DataPath {
    /// An inference call.
    Infer(Route),
    /// `GET /v1/models`.
    Models,
    /// `POST /v1/search`.
    Search,
    /// `POST /v1/answers`.
    Answer,
    /// `POST /v1/jobs`.
    SubmitJob,
    /// `GET /v1/jobs/{id}`.
    GetJob,
    /// `POST /v1/jobs/{id}/cancel`.
    CancelJob,
}

/// Every data-plane route: the main listener's route table takes its `/v1/` paths from this
/// list and from nowhere else, so each reaches its handler through [`admit`].
pub(super) fn data_routes() -> [(Method, &'static str, DataPath); 12] {
    [
        (
            Method::POST,
            "/v1/chat/completions",
            DataPath::Infer(Route::Chat),
        ),
        (
            Method::POST,
            "/v1/completions",
            DataPath::Infer(Route::Completions),
        ),
        (
            Method::POST,
            "/v1/embeddings",
            DataPath::Infer(Route::Embeddings),
        ),
        (
            Method::POST,
            "/v1/images/generations",
            DataPath::Infer(Route::Images),
        ),
        (Method::POST, "/v1/rerank", DataPath::Infer(Route::Rerank)),
        (
            Method::POST,
            "/v1/audio/speech",
            DataPath::Infer(Route::Speech),
        ),
        (Method::GET, "/v1/models", DataPath::Models),
        (Method::POST, "/v1/search", DataPath::Search),
        (Method::POST, "/v1/answers", DataPath::Answer),
        (Method::POST, "/v1/jobs", DataPath::SubmitJob),
        (Method::GET, "/v1/jobs/{id}", DataPath::GetJob),
        (Method::POST, "/v1/jobs/{id}/cancel", DataPath::CancelJob),
    ]
}

impl DataRoute {
    /// The route of a matched `path` with its parameters (a job id percent-decoded; one that
    /// is not UTF-8 once decoded is a 400).
    pub(super) fn of(path: DataPath, params: &PathParams<'_, '_>) -> Result<DataRoute, ApiError> {
        let id = || {
            params
                .decoded("id")
                .map(Cow::into_owned)
                .map_err(|e| ApiError::bad_request(e.to_string()).param("id"))
        };
        Ok(match path {
            DataPath::Infer(r) => DataRoute::Infer(r),
            DataPath::Models => DataRoute::Models,
            DataPath::Search => DataRoute::Search,
            DataPath::Answer => DataRoute::Answer,
            DataPath::SubmitJob => DataRoute::SubmitJob,
            DataPath::GetJob => DataRoute::GetJob(id()?),
            DataPath::CancelJob => DataRoute::CancelJob(id()?),
        })
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
