//! The in-process server.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::answer::Job;
use crate::config::{CrashAction, FakeConfig, Fault};
use crate::http::{DropConnection, FakeBody, Resp, error_response, json_response, lock, respond};
use crate::sleep::Sleep;

/// Exit status of a server process that crashed on purpose ([`CrashAction::ExitProcess`]).
pub const CRASH_EXIT_CODE: i32 = 86;

/// Number of request bodies kept by [`FakeServer::requests`] (the oldest are dropped beyond it).
const MAX_RECORDED: usize = 10_000;

/// A request the server received on an inference endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The request body (lossy UTF-8).
    pub body: String,
    /// The `Authorization` header, if the request had one.
    pub authorization: Option<String>,
}

/// Counters of a running server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Inference requests received (chat, completions, embeddings), faulty ones included.
    pub requests: u64,
    /// Requests holding a slot now.
    pub running: u64,
    /// Requests waiting for a slot now.
    pub waiting: u64,
    /// The most requests that held a slot at the same time.
    pub max_running: u64,
    /// Whether the server crashed (stopped on a crash marker or a `crash` fault).
    pub crashed: bool,
    /// TCP connections accepted.
    pub connections: u64,
    /// `POST /sleep` calls that put the server to sleep.
    pub sleeps: u64,
    /// `POST /wake_up` calls that woke a sleeping server.
    pub wakes: u64,
    /// The level the server sleeps at now (1 or 2); `None`: awake.
    pub asleep: Option<u8>,
}

/// Settings that can change while the server runs.
#[derive(Debug)]
struct Dynamic {
    fault: Fault,
    fault_remaining: Option<u64>,
    latency: Duration,
}

struct State {
    config: FakeConfig,
    dynamic: Mutex<Dynamic>,
    sleep: Sleep,
    slots: Arc<Semaphore>,
    requests: AtomicU64,
    running: AtomicU64,
    waiting: AtomicU64,
    max_running: AtomicU64,
    crashed: AtomicBool,
    connections: AtomicU64,
    recorded: Mutex<Vec<RecordedRequest>>,
    /// `true` once the server must stop: closes the listener and every connection.
    stop: watch::Sender<bool>,
    next_id: AtomicU64,
}

/// A running fake OpenAI-compatible server on 127.0.0.1. Dropping it stops the server.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use horos_fakeai::{FakeConfig, FakeServer};
/// let server = FakeServer::start(FakeConfig::default()).await?;
/// assert!(server.url().starts_with("http://127.0.0.1:"));
/// assert_eq!(server.stats().requests, 0);
/// # Ok(()) }
/// ```
pub struct FakeServer {
    addr: SocketAddr,
    state: Arc<State>,
}

impl std::fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl FakeServer {
    /// Binds 127.0.0.1:`config.port` and serves on the current tokio runtime.
    pub async fn start(config: FakeConfig) -> io::Result<FakeServer> {
        let listener = TcpListener::bind(("127.0.0.1", config.port)).await?;
        let addr = listener.local_addr()?;
        let (stop, _) = watch::channel(false);
        let state = Arc::new(State {
            dynamic: Mutex::new(Dynamic {
                fault: config.fault,
                fault_remaining: config.fault_count,
                latency: config.latency,
            }),
            sleep: Sleep::new(&config.sleep),
            slots: Arc::new(Semaphore::new(config.slots.max(1))),
            requests: AtomicU64::new(0),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            max_running: AtomicU64::new(0),
            crashed: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            recorded: Mutex::new(Vec::new()),
            stop,
            next_id: AtomicU64::new(1),
            config,
        });
        tokio::spawn(accept_loop(listener, state.clone()));
        Ok(FakeServer { addr, state })
    }

    /// The base URL, e.g. `http://127.0.0.1:40123` (no trailing slash, no `/v1`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Current counters.
    pub fn stats(&self) -> Stats {
        let s = &self.state;
        let (sleeps, wakes, asleep) = s.sleep.counts();
        Stats {
            sleeps,
            wakes,
            asleep,
            requests: s.requests.load(Ordering::SeqCst),
            running: s.running.load(Ordering::SeqCst),
            waiting: s.waiting.load(Ordering::SeqCst),
            max_running: s.max_running.load(Ordering::SeqCst),
            crashed: s.crashed.load(Ordering::SeqCst),
            connections: s.connections.load(Ordering::SeqCst),
        }
    }

