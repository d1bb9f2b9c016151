//! The admin API (`/api/*`, behind `api_key`): runtime settings, the status snapshot, models,
//! async jobs and usage, the servers' logs, a reload of keys, limits and profiles, and the
//! owner's extensions (the VRAM ledger's leases, ingest).

use std::sync::Arc;

use horos_server_control::routes::{PathParams, RouteTable};
use http::header::{ALLOW, AUTHORIZATION};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::data::{cancel, job};
use super::{ADMIN_BODY_TIMEOUT, Control, MAX_ADMIN_BODY, check_length, jobs_disabled};
use crate::control::admin_ext::AdminExtension;
use crate::control::log_admin;
use crate::control::model_admin::{self, ModelOp};
use crate::data::proxy::{RespBody, json_response};
use crate::data::request::{parse_object, read_limited};
use crate::error::{ApiError, InvalidConfig};
use crate::jobs::api::{JobKind, JobStatus};
use crate::jobs::{JobFilter, JobScope};
use crate::tenancy::auth::bearer_token;
use crate::tenancy::profile_admin;
use crate::tenancy::{ReloadError, ReloadHandle};

/// The admin job list's filters from a query string (`state`, `kind`, `client`, `model`,
/// `limit`); an unknown key or value is a 400 naming it.
fn job_filter(query: &str) -> Result<JobFilter, ApiError> {
    let mut f = JobFilter {
        limit: 100,
        ..JobFilter::default()
    };
    for (k, v) in query_pairs(query) {
        let bad = |what: &str| ApiError::bad_request(format!("{k}={v}: {what}")).param(&k);
        match k.as_str() {
            "state" => f.state = Some(JobStatus::parse(&v).ok_or_else(|| bad("unknown state"))?),
            "kind" => f.kind = Some(JobKind::parse(&v).ok_or_else(|| bad("unknown kind"))?),
            "client" => f.client = Some(v),
            "model" => f.model = Some(v),
            "limit" => {
                f.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| bad("a number from 1 to 10000"))?
            }
            _ => return Err(bad("unknown filter (state, kind, client, model, limit)")),
        }
    }
    Ok(f)
}

/// `a=b&c=d` as `application/x-www-form-urlencoded` reads it (`+` and `%XX` decoded; an
/// invalid escape kept as it is).
pub(super) fn query_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// Refuses (401) a request without the admin key, where one is configured.
pub(super) fn check_admin_key(c: &Control, req: &Request<Incoming>) -> Result<(), ApiError> {
    if let Some(key) = &c.api_key {
        let given = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .unwrap_or("");
        if !key.matches(given.trim().as_bytes()) {
            return Err(ApiError::unauthorized());
        }
    }
    Ok(())
}

/// A route of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AdminRoute {
    /// `GET /api/v1/config`.
    Config,
    /// `PUT /api/v1/config`.
    PatchConfig,
    /// `GET /api/v1/models`.
    Models,
    /// `POST /api/v1/models/unload`.
    UnloadAll,
    /// `POST /api/v1/models/{*target}`: `NAME/load`, `unload`, `pin`, `unpin`.
    Model,
    /// `GET /api/v1/profiles`.
    Profiles,
    /// `GET`, `PUT`, `DELETE /api/v1/profiles/{name}`.
    Profile,
    /// `GET /api/v1/jobs`.
    Jobs,
    /// `GET /api/v1/jobs/{id}`.
    Job,
    /// `POST /api/v1/jobs/{id}/cancel`.
    CancelJob,
    /// `GET /api/v1/usage`.
    Usage,
    /// `GET /api/v1/status`.
    Status,
    /// `POST /api/v1/dead/{id}/requeue`.
    Requeue,
    /// `POST /api/v1/reload`.
    Reload,
    /// `GET /api/v1/logs`.
    Logs,
    /// `GET /api/v1/logs/{*name}` (a name may hold `/`, or `%2F`).
    Log,
    /// `GET /api/v1/gpus`.
    Gpus,
    /// Any method on `/api/v1/{name}` and below: the owner's extension at this index.
    Extension(usize),
}

