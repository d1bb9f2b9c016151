//! Forwarding to an upstream server and passing its answer back frame by frame (a stream is
//! never buffered), with a guard that ends the call's bookkeeping when the body ends.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use horos_sse::{SseFrame, SseParser};
use http::header::{
    AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER,
};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::admission::scheduler::Permit;
use crate::data::manifest::Reshaper;
use crate::data::metrics::{Metrics, Route};
use crate::error::ApiError;
use crate::tenancy::limits::{Admitted, Caller, Gatekeeper};
use crate::tenancy::usage::{Tail, parse_usage};
use crate::upstream::{UpstreamLease, UpstreamPool};

#[cfg(feature = "tls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
#[cfg(not(feature = "tls"))]
type Connector = HttpConnector;

/// The HTTP client to upstreams (a connection pool per host).
pub(crate) type HttpClient = Client<Connector, Full<Bytes>>;

pub(crate) fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    #[cfg(feature = "tls")]
    let connector = {
        // https only where a remote model's URL says so; local servers stay plain http.
        connector.enforce_http(false);
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector)
    };
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(1024)
        .build(connector)
}

/// Sends `body` to `path` on the leased server; waits for the response headers at most
/// `timeout`.
pub(crate) async fn send(
    client: &HttpClient,
    lease: &UpstreamLease,
    path: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<Response<Incoming>, ApiError> {
    let endpoint = lease.endpoint();
    let url = lease.url(path);
    let uri: http::Uri = url
        .parse()
        .map_err(|e| ApiError::internal(format!("bad upstream URL {url}: {e}")))?;
    let mut req = http::Request::post(uri)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .body(Full::new(body))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(auth) = lease.authorization() {
        req.headers_mut().insert(AUTHORIZATION, auth.clone());
    }
    match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!("upstream {endpoint} failed: {e}"),
        )
        .code("upstream_unavailable")),
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            format!(
                "upstream {endpoint} sent no answer within {:.0} s",
                timeout.as_secs_f64()
            ),
        )
        .code("upstream_timeout")),
    }
}

/// Waits at most `timeout` for the first frame of an upstream body, so that an upstream that
/// fails before its first byte can be replaced by another while the client has seen nothing.
/// `Err`: the body failed, ended empty or stalled (with the reason).
pub(crate) async fn first_frame(
    body: &mut Incoming,
    timeout: Duration,
) -> Result<Option<Frame<Bytes>>, String> {
    if body.is_end_stream() {
        return Ok(None);
    }
    match tokio::time::timeout(timeout, body.frame()).await {
        Ok(Some(Ok(f))) => Ok(Some(f)),
        Ok(Some(Err(e))) => Err(format!("the answer broke before its first byte: {e}")),
        Ok(None) => Ok(None),
        Err(_) => Err(format!(
            "no first byte of the answer within {:.0} s",
            timeout.as_secs_f64()
        )),
    }
}

/// The bookkeeping of one call, finished when dropped: latency and status counted, in-flight
/// gauge lowered, usage counted from the answer's end, keep-alive passed to the pool,
/// concurrency place, caller's place and model lease given back.
pub(crate) struct Tracker {
    pub metrics: Arc<Metrics>,
    pub route: Route,
    pub model: String,
    pub start: Instant,
    pub status: u16,
    pub permit: Option<Permit>,
    pub lease: Option<UpstreamLease>,
    pub keep_alive: Option<(Arc<dyn UpstreamPool>, Duration)>,
    /// Who called, and the limits to charge the answer's tokens to.
    pub caller: Option<(Caller, Arc<Gatekeeper>)>,
    /// The caller's place under its concurrency limit.
    pub admitted: Option<Admitted>,
    /// The answer's last bytes, where its `usage` is.
    pub tail: Tail,
    /// The usage of an answer that carries none (speech: its input's characters), counted as
    /// prompt tokens instead of reading the answer's end.
    pub input_units: Option<u64>,
    /// A streamed answer's events, counted (and its usage-only event kept from a caller that
    /// did not ask for it): `None` for an answer that is not a stream.
    pub stream: Option<StreamAccount>,
}

/// The accounting of a streamed (server-sent events) answer: its events are split as they pass,
/// counted, and the usage event the coordinator asked the upstream for is dropped when the
/// caller did not ask for it. Where the upstream sends no usage at all, the content events are
/// charged as completion tokens (one each), so a stream never escapes a token limit.
#[derive(Debug)]
pub(crate) struct StreamAccount {
    /// The stream's events, framed with their exact bytes (horos-sse's pass-through mode: an
    /// event longer than [`MAX_PENDING_EVENT`] is not held, it passes as it comes, unfiltered).
    parser: SseParser,
    /// `data:` events other than `[DONE]`.
    events: u64,
    /// Drop the event that carries only `usage` (`choices: []`).
    strip_usage: bool,
}

/// Longest event held back while it is incomplete; a longer one passes as it comes, unfiltered.
const MAX_PENDING_EVENT: usize = 1 << 20;