    /// The inference requests received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.recorded).clone()
    }

    /// Changes the injected fault: applied to the next `count` inference requests (`None`: all).
    pub fn set_fault(&self, fault: Fault, count: Option<u64>) {
        let mut d = lock(&self.state.dynamic);
        d.fault = fault;
        d.fault_remaining = count;
    }

    /// Changes the fault of the next `POST /sleep` calls (see [`crate::SleepScript::sleep_fault`]).
    pub fn set_sleep_fault(&self, fault: Fault) {
        self.state.sleep.set_sleep_fault(fault);
    }

    /// Changes the fault of the next `POST /wake_up` calls (see
    /// [`crate::SleepScript::wake_fault`]).
    pub fn set_wake_fault(&self, fault: Fault) {
        self.state.sleep.set_wake_fault(fault);
    }

    /// Changes the delay before response headers.
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state.dynamic).latency = latency;
    }

    /// Stops the server: closes the listener and drops every open connection.
    pub fn stop(&self) {
        self.state.stop.send_replace(true);
    }

    /// Waits until the server stopped (after [`FakeServer::stop`] or a crash).
    pub async fn stopped(&self) {
        let mut rx = self.state.stop.subscribe();
        // An error means the sender is gone, which cannot happen while `self` holds the state.
        let _ = rx.wait_for(|stopped| *stopped).await;
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut stop = state.stop.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => break,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(_) => {
                // Out of file descriptors or similar: back off briefly instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        state.connections.fetch_add(1, Ordering::SeqCst);
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let mut stop = state.stop.subscribe();
            let svc_state = state.clone();
            let conn = http1::Builder::new().keep_alive(true).serve_connection(
                TokioIo::new(stream),
                service_fn(move |req| handle(svc_state.clone(), req)),
            );
            tokio::select! {
                _ = conn => {}
                // Dropping the connection future closes the socket, mid-request or not.
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
}

/// Decrements a gauge when dropped (a cancelled request leaves the counts right).
struct GaugeGuard<'a>(&'a AtomicU64);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A held slot: counted as running until dropped.
struct Slot {
    state: Arc<State>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.state.running.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn take_slot(state: &Arc<State>) -> Result<Slot, DropConnection> {
    let permit = {
        state.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = GaugeGuard(&state.waiting);
        state
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| DropConnection)?
    };
    let now = state.running.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_running.fetch_max(now, Ordering::SeqCst);
    Ok(Slot {
        state: state.clone(),
        _permit: permit,
    })
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Resp, DropConnection> {
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/health") => Ok(respond(StatusCode::OK, "text/plain", "")),
        (&Method::GET, "/metrics") => Ok(respond(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics_text(&state),
        )),
        (&Method::GET, "/v1/models") => Ok(json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{
                "id": state.config.model, "object": "model", "created": 0,
                "owned_by": "horos-fakeai", "max_model_len": 4096
            }]}),
        )),
        (
            &Method::POST,
            "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/embeddings"
            | "/pooling"
            | "/v1/rerank"
            | "/rerank",
        ) => inference(state, req, path).await,
        (&Method::POST, "/sleep") if state.config.sleep.enabled => {
            state.sleep.sleep(req.uri().query()).await
        }
        (&Method::POST, "/wake_up") if state.config.sleep.enabled => state.sleep.wake_up().await,
        (&Method::GET, "/is_sleeping") if state.config.sleep.enabled => Ok(json_response(
            StatusCode::OK,
            &json!({"is_sleeping": state.sleep.is_sleeping()}),
        )),
        // llama-server's properties, with its idle sleep.
        (&Method::GET, "/props") if state.config.sleep.idle_sleep.is_some() => Ok(json_response(
            StatusCode::OK,
            &json!({
                "is_sleeping": state.sleep.is_sleeping(),
                "model_path": state.config.model,
                "total_slots": state.config.slots,
            }),
        )),
        (_, "/sleep" | "/wake_up" | "/is_sleeping") if state.config.sleep.enabled => Ok(
            error_response(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        ),
        (_, "/health" | "/metrics" | "/v1/models")
        | (
            _,
            "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/embeddings"
            | "/pooling"
            | "/v1/rerank"
            | "/rerank",
        ) => Ok(error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
        )),
        _ => Ok(error_response(StatusCode::NOT_FOUND, "not found")),
    }
}

