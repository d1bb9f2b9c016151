//! The HTTP server: start-up, the accept loop, routes and the data plane's request handling.
//! The control plane (`/metrics`, `/status`, `/api/*`), which reads only atomics and the
//! snapshot, is in `control`; the admin API in `admin`.

mod admin;
mod admission;
mod answers;
mod builder;
mod control;
mod data;
mod data_routes;
mod guard;
mod job_dispatch;
mod slow_reader;

use self::admission::{DataPath, DataRoute, data_routes};
use self::control::{Page, control_routes, serve_page, spawn_control_thread};
pub use builder::CoordinatorBuilder;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use horos_server_control::routes::{Miss, RouteError, RouteTable};
use http::header::CONTENT_LENGTH;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::admission::Places;
use crate::admission::loadclock::LoadClock;
use crate::admission::room::{RoomDemand, RoomQueue};
use crate::admission::scheduler::{QueueObserver, Scheduler};
use crate::config::CoordinatorConfig;
use crate::control::admin_ext::AdminExtension;
use crate::control::snapshot::{self, DecisionLog, GpuGauges, ModeBoard, Snapshot, Sources};
use crate::control::status::StatusSection;
use crate::data::core::Core;
use crate::data::manifest::Manifest;
use crate::data::metrics::Metrics;
use crate::data::proxy::{RespBody, error_response};
use crate::data::record::Record;
use crate::data::search::Searcher;
use crate::error::{ApiError, CoordinatorError, InvalidConfig};
use crate::jobs::{self, Jobs};
use crate::settings::Settings;
use crate::tenancy::limits::{GatePolicy, Gatekeeper};
use crate::tenancy::profiles::Profiles;
use crate::tenancy::{Callers, ReloadError, ReloadHandle, ReloadReport, Reloader, TenancySource};
use crate::upstream::remote::RemoteUpstream;
use crate::upstream::{Routes, UpstreamPool, UpstreamSet};
use horos_server_control::{HealthCheck, LogBook, Unhealthy};

/// Largest admin request body.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// What the control plane reads: never a lock or semaphore of the data plane.
/// Appends more Prometheus series to `/metrics` (a binary's own counters). It runs on the
/// control plane: read atomics or a snapshot, never a lock the data plane holds.
pub type ExtraMetrics = Arc<dyn Fn(&mut String) + Send + Sync>;

struct Control {
    snapshot: watch::Receiver<Arc<Snapshot>>,
    metrics: Arc<Metrics>,
    extra: Option<ExtraMetrics>,
    settings: Arc<Settings>,
    api_key: Option<crate::Secret>,
    models: Vec<String>,
    /// For the admin API's model operations, run on `data_rt`.
    core: Arc<Core>,
    /// The data plane's runtime (the admin API may be served from the control thread's).
    data_rt: tokio::runtime::Handle,
    /// The async jobs, for the admin's list and cancel.
    jobs: Option<Jobs>,
    /// The owner's sections of the status page.
    sections: Vec<Arc<dyn StatusSection>>,
    /// The owner's admin routes.
    extensions: Vec<Arc<dyn AdminExtension>>,
    /// The admin API's routes with the extensions', built at start.
    admin_routes: horos_server_control::routes::RouteTable<admin::AdminRoute>,
    /// The servers' logs (`/api/v1/logs`, the status page).
    logs: Option<Arc<dyn LogBook>>,
    /// Keys, limits and profiles read again (`POST /api/v1/reload`).
    reloader: Option<Arc<Reloader>>,
    /// The parts `/health/ready` asks (the scheduler first, then the owner's).
    health: Vec<Arc<dyn HealthCheck>>,
}

struct App {
    core: Arc<Core>,
    control: Arc<Control>,
    jobs: Option<Jobs>,
    searcher: Option<Arc<dyn Searcher>>,
    /// Whether this listener's `/status*` and `/metrics` need the admin key (it is not a
    /// loopback address and `public_status` is off).
    exposed: bool,
}

/// A running coordinator. Dropping it stops serving and its background tasks (jobs in
/// progress come back after their visibility timeout); [`Coordinator::shutdown`] also gives
/// them back at once and lets open requests finish.
pub struct Coordinator {
    addr: SocketAddr,
    decision_log: DecisionLog,
    control_addr: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
    accept: Option<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    jobs: Option<Jobs>,
    metrics: Arc<Metrics>,
    /// The learned load times (saved at shutdown).
    loads: Arc<LoadClock>,
    room: Arc<RoomQueue>,
    reloader: Option<Arc<Reloader>>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// A builder over `config` and `upstream`.
    pub fn builder(
        config: CoordinatorConfig,
        upstream: Arc<dyn UpstreamPool>,
    ) -> CoordinatorBuilder {
        CoordinatorBuilder::new(config, upstream)
    }