/// The admin API's routes, and the routes of `extensions` (each under `/api/v1/{name}`); an
/// extension whose name is one of the API's own, or another's, is refused.
pub(super) fn admin_routes(
    extensions: &[Arc<dyn AdminExtension>],
) -> Result<RouteTable<AdminRoute>, InvalidConfig> {
    use AdminRoute as A;
    let (get, post) = (Some(Method::GET), Some(Method::POST));
    let mut routes: Vec<(Option<Method>, String, AdminRoute)> = [
        (get.clone(), "/api/v1/config", A::Config),
        (Some(Method::PUT), "/api/v1/config", A::PatchConfig),
        (get.clone(), "/api/v1/models", A::Models),
        (post.clone(), "/api/v1/models/unload", A::UnloadAll),
        (post.clone(), "/api/v1/models/{*target}", A::Model),
        (get.clone(), "/api/v1/profiles", A::Profiles),
        (get.clone(), "/api/v1/profiles/", A::Profiles),
        (get.clone(), "/api/v1/profiles/{name}", A::Profile),
        (Some(Method::PUT), "/api/v1/profiles/{name}", A::Profile),
        (Some(Method::DELETE), "/api/v1/profiles/{name}", A::Profile),
        (get.clone(), "/api/v1/jobs", A::Jobs),
        (get.clone(), "/api/v1/jobs/{id}", A::Job),
        (post.clone(), "/api/v1/jobs/{id}/cancel", A::CancelJob),
        (get.clone(), "/api/v1/usage", A::Usage),
        (get.clone(), "/api/v1/status", A::Status),
        (post.clone(), "/api/v1/dead/{id}/requeue", A::Requeue),
        (post.clone(), "/api/v1/reload", A::Reload),
        (get.clone(), "/api/v1/logs", A::Logs),
        (get.clone(), "/api/v1/logs/", A::Logs),
        (get.clone(), "/api/v1/logs/{*name}", A::Log),
        (get, "/api/v1/gpus", A::Gpus),
    ]
    .into_iter()
    .map(|(m, p, r)| (m, p.to_owned(), r))
    .collect();
    for (i, e) in extensions.iter().enumerate() {
        let name = e.name();
        let bad = |expected| InvalidConfig {
            key: "admin extension".into(),
            value: name.to_owned(),
            expected,
        };
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            return Err(bad("a name of letters, digits, `-` and `_`"));
        }
        for path in [
            format!("/api/v1/{name}"),
            format!("/api/v1/{name}/"),
            format!("/api/v1/{name}/{{*{EXTENSION_REST}}}"),
        ] {
            routes.push((None, path, A::Extension(i)));
        }
    }
    RouteTable::new(routes).map_err(|e| InvalidConfig {
        key: "admin extension".into(),
        value: e.route,
        expected: "a route the admin API does not serve already",
    })
}

/// The name of the rest of an extension's path.
const EXTENSION_REST: &str = "rest";

/// A path parameter, decoded; a 400 naming it if it is not UTF-8 once decoded.
fn param(params: &PathParams<'_, '_>, name: &str) -> Result<String, ApiError> {
    params
        .decoded(name)
        .map(|v| v.into_owned())
        .map_err(|e| ApiError::bad_request(e.to_string()).param(name))
}