fn metrics_text(state: &State) -> String {
    let m = &state.config.model;
    format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{model_name=\"{m}\"}} {}\n\
         # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{model_name=\"{m}\"}} {}\n\
         # HELP fakeai:requests_total Inference requests received.\n\
         # TYPE fakeai:requests_total counter\n\
         fakeai:requests_total {}\n",
        state.running.load(Ordering::SeqCst),
        state.waiting.load(Ordering::SeqCst),
        state.requests.load(Ordering::SeqCst),
    )
}

fn crash(state: &State) -> DropConnection {
    match state.config.crash_action {
        CrashAction::ExitProcess => {
            eprintln!("horos-fakeai: crashing on purpose (exit {CRASH_EXIT_CODE})");
            std::process::exit(CRASH_EXIT_CODE);
        }
        CrashAction::StopServer => {
            state.crashed.store(true, Ordering::SeqCst);
            state.stop.send_replace(true);
            DropConnection
        }
    }
}

/// The fault for this request: the `x-fakeai-fault` header, else the `x_fakeai_fault` body field,
/// else the configured fault (counted down when limited).
fn pick_fault(state: &State, header: Option<&str>, body: &Value) -> Result<Fault, String> {
    if let Some(h) = header {
        return h.parse().map_err(|e: crate::ConfigError| e.0);
    }
    if let Some(f) = body.get("x_fakeai_fault").and_then(Value::as_str) {
        return f.parse().map_err(|e: crate::ConfigError| e.0);
    }
    let mut d = lock(&state.dynamic);
    match d.fault_remaining {
        None => Ok(d.fault),
        Some(0) => Ok(Fault::None),
        Some(n) => {
            d.fault_remaining = Some(n - 1);
            Ok(d.fault)
        }
    }
}