    /// Starts with no GPU gauges (see [`CoordinatorBuilder::start`]).
    pub async fn start(
        config: CoordinatorConfig,
        upstream: Arc<dyn UpstreamPool>,
        listener: TcpListener,
    ) -> Result<Coordinator, CoordinatorError> {
        Self::builder(config, upstream).start(listener).await
    }

    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where other components post decisions for the status page.
    pub fn decision_log(&self) -> DecisionLog {
        self.decision_log.clone()
    }

    /// The requests waiting for GPU room for a pooled model (see [`RoomDemand`]).
    pub fn room_demand(&self) -> RoomDemand {
        RoomDemand(Arc::clone(&self.room))
    }

    /// Reads the keys, limits and profiles again from the builder's
    /// [`tenancy_source`](CoordinatorBuilder::tenancy_source) and applies them to new
    /// requests, or refuses the whole reading (see [`ReloadReport`](crate::ReloadReport)).
    pub async fn reload(&self) -> Result<ReloadReport, ReloadError> {
        self.reload_handle().reload().await
    }

    /// A handle that reloads this coordinator from elsewhere (a signal handler), as
    /// [`Coordinator::reload`] does.
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle(self.reloader.clone())
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The dedicated control-plane address, if one was given
    /// ([`CoordinatorBuilder::control_listener`]).
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_addr
    }

    /// Stops accepting, stops the job workers and gives their jobs back to the queue, lets
    /// open connections finish their requests (up to `grace`).
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop.send_replace(true);
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        if let Some(j) = &self.jobs {
            j.release_all().await;
        }
        if let Some(a) = self.accept.take() {
            let _ = tokio::time::timeout(grace, a).await;
        }
        // After the open requests ended: their usage too, and the load times measured.
        if let Some(j) = &self.jobs {
            if let Err(e) = j.save_usage(&self.metrics.usage).await {
                tracing::warn!(error = %e, "usage not saved at shutdown");
            }
            if let Err(e) = j.save_load_times(&self.loads).await {
                tracing::warn!(error = %e, "load times not saved at shutdown");
            }
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        for t in &self.tasks {
            t.abort();
        }
        if let Some(a) = &self.accept {
            a.abort();
        }
    }
}

/// How long an admin request's (small) body may take to arrive.
const ADMIN_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The answer to a connection beyond `max_connections`, written before it is closed.
const AT_CAPACITY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
retry-after: 1\r\nconnection: close\r\ncontent-length: 120\r\n\r\n\
{\"error\":{\"message\":\"too many connections: try again\",\"type\":\"server_error\",\
\"param\":null,\"code\":\"too_many_connections\"}}";

async fn accept_loop(listener: TcpListener, app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let connections = Arc::new(tokio::sync::Semaphore::new(app.core.cfg().max_connections));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => return,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            // Answered and closed at once, so a flood of idle connections cannot hold every
            // descriptor: the listener keeps accepting and every client hears why.
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(AT_CAPACITY))
                    .await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let app = Arc::clone(&app);
        let mut stop = stop.clone();
        let write_timeout = crate::clock::secs(app.core.cfg().write_timeout_s);
        let stream = slow_reader::WriteTimeout::new(stream, write_timeout);
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req| handle(Arc::clone(&app), req));
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .keep_alive(true)
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
}

/// Serves one request of the main listener: the browser checks first ([`guard`]), the route,
/// then the answer's hardening headers; a handler that panics answers 500 (logged) instead of
/// dropping the connection.
async fn handle(app: Arc<App>, req: Request<Incoming>) -> Result<Response<RespBody>, Infallible> {
    let served = Arc::clone(&app);
    Ok(guarded(app.core.cfg(), req, |req| route(served, req)).await)
}

/// One request of either listener: the browser checks first ([`guard`]; a refusal is answered
/// before anything of the request is read), then `serve` (a panic in it answered 500), then the
/// answer's hardening headers.
pub(super) async fn guarded<F: std::future::Future<Output = Response<RespBody>>>(
    cfg: &CoordinatorConfig,
    req: Request<Incoming>,
    serve: impl FnOnce(Request<Incoming>) -> F,
) -> Response<RespBody> {
    let origin = req.headers().get(http::header::ORIGIN).cloned();
    let mut r = if let Some(pre) = guard::preflight(cfg, &req) {
        pre
    } else if let Err(e) = guard::check(cfg, &req) {
        error_response(&e)
    } else {
        caught(serve(req)).await
    };
    guard::harden(cfg, origin.as_ref(), &mut r);
    r
}