impl StreamAccount {
    /// An account that drops the usage event when `strip_usage`.
    pub fn new(strip_usage: bool) -> Self {
        StreamAccount {
            parser: SseParser::passthrough(MAX_PENDING_EVENT),
            events: 0,
            strip_usage,
        }
    }

    /// `data` arrived: what to pass on now (complete events, the usage event dropped where it
    /// must be); the rest waits for the event's end.
    fn pass(&mut self, data: &[u8]) -> Bytes {
        let mut frames = Vec::new();
        // A pass-through parser refuses nothing: an event it cannot hold or read passes as bytes.
        let _ = self.parser.push_frames(data, &mut frames);
        self.forward(frames)
    }

    /// What was held back when the stream ends.
    fn rest(&mut self) -> Option<Bytes> {
        let mut frames = Vec::new();
        let _ = self.parser.finish_frames(&mut frames);
        let out = self.forward(frames);
        (!out.is_empty()).then_some(out)
    }

    /// The frames' bytes, less the usage event to keep from the caller.
    fn forward(&mut self, frames: Vec<SseFrame>) -> Bytes {
        let mut out = Vec::with_capacity(frames.iter().map(|f| f.raw.len()).sum());
        for f in frames {
            if !f.event.as_ref().is_some_and(|e| self.is_hidden(&e.data)) {
                out.extend_from_slice(&f.raw);
            }
        }
        Bytes::from(out)
    }

    /// Counts the event of `data` and says whether it is the usage event to keep from the caller.
    fn is_hidden(&mut self, data: &str) -> bool {
        if data.trim() == "[DONE]" {
            return false;
        }
        // Only an event that names `usage` is parsed: the content events pass on a byte scan.
        const USAGE: &[u8] = b"\"usage\"";
        let names_usage = data.as_bytes().windows(USAGE.len()).any(|w| w == USAGE);
        let v: Option<serde_json::Value> = names_usage
            .then(|| serde_json::from_str(data).ok())
            .flatten();
        let usage_only = v.as_ref().is_some_and(|v| {
            v.get("usage").is_some_and(|u| !u.is_null())
                && v.get("choices")
                    .and_then(serde_json::Value::as_array)
                    .is_some_and(Vec::is_empty)
        });
        if !usage_only {
            self.events += 1;
        }
        usage_only && self.strip_usage
    }
}

impl Tracker {
    pub fn new(metrics: Arc<Metrics>, route: Route, start: Instant) -> Self {
        metrics.in_flight(route).fetch_add(1, Ordering::Relaxed);
        Self {
            metrics,
            route,
            model: crate::data::metrics::OTHER_MODEL.to_owned(),
            start,
            status: 200,
            permit: None,
            lease: None,
            keep_alive: None,
            caller: None,
            admitted: None,
            tail: Tail::default(),
            input_units: None,
            stream: None,
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let rm = self.metrics.route(self.route, &self.model);
        let took = self.start.elapsed();
        rm.latency.observe(took);
        tracing::debug!(
            route = self.route.label(),
            model = %self.model,
            status = self.status,
            ms = took.as_secs_f64() * 1000.0,
            "request done"
        );
        rm.answered(self.status);
        self.metrics
            .in_flight(self.route)
            .fetch_sub(1, Ordering::Relaxed);
        if (200..300).contains(&self.status)
            && let Some((caller, gate)) = &self.caller
        {
            let (prompt, completion) = match self.input_units {
                Some(n) => (n, 0),
                None => parse_usage(self.tail.bytes())
                    .or_else(|| self.stream.as_ref().map(|s| (0, s.events)))
                    .unwrap_or((0, 0)),
            };
            self.metrics
                .usage
                .record(caller, &self.model, prompt, completion);
            gate.spent(caller, prompt + completion);
        }
        if let Some((up, d)) = self.keep_alive.take() {
            up.keep_alive(&self.model, d);
        }
        self.lease.take();
        self.permit.take();
        self.admitted.take();
    }
}

/// An upstream's body whose first frame may already have been read (to know that the answer
/// started before committing to this upstream): that frame is passed on first.
/// A model's manifest may rewrite it on its way (a completion shaped into a chat completion,
/// reasoning split off).
#[derive(Debug)]
pub struct UpstreamBody {
    first: Option<Frame<Bytes>>,
    rest: Incoming,
    reshaper: Option<Box<Reshaper>>,
    /// The upstream's body ended (what the reshaper had left was sent).
    ended: bool,
}

impl UpstreamBody {
    pub(crate) fn new(first: Option<Frame<Bytes>>, rest: Incoming) -> Self {
        Self {
            first,
            rest,
            reshaper: None,
            ended: false,
        }
    }

    /// Rewrites the body with `reshaper` as it passes (none: as it is).
    pub(crate) fn reshaped(mut self, reshaper: Option<Reshaper>) -> Self {
        self.reshaper = reshaper.map(Box::new);
        self
    }