async fn inference(
    state: Arc<State>,
    req: Request<Incoming>,
    path: String,
) -> Result<Resp, DropConnection> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let _active = match state.sleep.admit().await {
        Ok(active) => active,
        Err(refused) => return Ok(refused),
    };
    let header_fault = req
        .headers()
        .get("x-fakeai-fault")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let max = state.config.max_body_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Ok(error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
        ));
    }
    let body = match Limited::new(req.into_body(), max).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Ok(error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            ));
        }
        Err(_) => return Err(DropConnection),
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let poisoned = state
        .config
        .crash_marker
        .as_ref()
        .is_some_and(|m| text.contains(m.as_str()));
    {
        let mut rec = lock(&state.recorded);
        if rec.len() >= MAX_RECORDED {
            rec.remove(0);
        }
        rec.push(RecordedRequest {
            path: path.clone(),
            body: text,
            authorization,
        });
    }
    if poisoned {
        return Err(crash(&state));
    }
    let json: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return Ok(error_response(
                StatusCode::BAD_REQUEST,
                "the body must be a JSON object",
            ));
        }
        Err(e) => {
            return Ok(error_response(
                StatusCode::BAD_REQUEST,
                &format!("invalid JSON: {e}"),
            ));
        }
    };
    let fault = match pick_fault(&state, header_fault.as_deref(), &json) {
        Ok(f) => f,
        Err(e) => return Ok(error_response(StatusCode::BAD_REQUEST, &e)),
    };
    match fault {
        Fault::Crash => return Err(crash(&state)),
        Fault::Reset => return Err(DropConnection),
        Fault::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Ok(error_response(status, "injected error"));
        }
        Fault::RateLimited(secs) => {
            let mut r = error_response(StatusCode::TOO_MANY_REQUESTS, "injected rate limit");
            r.headers_mut()
                .insert(hyper::header::RETRY_AFTER, HeaderValue::from(secs));
            return Ok(r);
        }
        _ => {}
    }
    if path.ends_with("/rerank") {
        drop(take_slot(&state).await?);
        return Ok(match crate::rerank::answer(&state.config.model, &json) {
            Ok(v) => json_response(StatusCode::OK, &v),
            Err(msg) => error_response(StatusCode::BAD_REQUEST, &msg),
        });
    }
    let job = match Job::parse(&state.config, &path, &json) {
        Ok(j) => j,
        Err(msg) => return Ok(error_response(StatusCode::BAD_REQUEST, &msg)),
    };

    let slot = take_slot(&state).await?;
    let latency = json
        .get("x_fakeai_latency_ms")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .unwrap_or_else(|| lock(&state.dynamic).latency);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if fault == Fault::Hang {
        // Holds the slot until the connection goes away.
        let _slot = slot;
        std::future::pending::<()>().await;
        return Err(DropConnection);
    }
    if fault == Fault::MalformedJson {
        if job.stream {
            return Ok(sse_response(
                vec![Bytes::from_static(
                    b"data: {\"id\": \"x\", \"choices\": [{\n\n",
                )],
                None,
                slot,
                Duration::ZERO,
            ));
        }
        return Ok(respond(
            StatusCode::OK,
            "application/json",
            "{\"id\": \"x\", \"choices\": [{\"index\": 0, \"message\": ",
        ));
    }
    let cut = match fault {
        Fault::DropMidStream(n) => Some((n, BodyEnd::Fail)),
        Fault::StallMidStream(n) => Some((n, BodyEnd::Stall)),
        _ => None,
    };
    let id = state.next_id.fetch_add(1, Ordering::SeqCst);
    if job.stream {
        let events = job.stream_events(&state.config, id);
        return Ok(sse_response(events, cut, slot, state.config.chunk_latency));
    }
    let answer = job.full_answer(&state.config, id).to_string();
    if let Some((_, end)) = cut {
        // Half the body, then the connection closes (or stays open, silent).
        let half = Bytes::from(answer.into_bytes());
        let half = half.slice(..half.len() / 2);
        return Ok(channel_response(
            "application/json",
            vec![half],
            end,
            slot,
            Duration::ZERO,
        ));
    }
    drop(slot);
    Ok(respond(StatusCode::OK, "application/json", answer))
}

fn sse_response(
    events: Vec<Bytes>,
    cut: Option<(usize, BodyEnd)>,
    slot: Slot,
    pace: Duration,
) -> Resp {
    match cut {
        Some((n, end)) => {
            let events = events.into_iter().take(n).collect();
            channel_response("text/event-stream", events, end, slot, pace)
        }
        None => channel_response("text/event-stream", events, BodyEnd::Finish, slot, pace),
    }
}

/// How a [`channel_response`] body ends after its chunks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum BodyEnd {
    /// Normally.
    Finish,
    /// With an error, which makes hyper close the connection mid-body.
    Fail,
    /// Never: the connection stays open and silent until the client leaves.
    Stall,
}

/// A response whose body chunks are sent by a task holding the slot, ending as `end` says.
fn channel_response(
    content_type: &'static str,
    chunks: Vec<Bytes>,
    end: BodyEnd,
    slot: Slot,
    pace: Duration,
) -> Resp {
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(4);
    tokio::spawn(async move {
        let _slot = slot;
        for (i, c) in chunks.into_iter().enumerate() {
            if i > 0 && !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
            if tx.send(Ok(c)).await.is_err() {
                return; // the client went away: the slot is released here
            }
        }
        if end == BodyEnd::Stall {
            tx.closed().await;
            return;
        }
        if end == BodyEnd::Fail {
            // Let hyper take and flush the chunks first: an error frame makes it drop the
            // connection at once, buffered bytes included.
            while tx.capacity() < tx.max_capacity() {
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx
                .send(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "connection dropped on purpose",
                )))
                .await;
        }
    });
    let mut r = Response::new(FakeBody::Channel(rx));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