/// Serves an admin request: the key first, then its route from the table built at start
/// (404 or 405 with `Allow` from the same table).
pub(super) async fn admin(
    c: &Control,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    check_admin_key(c, &req)?;
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let found = match c.admin_routes.at(&method, &path) {
        Ok(found) => found,
        Err(miss) => return Ok(super::miss_response(&miss, &method, &path)),
    };
    let params = &found.params;
    match *found.route {
        AdminRoute::Config => Ok(json_response(StatusCode::OK, &c.settings.to_json())),
        AdminRoute::PatchConfig => {
            check_length(&req, MAX_ADMIN_BODY)?;
            let patch = parse_object(
                &read_limited(req.into_body(), MAX_ADMIN_BODY, ADMIN_BODY_TIMEOUT).await?,
            )?;
            let settings = Arc::clone(&c.settings);
            let v = tokio::task::spawn_blocking(move || settings.update(&patch))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
            Ok(json_response(StatusCode::OK, &v))
        }
        AdminRoute::Models => {
            // Live, not the snapshot: an operator who just loaded a model must see it. A rare
            // admin call; the pool's lock is held only to copy its slots.
            let data: Vec<serde_json::Value> = c
                .core
                .upstream()
                .slots()
                .iter()
                .map(|s| {
                    let mut v = serde_json::to_value(s).unwrap_or_default();
                    v["remote"] = json!(c.core.is_remote(&s.model));
                    v
                })
                .collect();
            Ok(json_response(StatusCode::OK, &json!({ "data": data })))
        }
        AdminRoute::UnloadAll => {
            let task = c
                .data_rt
                .spawn(model_admin::unload_all(Arc::clone(&c.core)));
            let v = task
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
            Ok(json_response(StatusCode::OK, &v))
        }
        AdminRoute::Model => {
            let target = params.raw("target").unwrap_or_default();
            let (op, model) = ModelOp::parse(target)?;
            let task = c
                .data_rt
                .spawn(model_admin::run(Arc::clone(&c.core), op, model));
            let v = task
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
            Ok(json_response(StatusCode::OK, &v))
        }
        route @ (AdminRoute::Profiles | AdminRoute::Profile) => {
            let name = match route {
                AdminRoute::Profile => Some(param(params, "name")?),
                _ => None,
            };
            let m = method;
            let body = if m == Method::PUT {
                check_length(&req, MAX_ADMIN_BODY)?;
                Some(read_limited(req.into_body(), MAX_ADMIN_BODY, ADMIN_BODY_TIMEOUT).await?)
            } else {
                None
            };
            // A change writes the state file: on a blocking thread.
            let profiles = Arc::clone(c.core.callers().profiles());
            let (status, v) = tokio::task::spawn_blocking(move || {
                profile_admin::handle(&profiles, &m, name.as_deref(), body)
            })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))??;
            Ok(json_response(status, &v))
        }
        AdminRoute::Jobs => {
            let jobs = c.jobs.as_ref().ok_or_else(jobs_disabled)?;
            let filter = job_filter(req.uri().query().unwrap_or(""))?;
            let data = jobs.list(filter).await?;
            Ok(json_response(StatusCode::OK, &json!({ "data": data })))
        }
        AdminRoute::Job => {
            let id = param(params, "id")?;
            job(c.jobs.as_ref(), &id, JobScope::All).await
        }
        AdminRoute::CancelJob => {
            let id = param(params, "id")?;
            cancel(c.jobs.as_ref(), &id, JobScope::All).await
        }
        AdminRoute::Usage => {
            let since_start: Vec<serde_json::Value> = c
                .metrics
                .usage
                .totals()
                .into_iter()
                .map(|((caller, model), n)| {
                    json!({"caller": caller, "model": model, "requests": n.requests,
                           "prompt_tokens": n.prompt_tokens,
                           "completion_tokens": n.completion_tokens})
                })
                .collect();
            let by_day = match &c.jobs {
                Some(j) => j.usage_by_day().await?,
                None => Vec::new(),
            };
            Ok(json_response(
                StatusCode::OK,
                &json!({"since_start": since_start, "by_day": by_day}),
            ))
        }
        AdminRoute::Status => {
            let snap = Arc::clone(&c.snapshot.borrow());
            let mut v =
                serde_json::to_value(&*snap).map_err(|e| ApiError::internal(e.to_string()))?;
            // The owner's sections (lanes, ingest, ...), as they render on the page.
            let sections: serde_json::Map<String, serde_json::Value> =
                c.sections.iter().filter_map(|s| s.to_json()).collect();
            if let Some(o) = v.as_object_mut() {
                o.insert("sections".into(), serde_json::Value::Object(sections));
                let requestors = c.metrics.requestors.all();
                o.insert("requestors".into(), json!(requestors));
            }
            Ok(json_response(StatusCode::OK, &v))
        }
        AdminRoute::Requeue => {
            let id = param(params, "id")?;
            requeue_dead(c, &id).await
        }
        AdminRoute::Reload => match ReloadHandle(c.reloader.clone()).reload().await {
            Ok(report) => Ok(json_response(StatusCode::OK, &json!(report))),
            Err(e) => Err(reload_refused(&e)),
        },
        AdminRoute::Logs => Ok(json_response(
            StatusCode::OK,
            &log_admin::list(c.logs.as_ref()).await?,
        )),
        AdminRoute::Log => {
            let name = param(params, "name")?;
            let query = query_pairs(req.uri().query().unwrap_or(""));
            let v = log_admin::read(c.logs.as_ref(), name, &query).await?;
            Ok(json_response(StatusCode::OK, &v))
        }
        AdminRoute::Gpus => {
            let snap = Arc::clone(&c.snapshot.borrow());
            let v = json!({"gpus": snap.gpus, "history": snap.gpu_history.as_slice()});
            Ok(json_response(StatusCode::OK, &v))
        }
        AdminRoute::Extension(i) => {
            let Some(ext) = c.extensions.get(i) else {
                return Err(ApiError::internal("extension vanished"));
            };
            // What the extension routes: `""`, `/`, or `/` and the rest as sent.
            let rest = match params.raw(EXTENSION_REST) {
                Some(rest) => format!("/{rest}"),
                None if path.ends_with('/') => "/".to_owned(),
                None => String::new(),
            };
            check_length(&req, MAX_ADMIN_BODY)?;
            let bytes = read_limited(req.into_body(), MAX_ADMIN_BODY, ADMIN_BODY_TIMEOUT).await?;
            let body = if bytes.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_slice(&bytes).map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_request_error",
                        format!("the body is not JSON: {e}"),
                    )
                })?
            };
            let (status, v) = ext.call(&method, &rest, body).await;
            let mut r = json_response(status, &v);
            // An extension's 405 names the methods its table serves the path under.
            if status == StatusCode::METHOD_NOT_ALLOWED
                && let Some(allow) = v["error"]["allow"]
                    .as_str()
                    .and_then(|a| HeaderValue::from_str(a).ok())
            {
                r.headers_mut().insert(ALLOW, allow);
            }
            Ok(r)
        }
    }
}

