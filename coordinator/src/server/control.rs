//! The control plane's routes (`/metrics`, `/status`, `/health`, `/api/*`), also served from a
//! thread and runtime of their own when the builder is given a control listener.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use horos_server_control::routes::{RouteError, RouteTable};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::Control;
use super::admin::{admin, check_admin_key};
use crate::control::status;
use crate::data::proxy::{self, RespBody, error_response, json_response};
use crate::error::{ApiError, CoordinatorError};

/// Lines of each server's log on the status page.
const STATUS_LOG_LINES: usize = 5;

/// A control-plane page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Page {
    /// `GET /metrics`.
    Metrics,
    /// `GET /status`.
    Status,
    /// `GET /status/{*rest}`: a section's page.
    StatusDetail,
    /// `GET /health`.
    Health,
    /// `GET /health/ready`: the deep check.
    Ready,
    /// `/api/{*rest}`, any method: the admin API, which routes the rest.
    Admin,
}

/// The name of the rest of a path the `StatusDetail` and `Admin` routes take.
pub(super) const REST: &str = "rest";

/// The control plane's routes (`None`: any method); the main listener serves them too.
pub(super) fn control_routes() -> [(Option<Method>, &'static str, Page); 6] {
    [
        (Some(Method::GET), "/metrics", Page::Metrics),
        (Some(Method::GET), "/status", Page::Status),
        (Some(Method::GET), "/status/{*rest}", Page::StatusDetail),
        (Some(Method::GET), "/health", Page::Health),
        (Some(Method::GET), "/health/ready", Page::Ready),
        (None, "/api/{*rest}", Page::Admin),
    ]
}

/// The control listener's routes, built once.
fn routes() -> Result<&'static RouteTable<Page>, ApiError> {
    static TABLE: OnceLock<Result<RouteTable<Page>, RouteError>> = OnceLock::new();
    super::route_table(TABLE.get_or_init(|| RouteTable::new(control_routes())))
}

/// Whether a status page's query asks for its `<main>` alone (`fragment=main`: what the page's
/// script asks).
fn main_only(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "fragment" && v == "main")
    })
}

/// Serves a request of the control listener: its page, or a 404/405 from the same table.
pub(super) async fn control(
    c: &Control,
    req: Request<Incoming>,
    exposed: bool,
) -> Response<RespBody> {
    let table = match routes() {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let path = req.uri().path().to_owned();
    let (page, rest) = match table.at(req.method(), &path) {
        Ok(found) => (
            *found.route,
            found.params.raw(REST).unwrap_or_default().to_owned(),
        ),
        Err(miss) => return super::miss_response(&miss, req.method(), &path),
    };
    serve_page(c, page, &rest, req, exposed).await
}

/// Serves a control-plane `page` (`rest`: the path after `/status/` or `/api/`). Reads atomics
/// and the snapshot only. On an `exposed` listener (not loopback, `public_status` off),
/// `/metrics` and `/status*` need the admin key like `/api/*`; `/health` never does.
pub(super) async fn serve_page(
    c: &Control,
    page: Page,
    rest: &str,
    req: Request<Incoming>,
    exposed: bool,
) -> Response<RespBody> {
    let pages = matches!(page, Page::Metrics | Page::Status | Page::StatusDetail);
    if exposed
        && pages
        && let Err(e) = check_admin_key(c, &req)
    {
        return error_response(&e);
    }
    let r = match page {
        Page::Metrics => {
            let snap = Arc::clone(&c.snapshot.borrow());
            let mut text = c.metrics.render();
            snap.render_metrics(&mut text);
            if let Some(extra) = &c.extra {
                extra(&mut text);
            }
            Ok(proxy::bytes_response(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                Bytes::from(text),
            ))
        }
        Page::Status => {
            // The logs' last lines, read on a blocking thread (files, not the data plane). A
            // page open to anyone (`public_status`) shows them to the admin key only: logs
            // hold prompts, paths and command lines.
            let open_to_anyone = c.core.cfg().public_status && check_admin_key(c, &req).is_err();
            let logs = if open_to_anyone {
                Vec::new()
            } else {
                crate::control::log_admin::tails(c.logs.as_ref(), STATUS_LOG_LINES).await
            };
            let snap = Arc::clone(&c.snapshot.borrow());
            let parts = status::PageParts {
                allow_cloud: c.settings.allow_cloud_fallback(),
                models: &c.models,
                sections: &c.sections,
                logs: &logs,
            };
            // The page's script asks for its <main> alone.
            let html = if main_only(req.uri().query()) {
                let mut main = String::with_capacity(16 * 1024);
                status::render_main(&mut main, &snap, &c.metrics, &parts);
                main
            } else {
                status::render(&snap, &c.metrics, &parts)
            };
            Ok(proxy::bytes_response(
                StatusCode::OK,
                "text/html; charset=utf-8",
                Bytes::from(html),
            ))
        }
        Page::Health => Ok(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        // The deep check: every part that should move, asked at once (2 s each); 503 naming
        // the parts that do not.
        Page::Ready => {
            let parts = horos_server_control::check_parts(&c.health, Duration::from_secs(2)).await;
            let failing: Vec<_> = parts.iter().filter(|p| !p.ok).collect();
            let (code, status) = if failing.is_empty() {
                (StatusCode::OK, "ready")
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, "not_ready")
            };
            Ok(json_response(
                code,
                &json!({"status": status, "failing": failing, "parts": parts}),
            ))
        }
        Page::StatusDetail => detail(c, rest).await,
        Page::Admin => admin(c, req).await,
    };
    r.unwrap_or_else(|e| error_response(&e))
}

/// A section's page under `/status/` (a document's report, say): the first section that serves
/// `path` answers.
async fn detail(c: &Control, path: &str) -> Result<Response<RespBody>, ApiError> {
    let Some(page) = c.sections.iter().find_map(|s| s.detail(path)) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no status page at /status/{path}"),
        )
        .code("unknown_url"));
    };
    let (code, body) = match page.await {
        Ok(body) => (StatusCode::OK, body),
        Err(e @ status::DetailError::NotFound(_)) => (
            StatusCode::NOT_FOUND,
            maud::html! { h1 { "Not found" } p { (e) } }.into_string(),
        ),
        Err(e @ status::DetailError::Failed(_)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            maud::html! { h1 { "Not read" } p { (e) } }.into_string(),
        ),
    };
    Ok(proxy::bytes_response(
        code,
        "text/html; charset=utf-8",
        Bytes::from(status::render_detail(&body)),
    ))
}

/// Serves the control plane on its own OS thread with a current-thread runtime, until `stop`.
pub(super) fn spawn_control_thread(
    l: std::net::TcpListener,
    c: Arc<Control>,
    exposed: bool,
    mut stop: watch::Receiver<bool>,
) -> Result<SocketAddr, CoordinatorError> {
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("horos-control".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = TcpListener::from_std(l) else {
                    return;
                };
                loop {
                    let accepted = tokio::select! {
                        a = listener.accept() => a,
                        _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => return,
                    };
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            // Out of file descriptors, say: wait rather than spin.
                            tracing::warn!(error = %e, "control accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let c = Arc::clone(&c);
                    let mut stop = stop.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| {
                            let c = Arc::clone(&c);
                            async move {
                                let cfg = c.core.cfg();
                                let page = |req| control(&c, req, exposed);
                                Ok::<_, Infallible>(super::guarded(cfg, req, page).await)
                            }
                        });
                        let conn = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(30))
                            .serve_connection(TokioIo::new(stream), svc);
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                    });
                }
            });
        })?;
    Ok(addr)
}
