//! The control plane's routes (`/metrics`, `/status`, `/health`, `/api/*`), also served from a
//! thread and runtime of their own when the builder is given a control listener.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
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

/// The control plane's routes: `/metrics`, `/status`, `/health`, `/api/*`. Reads atomics and
/// the snapshot only. On an `exposed` listener (not loopback, `public_status` off), `/metrics`
/// and `/status*` need the admin key like `/api/*`; `/health` never does.
pub(super) async fn control(
    c: &Control,
    req: Request<Incoming>,
    exposed: bool,
) -> Response<RespBody> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let pages = path == "/metrics" || path == "/status" || path.starts_with("/status/");
    if exposed
        && pages
        && let Err(e) = check_admin_key(c, &req)
    {
        return error_response(&e);
    }
    let r = match (&method, path.as_str()) {
        (&Method::GET, "/metrics") => {
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
        (&Method::GET, "/status") => {
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
            let html = if req.uri().query() == Some("fragment=main") {
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
        (&Method::GET, "/health") => Ok(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        // The deep check: every part that should move, asked at once (2 s each); 503 naming
        // the parts that do not.
        (&Method::GET, "/health/ready") => {
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
        (&Method::GET, p) if p.starts_with("/status/") => detail(c, &p["/status/".len()..]).await,
        (_, p) if p.starts_with("/api/") => admin(c, req).await,
        (_, "/metrics" | "/status" | "/health" | "/health/ready") => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("{method} is not allowed on {path}"),
        )),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no route for {method} {path} (control plane)"),
        )
        .code("unknown_url")),
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
            format!(
                "<h1>Not found</h1><p>{}</p>",
                status::html_escape(&e.to_string())
            ),
        ),
        Err(e @ status::DetailError::Failed(_)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "<h1>Not read</h1><p>{}</p>",
                status::html_escape(&e.to_string())
            ),
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