    fn next_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(f) = self.first.take() {
            return Poll::Ready(Some(Ok(f)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let me = self.get_mut();
        if me.reshaper.is_none() {
            return me.next_frame(cx);
        }
        loop {
            if me.ended {
                return Poll::Ready(None);
            }
            let next = match me.next_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(n) => n,
            };
            let Some(r) = me.reshaper.as_mut() else {
                return Poll::Ready(next);
            };
            let out = match next {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => r.push(&d),
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    me.ended = true;
                    r.finish()
                }
            };
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.reshaper.is_some() {
            return self.ended;
        }
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.reshaper.is_some() {
            return SizeHint::new();
        }
        match &self.first {
            None => self.rest.size_hint(),
            Some(f) => {
                let n = f.data_ref().map_or(0, |d| d.len() as u64);
                let rest = self.rest.size_hint();
                let mut h = SizeHint::new();
                h.set_lower(rest.lower() + n);
                if let Some(u) = rest.upper() {
                    h.set_upper(u + n);
                }
                h
            }
        }
    }
}

/// The bookkeeping of the call a response body belongs to, finished when the body ends or is
/// dropped.
pub struct CallGuard(Box<Tracker>);

impl std::fmt::Debug for CallGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallGuard")
    }
}

/// A response body: bytes we made, or an upstream body passed through frame by frame.
pub enum RespBody {
    /// A whole body.
    Full(Full<Bytes>),
    /// An upstream body; the tracker ends when the body does (or when it is dropped).
    Upstream(UpstreamBody, Option<CallGuard>),
    /// Chunks a task writes as they come (server-sent events it makes); the body ends when the
    /// task drops its sender.
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}

impl Default for RespBody {
    /// An empty body.
    fn default() -> Self {
        RespBody::Full(Full::new(Bytes::new()))
    }
}

impl std::fmt::Debug for RespBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RespBody::Full(_) => f.write_str("RespBody::Full"),
            RespBody::Upstream(..) => f.write_str("RespBody::Upstream"),
            RespBody::Events(_) => f.write_str("RespBody::Events"),
        }
    }
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RespBody::Full(b) => Pin::new(b).poll_frame(cx).map_err(|never| match never {}),
            RespBody::Upstream(b, guard) => loop {
                let r = Pin::new(&mut *b).poll_frame(cx);
                let Some(CallGuard(t)) = guard.as_mut() else {
                    return r;
                };
                match r {
                    Poll::Ready(Some(Ok(f))) => {
                        let Some(d) = f.data_ref() else {
                            return Poll::Ready(Some(Ok(f)));
                        };
                        t.tail.push(d);
                        let Some(account) = t.stream.as_mut() else {
                            return Poll::Ready(Some(Ok(f)));
                        };
                        let out = account.pass(d);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                        // A part of an event, or the event kept from the caller: read on.
                    }
                    Poll::Ready(None) => {
                        let rest = t.stream.as_mut().and_then(StreamAccount::rest);
                        if let Some(rest) = rest {
                            return Poll::Ready(Some(Ok(Frame::data(rest))));
                        }
                        guard.take();
                        return Poll::Ready(None);
                    }
                    Poll::Ready(Some(Err(e))) => {
                        guard.take();
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Pending => return Poll::Pending,
                }
            },
            RespBody::Events(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RespBody::Full(b) => b.is_end_stream(),
            RespBody::Upstream(b, _) => b.is_end_stream(),
            RespBody::Events(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RespBody::Full(b) => b.size_hint(),
            RespBody::Upstream(b, _) => b.size_hint(),
            RespBody::Events(_) => SizeHint::new(),
        }
    }
}

/// A whole JSON response.
pub fn json_response(status: StatusCode, v: &serde_json::Value) -> Response<RespBody> {
    let bytes = serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec());
    bytes_response(status, "application/json", Bytes::from(bytes))
}

/// A whole response of `content_type`.
pub fn bytes_response(
    status: StatusCode,
    content_type: &'static str,
    b: Bytes,
) -> Response<RespBody> {
    let len = b.len();
    let mut r = Response::new(RespBody::Full(Full::new(b)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// The OpenAI-format answer of an error (with `Retry-After` when set).
pub fn error_response(e: &ApiError) -> Response<RespBody> {
    let mut r = json_response(e.status, &e.body());
    if let Some(s) = e.retry_after_s {
        r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(s));
    }
    if e.status == StatusCode::PAYLOAD_TOO_LARGE {
        // The rest of the refused body is never read, so this connection cannot carry another
        // request: say so, or a client reusing it meets a reset on its next call.
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// Passes an upstream response back: status and end-to-end headers kept, hop-by-hop ones
/// dropped, the body streamed with `guard` attached.
pub(crate) fn pass_through(up: Response<UpstreamBody>, guard: Box<Tracker>) -> Response<RespBody> {
    let (parts, body) = up.into_parts();
    let mut r = Response::new(RespBody::Upstream(body, Some(CallGuard(guard))));
    *r.status_mut() = parts.status;
    for (k, v) in &parts.headers {
        if !matches!(
            k.as_str(),
            "connection" | "keep-alive" | "transfer-encoding" | "te" | "trailer" | "upgrade"
        ) {
            r.headers_mut().append(k.clone(), v.clone());
        }
    }
    r
}