/// The answer to a refused reload: 501 without a source, 422 for settings that do not pass
/// their checks (the settings in force stay), 500 for a state file that cannot be read.
fn reload_refused(e: &ReloadError) -> ApiError {
    let (status, kind, code) = match e {
        ReloadError::NoSource => (
            StatusCode::NOT_IMPLEMENTED,
            "invalid_request_error",
            "reload_unavailable",
        ),
        ReloadError::Source(_) | ReloadError::Invalid(_) | ReloadError::WouldOpen => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request_error",
            "config_refused",
        ),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "reload_failed",
        ),
    };
    ApiError::new(status, kind, e.to_string()).code(code)
}

/// `POST /api/v1/dead/ID/requeue`: the dead job back in its queue as a new job with fresh
/// attempts; 404 when no dead letter has that id.
async fn requeue_dead(c: &Control, id: &str) -> Result<Response<RespBody>, ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no dead letter {id}"),
        )
        .code("not_found")
    };
    let id: i64 = id.parse().map_err(|_| not_found())?;
    let queue = c
        .jobs
        .as_ref()
        .map(|j| j.queue.clone())
        .ok_or_else(|| ApiError::internal("no queue database (state_path)"))?;
    match queue.requeue_dead(id).await {
        Ok(new_id) => Ok(json_response(
            StatusCode::OK,
            &json!({"requeued": id, "id": new_id}),
        )),
        Err(squeueha::Error::NotFound(_)) => Err(not_found()),
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use horos_server_control::routes::Miss;

    /// An extension that answers with the path it was given.
    struct Echo(&'static str);

    #[async_trait::async_trait]
    impl AdminExtension for Echo {
        fn name(&self) -> &str {
            self.0
        }

        async fn call(
            &self,
            _: &Method,
            rest: &str,
            _: serde_json::Value,
        ) -> (StatusCode, serde_json::Value) {
            (StatusCode::OK, json!(rest))
        }
    }

    #[test]
    fn admin_routes_come_from_one_table_with_the_extensions() {
        let exts: Vec<Arc<dyn AdminExtension>> = vec![Arc::new(Echo("leases"))];
        let t = admin_routes(&exts).unwrap();
        let route = |m: Method, p: &str| t.at(&m, p).map(|f| *f.route);
        assert_eq!(route(Method::GET, "/api/v1/jobs/7"), Ok(AdminRoute::Job));
        assert_eq!(
            route(Method::GET, "/api/v1/jobs/7/cancel").unwrap_err(),
            Miss::MethodNotAllowed {
                allow: "POST".into()
            }
        );
        assert_eq!(
            route(Method::POST, "/api/v1/profiles/p").unwrap_err(),
            Miss::MethodNotAllowed {
                allow: "GET, PUT, DELETE".into()
            }
        );
        assert_eq!(
            route(Method::POST, "/api/v1/models/Qwen/Qwen2.5/load"),
            Ok(AdminRoute::Model)
        );
        assert_eq!(
            route(Method::POST, "/api/v1/models/unload"),
            Ok(AdminRoute::UnloadAll)
        );
        assert_eq!(route(Method::GET, "/api/v1/logs/a/b"), Ok(AdminRoute::Log));
        for p in [
            "/api/v1/dead/requeue",
            "/api/v1/jobs/1/2/cancel",
            "/api/v1/nope",
            "/api/v2/jobs",
        ] {
            assert_eq!(route(Method::POST, p).unwrap_err(), Miss::NotFound, "{p}");
        }
        // An extension takes its name and everything below it, under any method.
        for (p, rest) in [
            ("/api/v1/leases", None),
            ("/api/v1/leases/", None),
            ("/api/v1/leases/7/renew", Some("7/renew")),
            ("/api/v1/leases/renew", Some("renew")),
        ] {
            let f = t.at(&Method::PATCH, p).unwrap();
            assert_eq!(*f.route, AdminRoute::Extension(0), "{p}");
            assert_eq!(f.params.raw(EXTENSION_REST), rest, "{p}");
        }
        // An extension named as a route of the API, or as another extension, is refused.
        for name in ["jobs", "leases", "a/b", ""] {
            let exts: Vec<Arc<dyn AdminExtension>> =
                vec![Arc::new(Echo("leases")), Arc::new(Echo(name))];
            assert!(admin_routes(&exts).is_err(), "{name}");
        }
    }

    #[test]
    fn query_strings_decode_and_job_filters_name_bad_values() {
        assert_eq!(
            query_pairs("client=a%20b&model=Qwen%2FQwen+2&x&bad=%zz%4"),
            [
                ("client".to_owned(), "a b".to_owned()),
                ("model".to_owned(), "Qwen/Qwen 2".to_owned()),
                ("x".to_owned(), String::new()),
                ("bad".to_owned(), "%zz%4".to_owned()),
            ]
        );
        assert_eq!(query_pairs("é=%C3%A9")[0].1, "é");
        let f = job_filter("state=running&kind=chat&limit=5").unwrap();
        assert_eq!(f.state, Some(JobStatus::Running));
        assert_eq!(f.kind, Some(JobKind::Chat));
        assert_eq!(f.limit, 5);
        assert_eq!(job_filter("").unwrap().limit, 100);
        for bad in ["state=done", "limit=0", "limit=x", "sort=id"] {
            let e = job_filter(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
