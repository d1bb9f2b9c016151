//! The admin API (`/api/*`, behind `api_key`): runtime settings, the status snapshot, models,
//! async jobs and usage, the servers' logs, a reload of keys, limits and profiles, and the
//! owner's extensions (the VRAM ledger's leases, ingest).

use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::data::{cancel, job};
use super::{ADMIN_BODY_TIMEOUT, Control, MAX_ADMIN_BODY, check_length, jobs_disabled, segment};
use crate::control::admin_ext::AdminExtension;
use crate::control::log_admin;
use crate::control::model_admin::{self, ModelOp};
use crate::data::proxy::{RespBody, json_response};
use crate::data::request::{parse_object, read_limited};
use crate::error::ApiError;
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

/// `a=b&c=d` with `+` and `%XX` decoded (invalid escapes kept as they are; never panics on
/// any input).
pub(super) fn query_pairs(query: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let hex = |c: u8| (c as char).to_digit(16);
                    match (hex(b[i + 1]), hex(b[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
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

pub(super) async fn admin(
    c: &Control,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    check_admin_key(c, &req)?;
    let method = req.method().clone();
    match (method, req.uri().path()) {
        (Method::GET, "/api/v1/config") => Ok(json_response(StatusCode::OK, &c.settings.to_json())),
        (Method::PUT, "/api/v1/config") => {
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
        (Method::GET, "/api/v1/models") => {
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
        (Method::POST, "/api/v1/models/unload") => {
            let task = c
                .data_rt
                .spawn(model_admin::unload_all(Arc::clone(&c.core)));
            let v = task
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
            Ok(json_response(StatusCode::OK, &v))
        }
        (Method::POST, p) if ModelOp::parse(p).is_some() => {
            let Some((op, model)) = ModelOp::parse(p) else {
                return Err(ApiError::internal("model operation"));
            };
            let task = c
                .data_rt
                .spawn(model_admin::run(Arc::clone(&c.core), op, model.to_owned()));
            let v = task
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
            Ok(json_response(StatusCode::OK, &v))
        }
        (m, p) if profile_admin::name_of(p).is_some() => {
            let name = profile_admin::name_of(p).flatten();
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
        (Method::GET, "/api/v1/jobs") => {
            let jobs = c.jobs.as_ref().ok_or_else(jobs_disabled)?;
            let filter = job_filter(req.uri().query().unwrap_or(""))?;
            let data = jobs.list(filter).await?;
            Ok(json_response(StatusCode::OK, &json!({ "data": data })))
        }
        (Method::GET, p) if segment(p, "/api/v1/jobs/", "").is_some() => {
            let id = segment(p, "/api/v1/jobs/", "").unwrap_or_default();
            job(c.jobs.as_ref(), id, JobScope::All).await
        }
        (Method::POST, p) if segment(p, "/api/v1/jobs/", "/cancel").is_some() => {
            let id = segment(p, "/api/v1/jobs/", "/cancel").unwrap_or_default();
            cancel(c.jobs.as_ref(), id, JobScope::All).await
        }
        (Method::GET, "/api/v1/usage") => {
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
        (Method::GET, "/api/v1/status") => {
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
        (Method::POST, p) if segment(p, "/api/v1/dead/", "/requeue").is_some() => {
            let id = segment(p, "/api/v1/dead/", "/requeue").unwrap_or_default();
            requeue_dead(c, id).await
        }
        (Method::POST, "/api/v1/reload") => match ReloadHandle(c.reloader.clone()).reload().await {
            Ok(report) => Ok(json_response(StatusCode::OK, &json!(report))),
            Err(e) => Err(reload_refused(&e)),
        },
        (Method::GET, p) if log_admin::name_of(p).is_some() => {
            let v = match log_admin::name_of(p).flatten() {
                None => log_admin::list(c.logs.as_ref()).await?,
                Some(name) => {
                    let query = query_pairs(req.uri().query().unwrap_or(""));
                    log_admin::read(c.logs.as_ref(), name, &query).await?
                }
            };
            Ok(json_response(StatusCode::OK, &v))
        }
        (Method::GET, "/api/v1/gpus") => {
            let snap = Arc::clone(&c.snapshot.borrow());
            let v = json!({"gpus": snap.gpus, "history": snap.gpu_history.as_slice()});
            Ok(json_response(StatusCode::OK, &v))
        }
        (m, p) if extension(c, p).is_some() => {
            let Some((ext, rest)) = extension(c, p) else {
                return Err(ApiError::internal("extension vanished"));
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
            let (status, v) = ext.call(&m, &rest, body).await;
            Ok(json_response(status, &v))
        }
        (m, p) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no route for {m} {p}"),
        )
        .code("unknown_url")),
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

/// The owner's extension serving `path`, and the path after its prefix.
fn extension<'c>(c: &'c Control, path: &str) -> Option<(&'c dyn AdminExtension, String)> {
    c.extensions.iter().find_map(|e| {
        let rest = path.strip_prefix("/api/v1/")?.strip_prefix(e.name())?;
        (rest.is_empty() || rest.starts_with('/')).then(|| (e.as_ref(), rest.to_owned()))
    })
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