/// `fut`'s answer, or a 500 if it panics (the last net: no malformed request may panic a
/// handler, and `tests/it/hostile.rs` drives the router to show it).
pub(super) async fn caught(
    fut: impl std::future::Future<Output = Response<RespBody>>,
) -> Response<RespBody> {
    match (CatchPanic(Box::pin(fut))).await {
        Ok(r) => r,
        Err(message) => {
            tracing::error!(panic = %message, "a request handler panicked: answered 500");
            error_response(&ApiError::internal("the request could not be served"))
        }
    }
}

/// A future whose panic becomes an error (`catch_unwind` around each poll).
struct CatchPanic<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || fut.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(p) => std::task::Poll::Ready(Err(p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned()))),
        }
    }
}

/// A route of the main listener: a data-plane route (every `/v1/` path) or a control-plane
/// page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plane {
    /// Served through the one admission path.
    Data(DataPath),
    /// Served as the control listener serves it.
    Control(Page),
}

/// The main listener's routes: the data plane's, then the control plane's, built once.
fn main_routes() -> Result<&'static RouteTable<Plane>, ApiError> {
    static TABLE: OnceLock<Result<RouteTable<Plane>, RouteError>> = OnceLock::new();
    route_table(TABLE.get_or_init(|| {
        let data = data_routes()
            .into_iter()
            .map(|(m, p, d)| (Some(m), p, Plane::Data(d)));
        let control = control_routes()
            .into_iter()
            .map(|(m, p, c)| (m, p, Plane::Control(c)));
        RouteTable::new(data.chain(control))
    }))
}

/// A table built once, or the 500 of one that could not be (a route its tests refuse).
fn route_table<R>(
    built: &'static Result<RouteTable<R>, RouteError>,
) -> Result<&'static RouteTable<R>, ApiError> {
    built
        .as_ref()
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The answer to a request no route takes: 404, or 405 with the `Allow` header the same table
/// names.
fn miss_response(miss: &Miss, method: &Method, path: &str) -> Response<RespBody> {
    let (message, code) = miss.message(method, path);
    let mut r =
        error_response(&ApiError::new(miss.status(), "invalid_request_error", message).code(code));
    if let Miss::MethodNotAllowed { allow } = miss
        && let Ok(v) = http::HeaderValue::from_str(allow)
    {
        r.headers_mut().insert(http::header::ALLOW, v);
    }
    r
}

/// The route of a request of the main listener: a data-plane route through its admission, a
/// control-plane one, or a 404/405.
async fn route(app: Arc<App>, req: Request<Incoming>) -> Response<RespBody> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let table = match main_routes() {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let found = match table.at(&method, &path) {
        Ok(found) => found,
        Err(miss) => return miss_response(&miss, &method, &path),
    };
    match *found.route {
        // Every `/v1/` route passes the one admission path (keys, allowed models, limits).
        Plane::Data(d) => match DataRoute::of(d, &found.params) {
            Ok(route) => data_routes::serve(&app, route, req).await,
            Err(e) => error_response(&e),
        },
        Plane::Control(page) => {
            let rest = found
                .params
                .raw(control::REST)
                .unwrap_or_default()
                .to_owned();
            serve_page(&app.control, page, &rest, req, app.exposed).await
        }
    }
}

/// Refuses a body whose declared length is over the limit before reading it.
fn check_length(req: &Request<Incoming>, limit: usize) -> Result<(), ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => Err(ApiError::too_large(limit)),
        _ => Ok(()),
    }
}

fn jobs_disabled() -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "invalid_request_error",
        "async jobs need a state_path",
    )
    .code("jobs_disabled")
}

/// The 404 of a job id that names no job.
fn job_not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no job {id}"),
    )
    .code("job_not_found")
}

/// The coordinator's scheduler as a part of the deep health check: requests waiting while a
/// place is free, or its lock held for more than 500 ms, is a wedged scheduler.
struct SchedulerHealth(Arc<Scheduler>);

#[async_trait::async_trait]
impl HealthCheck for SchedulerHealth {
    fn part(&self) -> String {
        "scheduler".to_owned()
    }

    async fn check(&self) -> Result<(), Unhealthy> {
        match self.0.wedged(Duration::from_millis(500)).await {
            Some(why) => Err(Unhealthy(why)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What the main listener's table makes of `method` `path`: the data route (made as
    /// `route` makes it), the control page, or the miss.
    fn main_route(method: Method, path: &str) -> Result<Result<DataRoute, Page>, Miss> {
        let found = main_routes().unwrap().at(&method, path)?;
        Ok(match *found.route {
            Plane::Data(d) => Ok(DataRoute::of(d, &found.params).unwrap()),
            Plane::Control(page) => Err(page),
        })
    }

    fn allow(a: &str) -> Miss {
        Miss::MethodNotAllowed { allow: a.into() }
    }

    #[test]
    fn every_v1_path_is_a_data_route_and_every_miss_is_the_tables() {
        use crate::data::route::Route;
        let data = |m, p| main_route(m, p).unwrap().unwrap();
        assert_eq!(
            data(Method::POST, "/v1/chat/completions"),
            DataRoute::Infer(Route::Chat)
        );
        assert_eq!(
            data(Method::POST, "/v1/audio/speech"),
            DataRoute::Infer(Route::Speech)
        );
        assert_eq!(data(Method::GET, "/v1/models"), DataRoute::Models);
        assert_eq!(data(Method::POST, "/v1/search"), DataRoute::Search);
        assert_eq!(data(Method::POST, "/v1/answers"), DataRoute::Answer);
        assert_eq!(data(Method::POST, "/v1/jobs"), DataRoute::SubmitJob);
        assert_eq!(
            data(Method::GET, "/v1/jobs/7"),
            DataRoute::GetJob("7".into())
        );
        // Parameters by name, percent-decoded; an invalid escape stays as it is.
        assert_eq!(
            data(Method::POST, "/v1/jobs/a%2Fb/cancel"),
            DataRoute::CancelJob("a/b".into())
        );
        assert_eq!(
            data(Method::GET, "/v1/jobs/%ZZ"),
            DataRoute::GetJob("%ZZ".into())
        );
        let found = main_routes()
            .unwrap()
            .at(&Method::GET, "/v1/jobs/%FF")
            .unwrap();
        let Plane::Data(d) = *found.route else {
            panic!("not a data route")
        };
        assert_eq!(
            DataRoute::of(d, &found.params).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        // A path served under other methods is a 405 naming them; any other, a 404.
        assert_eq!(
            main_route(Method::GET, "/v1/chat/completions").unwrap_err(),
            allow("POST")
        );
        assert_eq!(
            main_route(Method::DELETE, "/v1/jobs/7").unwrap_err(),
            allow("GET")
        );
        assert_eq!(
            main_route(Method::POST, "/v1/jobs/cancel").unwrap_err(),
            allow("GET")
        );
        assert_eq!(
            main_route(Method::POST, "/metrics").unwrap_err(),
            allow("GET")
        );
        let long = format!("/v1/{}", "a/".repeat(5_000));
        for p in [
            "/v1/unknown",
            "/v1/jobs/",
            "/v1/jobs//cancel",
            "/v1/jobs/1/2/cancel",
            "/v1/jobs/1/2",
            "/v1",
            "/",
            "/api/",
            "/status/",
            long.as_str(),
        ] {
            assert_eq!(
                main_route(Method::POST, p).unwrap_err(),
                Miss::NotFound,
                "{p}"
            );
        }
        // The control plane's pages; `/api/` and below is the admin API's, whatever the
        // method.
        assert_eq!(main_route(Method::GET, "/status"), Ok(Err(Page::Status)));
        assert_eq!(
            main_route(Method::GET, "/status/documents/3"),
            Ok(Err(Page::StatusDetail))
        );
        assert_eq!(main_route(Method::PATCH, "/api/v1/x"), Ok(Err(Page::Admin)));
        // No control route lives under `/v1/`: each of those is a data route, admitted.
        for (_, path, _) in control_routes() {
            assert!(!path.starts_with("/v1"), "{path}");
        }
    }

    #[test]
    fn a_405_carries_the_allow_header_of_the_table() {
        let miss = main_route(Method::PUT, "/v1/jobs/7/cancel").unwrap_err();
        let r = miss_response(&miss, &Method::PUT, "/v1/jobs/7/cancel");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[http::header::ALLOW], "POST");
        let r = miss_response(&Miss::NotFound, &Method::GET, "/nope");
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(r.headers().get(http::header::ALLOW).is_none());
    }

    #[test]
    fn the_at_capacity_answer_says_its_own_length() {
        let text = std::str::from_utf8(AT_CAPACITY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap();
        assert_eq!(length.parse::<usize>().unwrap(), body.len());
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "too_many_connections");
    }
}
