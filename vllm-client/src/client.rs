//! The client.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;

use crate::de::{self, Fast};
use crate::error::{self, Error, TimeoutPhase};
use crate::metrics::{ServerLoad, parse_prometheus};
use crate::sse::{SseEvent, SseParser};
use crate::types::{
    ChatChunk, ChatRequest, ChatResponse, CompletionRequest, CompletionResponse, EmbeddingRequest,
    EmbeddingResponse, ModelList, StreamOptions, Usage,
};

/// After `[DONE]`, how long a stream waits for the end of the body (to reuse the connection).
const DRAIN_AFTER_DONE: Duration = Duration::from_millis(50);

/// First capacity of a request body's buffer: a short request fits.
const ENCODE_CAPACITY: usize = 1024;

/// Most bytes of an error body kept in [`Error::Status`].
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The client's settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted and ignored).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Longest time to open a TCP connection (default 5 s).
    pub connect_timeout: Duration,
    /// Longest wait for the response headers once the request is sent (default: none, bounded by the
    /// total timeout). For a non-streaming call the headers come with the whole answer.
    pub first_byte_timeout: Option<Duration>,
    /// Longest time for a whole call, streams included, from the call to the last byte (default 120 s).
    pub total_timeout: Duration,
    /// Most calls in flight to this server at once; more wait for a turn (default 64).
    pub max_concurrency: usize,
    /// Largest non-streamed response body, and largest single stream event (default 64 MiB).
    pub max_response_bytes: usize,
    /// How long an idle connection stays in the pool (default 4 s: shorter than the keep-alive
    /// timeout of vLLM's and llama-server's HTTP servers, 5 s, so that the client never reuses a
    /// connection the server is closing, which would look like a crash).
    pub pool_idle_timeout: Duration,
}

impl ClientConfig {
    /// The defaults for a server.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: None,
            total_timeout: Duration::from_secs(120),
            max_concurrency: 64,
            max_response_bytes: 64 * 1024 * 1024,
            pool_idle_timeout: Duration::from_secs(4),
        }
    }

    /// Sets the total timeout.
    pub fn total_timeout(mut self, d: Duration) -> Self {
        self.total_timeout = d;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Sets the first-byte timeout.
    pub fn first_byte_timeout(mut self, d: Duration) -> Self {
        self.first_byte_timeout = Some(d);
        self
    }

    /// Sets the concurrency limit (at least 1).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
}

/// The endpoints, parsed once.
#[derive(Debug)]
struct Endpoints {
    chat: Uri,
    completions: Uri,
    embeddings: Uri,
    models: Uri,
    health: Uri,
    metrics: Uri,
}

#[derive(Debug)]
struct Inner {
    http: HyperClient<HttpConnector, Full<Payload>>,
    endpoints: Endpoints,
    base: String,
    auth: Option<HeaderValue>,
    permits: Arc<Semaphore>,
    config: ClientConfig,
}

/// An OpenAI-compatible client bound to one server (vLLM, llama-server, ...). Cheap to clone: clones
/// share the connection pool and the concurrency limit.
///
/// ```no_run
/// # async fn demo() -> Result<(), horos_vllm_client::Error> {
/// use horos_vllm_client::{ChatMessage, ChatRequest, Client};
/// let client = Client::new("http://127.0.0.1:18080")?;
/// let answer = client
///     .chat(&ChatRequest::new("smollm2", vec![ChatMessage::user("Hi!")]).max_tokens(16))
///     .await?;
/// println!("{}", answer.text());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
    total_timeout: Duration,
    first_byte_timeout: Option<Duration>,
}

/// Splits a base URL into `http://authority` + path prefix (without a trailing `/` or `/v1`).
fn normalize_base(url: &str) -> Result<String, Error> {
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|e| Error::InvalidUrl(format!("{url}: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(Error::InvalidUrl(format!(
                "{url}: scheme `{other}` is not supported (plain http only)"
            )));
        }
        None => return Err(Error::InvalidUrl(format!("{url}: no scheme"))),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| Error::InvalidUrl(format!("{url}: no host")))?;
    let mut path = uri.path().trim_end_matches('/');
    path = path.strip_suffix("/v1").unwrap_or(path);
    Ok(format!("http://{authority}{path}"))
}

impl Client {
    /// A client with the default settings ([`ClientConfig::new`]).
    pub fn new(base_url: impl Into<String>) -> Result<Client, Error> {
        Self::with_config(ClientConfig::new(base_url))
    }

    /// A client with these settings. Needs a tokio runtime when calls are made, not here.
    pub fn with_config(config: ClientConfig) -> Result<Client, Error> {
        let base = normalize_base(&config.base_url)?;
        let uri = |p: &str| -> Result<Uri, Error> {
            format!("{base}{p}")
                .parse()
                .map_err(|e| Error::InvalidUrl(format!("{base}{p}: {e}")))
        };
        let endpoints = Endpoints {
            chat: uri("/v1/chat/completions")?,
            completions: uri("/v1/completions")?,
            embeddings: uri("/v1/embeddings")?,
            models: uri("/v1/models")?,
            health: uri("/health")?,
            metrics: uri("/metrics")?,
        };
        let auth = match &config.api_key {
            Some(k) => Some(
                HeaderValue::from_str(&format!("Bearer {k}"))
                    .map_err(|_| Error::InvalidUrl("the API key is not a valid header".into()))?,
            ),
            None => None,
        };
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.max_concurrency.max(1))
            .build(connector);
        let permits = Arc::new(Semaphore::new(config.max_concurrency.max(1)));
        Ok(Client {
            total_timeout: config.total_timeout,
            first_byte_timeout: config.first_byte_timeout,
            inner: Arc::new(Inner {
                http,
                endpoints,
                base,
                auth,
                permits,
                config,
            }),
        })
    }

    /// The normalized base URL (`http://host:port`, no trailing `/v1`).
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The settings the client was built with (see [`Client::timeouts`] for this handle's).
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// A handle on the same server, connection pool and concurrency limit, with other timeouts: for
    /// calls with their own time budget (e.g. what is left of a deadline).
    pub fn with_timeouts(&self, total: Duration, first_byte: Option<Duration>) -> Client {
        Client {
            inner: self.inner.clone(),
            total_timeout: total,
            first_byte_timeout: first_byte,
        }
    }

    /// This handle's total and first-byte timeouts.
    pub fn timeouts(&self) -> (Duration, Option<Duration>) {
        (self.total_timeout, self.first_byte_timeout)
    }

    /// Calls in flight now (holding one of the [`ClientConfig::max_concurrency`] permits).
    pub fn in_flight(&self) -> usize {
        self.inner
            .config
            .max_concurrency
            .max(1)
            .saturating_sub(self.inner.permits.available_permits())
    }

    /// `POST /v1/chat/completions`, not streamed.
    pub async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, Error> {
        // The request's copy (when one is made) is a temporary of this statement, so the call's
        // future does not keep it across the wait.
        let payload = encode_chat(&without_stream(req))?;
        let body = self
            .post_payload(&self.inner.endpoints.chat, payload)
            .await?;
        decode_fast(&body)
    }

    /// `POST /v1/chat/completions` with `stream: true`: the answer's chunks as they come. The client
    /// asks for a final usage chunk unless `stream_options` is set. Dropping the stream closes the
    /// connection, which cancels the request on the server.
    pub async fn chat_stream(&self, req: &ChatRequest) -> Result<ChatStream, Error> {
        self.post_stream(&self.inner.endpoints.chat, encode_chat(&with_stream(req))?)
            .await
    }

    /// `POST /v1/completions`, not streamed.
    pub async fn completion(&self, req: &CompletionRequest) -> Result<CompletionResponse, Error> {
        let payload = encode(&*without_stream(req))?;
        let body = self
            .post_payload(&self.inner.endpoints.completions, payload)
            .await?;
        decode_fast(&body)
    }

    /// `POST /v1/completions` with `stream: true`.
    pub async fn completion_stream(
        &self,
        req: &CompletionRequest,
    ) -> Result<SseStream<CompletionResponse>, Error> {
        self.post_stream(
            &self.inner.endpoints.completions,
            encode(&with_stream(req))?,
        )
        .await
    }

    /// `POST /v1/embeddings`.
    pub async fn embeddings(&self, req: &EmbeddingRequest) -> Result<EmbeddingResponse, Error> {
        self.post_json(&self.inner.endpoints.embeddings, req).await
    }

    /// `GET /v1/models`.
    pub async fn models(&self) -> Result<ModelList, Error> {
        let (body, _) = self.get_bytes(&self.inner.endpoints.models).await?;
        decode(&body)
    }

    /// `GET /health`: `Ok` when the server answers 2xx (llama-server answers 503 while loading).
    pub async fn health(&self) -> Result<(), Error> {
        self.get_bytes(&self.inner.endpoints.health)
            .await
            .map(|_| ())
    }

    /// `GET /metrics`, as text.
    pub async fn metrics_text(&self) -> Result<String, Error> {
        let (body, _) = self.get_bytes(&self.inner.endpoints.metrics).await?;
        String::from_utf8(body.to_vec()).map_err(|_| Error::Decode {
            message: "metrics page is not UTF-8".into(),
            body: String::new(),
        })
    }

    /// `GET /metrics`, parsed into the requests running and waiting (vLLM's
    /// `vllm:num_requests_running` / `vllm:num_requests_waiting`, llama-server's
    /// `llamacpp:requests_processing` / `llamacpp:requests_deferred`).
    pub async fn load(&self) -> Result<ServerLoad, Error> {
        let text = self.metrics_text().await?;
        ServerLoad::from_samples(&parse_prometheus(&text)).ok_or_else(|| Error::Decode {
            message: "no running-requests metric on the metrics page".into(),
            body: text.chars().take(512).collect(),
        })
    }

    /// `POST` any JSON body to a path under the base URL (e.g. `/v1/rerank`) and decode the answer.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        let uri: Uri = format!("{}{}", self.inner.base, path)
            .parse()
            .map_err(|e| Error::InvalidUrl(format!("{path}: {e}")))?;
        self.post_json(&uri, body).await
    }

    async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        uri: &Uri,
        body: &B,
    ) -> Result<T, Error> {
        decode(&self.post_payload(uri, encode(body)?).await?)
    }

    /// Posts an encoded body; the answer's body.
    async fn post_payload(&self, uri: &Uri, payload: Payload) -> Result<Bytes, Error> {
        let deadline = Instant::now() + self.total_timeout;
        let limit = self.inner.config.max_response_bytes;
        // One timer for the whole call.
        let call = async {
            let call = self
                .start(Method::POST, uri, Some(payload), deadline)
                .await?;
            read_body(call.response.into_body(), limit).await
        };
        tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or_else(|_| Err(self.total_timeout_error()))
    }

    async fn post_stream<T: DeserializeOwned>(
        &self,
        uri: &Uri,
        payload: Payload,
    ) -> Result<SseStream<T>, Error> {
        let deadline = Instant::now() + self.total_timeout;
        let call = tokio::time::timeout_at(
            deadline,
            self.start(Method::POST, uri, Some(payload), deadline),
        )
        .await
        .unwrap_or_else(|_| Err(self.total_timeout_error()))?;
        Ok(SseStream {
            body: call.response.into_body(),
            parser: SseParser::new(self.inner.config.max_response_bytes),
            pending: VecDeque::new(),
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            total_ms: millis(self.total_timeout),
            done: false,
            drain: None,
            _permit: call.permit,
            _item: PhantomData,
        })
    }

    async fn get_bytes(&self, uri: &Uri) -> Result<(Bytes, http::HeaderMap), Error> {
        let deadline = Instant::now() + self.total_timeout;
        let limit = self.inner.config.max_response_bytes;
        let call = async {
            let call = self.start(Method::GET, uri, None, deadline).await?;
            let headers = call.response.headers().clone();
            let bytes = read_body(call.response.into_body(), limit).await?;
            Ok((bytes, headers))
        };
        tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or_else(|_| Err(self.total_timeout_error()))
    }

    /// The error of a call that ran past its total timeout. (Calls are bounded by
    /// `tokio::time::timeout_at` written out at each call site rather than by a helper `async fn`
    /// taking the future: such a helper stores its argument and the `Timeout` wrapping it side by
    /// side, which doubled the size of every call's future, 1976 bytes for `chat`, and the bytes
    /// copied when it is moved or boxed.)
    fn total_timeout_error(&self) -> Error {
        Error::Timeout {
            phase: TimeoutPhase::Total,
            millis: millis(self.total_timeout),
        }
    }

    /// Takes a permit, sends the request and waits for a successful status; an error status is read
    /// (64 KiB at most) into [`Error::Status`]. The caller bounds the whole by `deadline`; only the
    /// first-byte timeout, when set, is applied here.
    async fn start(
        &self,
        method: Method,
        uri: &Uri,
        body: Option<Payload>,
        deadline: Instant,
    ) -> Result<Call, Error> {
        let cfg = &self.inner.config;
        let permit = match self.inner.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) => self
                .inner
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| Error::Http("the client is closed".into()))?,
            Err(TryAcquireError::Closed) => return Err(Error::Http("the client is closed".into())),
        };
        // Built in place rather than through `Request::builder`, whose every step checks and moves
        // a `Result<Parts>`: the method, URI and header values here are valid by construction.
        let has_body = body.is_some();
        let mut request = Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = uri.clone();
        let headers = request.headers_mut();
        if has_body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(auth) = &self.inner.auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        let send = self.inner.http.request(request);
        let sent = match self.first_byte_timeout {
            Some(fb) if Instant::now() + fb < deadline => {
                match tokio::time::timeout(fb, send).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(Error::Timeout {
                            phase: TimeoutPhase::FirstByte,
                            millis: millis(fb),
                        });
                    }
                }
            }
            _ => send.await,
        };
        let response =
            sent.map_err(|e| error::from_send(e, &self.inner.base, millis(cfg.connect_timeout)))?;
        let status = response.status();
        if !status.is_success() {
            let body = read_error_body(response.into_body()).await;
            return Err(Error::Status {
                status: status.as_u16(),
                body,
            });
        }
        Ok(Call { response, permit })
    }
}

/// A request with its answer's headers received.
struct Call {
    response: http::Response<Incoming>,
    permit: OwnedSemaphorePermit,
}

/// Serializes a request body into a buffer sized for a typical request, so that it is not regrown
/// from empty five or six times as `serde_json::to_vec` does.
/// The request types whose `stream` fields the client sets itself (a plain call never streams,
/// a streamed one always asks for the final usage chunk unless told otherwise).
trait StreamFields: Clone {
    fn stream_fields(&mut self) -> (&mut Option<bool>, &mut Option<StreamOptions>);
    fn asks_stream(&self) -> bool;
}

impl StreamFields for ChatRequest {
    fn stream_fields(&mut self) -> (&mut Option<bool>, &mut Option<StreamOptions>) {
        (&mut self.stream, &mut self.stream_options)
    }
    fn asks_stream(&self) -> bool {
        self.stream.unwrap_or(false) || self.stream_options.is_some()
    }
}

impl StreamFields for CompletionRequest {
    fn stream_fields(&mut self) -> (&mut Option<bool>, &mut Option<StreamOptions>) {
        (&mut self.stream, &mut self.stream_options)
    }
    fn asks_stream(&self) -> bool {
        self.stream.unwrap_or(false) || self.stream_options.is_some()
    }
}

/// `req` without its stream fields (borrowed when it has none: no copy on the hot path).
fn without_stream<R: StreamFields>(req: &R) -> Cow<'_, R> {
    if !req.asks_stream() {
        return Cow::Borrowed(req);
    }
    let mut r = req.clone();
    let (stream, options) = r.stream_fields();
    *stream = None;
    *options = None;
    Cow::Owned(r)
}

/// `req` asking for a stream, with a final usage chunk unless `stream_options` is set.
fn with_stream<R: StreamFields>(req: &R) -> R {
    let mut r = req.clone();
    let (stream, options) = r.stream_fields();
    *stream = Some(true);
    if options.is_none() {
        *options = Some(StreamOptions {
            include_usage: true,
        });
    }
    r
}

fn encode<B: Serialize + ?Sized>(body: &B) -> Result<Payload, Error> {
    let mut buf = Vec::with_capacity(ENCODE_CAPACITY);
    serde_json::to_writer(&mut buf, body).map_err(Error::Encode)?;
    Ok(Payload::new(buf))
}

/// Encodes a chat request with the hand-written encoder (`serde_json`'s bytes, cheaper), into a
/// buffer sized from the request's strings.
fn encode_chat(req: &ChatRequest) -> Result<Payload, Error> {
    req.to_json().map(Payload::new).map_err(Error::Encode)
}

/// A request body: the encoded bytes, sent from the `Vec` they were written into (a `Bytes` made
/// from a `Vec` whose capacity is not its length allocates a shared header on top).
#[derive(Debug, Default)]
struct Payload {
    buf: Vec<u8>,
    pos: usize,
}

impl Payload {
    fn new(buf: Vec<u8>) -> Self {
        Payload { buf, pos: 0 }
    }
}

impl Buf for Payload {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn chunk(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    fn advance(&mut self, cnt: usize) {
        self.pos = self.pos.saturating_add(cnt).min(self.buf.len());
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    decode_with(bytes, |text| serde_json::from_str(text))
}

/// [`decode`] with the fast decoder of [`crate::de`] (which falls back on `serde_json`).
fn decode_fast<T: Fast + DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    decode_with(bytes, de::from_str)
}

fn decode_with<T: DeserializeOwned>(
    bytes: &[u8],
    parse: fn(&str) -> Result<T, serde_json::Error>,
) -> Result<T, Error> {
    // One UTF-8 check of the whole body, then a parser that trusts it: `from_slice` checks every
    // string on its own, which costs a third more on a typical answer made of many short strings.
    let parsed = match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(_) => serde_json::from_slice(bytes), // fails, with the position of the bad byte
    };
    parsed.map_err(|e| Error::Decode {
        message: e.to_string(),
        body: String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).into_owned(),
    })
}

/// Reads a whole body, refusing more than `limit` bytes.
async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, Error> {
    // The common case is a single data frame: no copy.
    let mut first: Option<Bytes> = None;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(error::from_body)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = first.as_ref().map_or(0, Bytes::len) + buf.len() + data.len();
        if total > limit {
            return Err(Error::TooLarge { limit });
        }
        match first.take() {
            None if buf.is_empty() => first = Some(data),
            Some(f) => {
                buf.extend_from_slice(&f);
                buf.extend_from_slice(&data);
            }
            None => buf.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(buf)))
}

/// Reads an error body (64 KiB at most, lossy UTF-8); a broken body yields what was read.
async fn read_error_body(mut body: Incoming) -> String {
    let mut buf = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            let room = ERROR_BODY_LIMIT.saturating_sub(buf.len());
            buf.extend_from_slice(&data[..data.len().min(room)]);
            if room <= data.len() {
                break;
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// An item of an event stream that may carry an in-band error (`{"error": ...}`).
pub trait StreamItem: DeserializeOwned {
    /// The error object, if this event is an error report rather than an item.
    fn error(&self) -> Option<&Value>;

    /// Decodes one event's data (by default `serde_json::from_str`).
    fn from_event_data(data: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(data)
    }
}

impl StreamItem for ChatChunk {
    fn error(&self) -> Option<&Value> {
        self.extra.get("error")
    }

    /// The crate's fast decoder: `serde_json`'s result, at lower cost.
    fn from_event_data(data: &str) -> Result<Self, serde_json::Error> {
        de::from_str(data)
    }
}

impl StreamItem for CompletionResponse {
    fn error(&self) -> Option<&Value> {
        self.extra.get("error")
    }

    /// The crate's fast decoder: `serde_json`'s result, at lower cost.
    fn from_event_data(data: &str) -> Result<Self, serde_json::Error> {
        de::from_str(data)
    }
}

/// A stream of typed items parsed from server-sent events as the bytes arrive. It implements
/// [`futures_core::Stream`]; [`SseStream::next_item`] needs no extra crate. The stream ends after
/// `data: [DONE]`. Dropping it closes the connection, which cancels the request on the server, and
/// gives back its concurrency permit.
pub struct SseStream<T> {
    body: Incoming,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    total_ms: u64,
    done: bool,
    /// Set after `[DONE]`: how long to wait for the end of the body.
    drain: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: OwnedSemaphorePermit,
    _item: PhantomData<fn() -> T>,
}

/// A streamed chat answer.
pub type ChatStream = SseStream<ChatChunk>;

impl<T> std::fmt::Debug for SseStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseStream")
            .field("done", &self.done)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<T: StreamItem> SseStream<T> {
    /// The next item; `None` at the end of the stream.
    pub async fn next_item(&mut self) -> Option<Result<T, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_item(cx)).await
    }

    fn event_to_item(&mut self, ev: SseEvent) -> Option<Result<T, Error>> {
        if ev.data.trim() == "[DONE]" {
            return None;
        }
        if ev.event.as_deref() == Some("error") {
            self.done = true;
            return Some(Err(Error::StreamError(ev.data)));
        }
        match T::from_event_data(&ev.data) {
            Ok(item) => {
                if let Some(e) = item.error() {
                    self.done = true;
                    return Some(Err(Error::StreamError(e.to_string())));
                }
                Some(Ok(item))
            }
            Err(e) => {
                self.done = true;
                Some(Err(Error::Decode {
                    message: format!("stream event: {e}"),
                    body: ev.data.chars().take(1024).collect(),
                }))
            }
        }
    }

    /// After `[DONE]`: waits a little for the end of the body, so that a completely read body lets
    /// the connection go back to the pool; `Ready` once done.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(_) => break,
                Poll::Pending => {
                    let expired = self
                        .drain
                        .as_mut()
                        .is_none_or(|t| t.as_mut().poll(cx).is_ready());
                    if !expired {
                        return Poll::Pending;
                    }
                    break;
                }
            }
        }
        self.drain = None;
        self.done = true;
        Poll::Ready(())
    }

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        loop {
            if self.drain.is_some() {
                return self.poll_drain(cx).map(|()| None);
            }
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(ev) = self.pending.pop_front() {
                match self.event_to_item(ev) {
                    Some(item) => return Poll::Ready(Some(item)),
                    None => {
                        self.drain = Some(Box::pin(tokio::time::sleep(DRAIN_AFTER_DONE)));
                        continue;
                    }
                }
            }
            if self.deadline.as_mut().poll(cx).is_ready() {
                self.done = true;
                return Poll::Ready(Some(Err(Error::Timeout {
                    phase: TimeoutPhase::Total,
                    millis: self.total_ms,
                })));
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    let mut pending = std::mem::take(&mut self.pending);
                    let finished = self.parser.finish(&mut pending);
                    self.pending = pending;
                    if let Err(e) = finished {
                        self.done = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                    if self.pending.is_empty() {
                        // A clean end without `[DONE]`: accepted.
                        self.done = true;
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(error::from_body(e))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        let mut pending = std::mem::take(&mut self.pending);
                        let pushed = self.parser.push(data, &mut pending);
                        self.pending = pending;
                        if let Err(e) = pushed {
                            self.done = true;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
            }
        }
    }
}

impl<T: StreamItem> futures_core::Stream for SseStream<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_item(cx)
    }
}

/// A streamed chat answer put together.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatStreamSummary {
    /// The first choice's text, all deltas joined.
    pub text: String,
    /// The first choice's finish reason.
    pub finish_reason: Option<String>,
    /// The usage chunk's counts.
    pub usage: Option<Usage>,
    /// Chunks received.
    pub chunks: usize,
}

impl ChatStream {
    /// Reads the stream to its end and joins it.
    pub async fn collect_text(mut self) -> Result<ChatStreamSummary, Error> {
        let mut s = ChatStreamSummary::default();
        while let Some(chunk) = self.next_item().await {
            let chunk = chunk?;
            s.chunks += 1;
            if let Some(c) = chunk.content() {
                s.text.push_str(c);
            }
            if let Some(f) = chunk.finish_reason() {
                s.finish_reason = Some(f.to_owned());
            }
            if chunk.usage.is_some() {
                s.usage = chunk.usage;
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_decode_from_utf8_and_bad_bytes_are_decode_errors() {
        let ok: crate::ModelList = decode(b"{\"data\":[{\"id\":\"\\u00e9t\xc3\xa9\"}]}").unwrap();
        assert_eq!(ok.data[0].id, "\u{e9}t\u{e9}");
        for bad in [
            &b"{\"data\":[{\"id\":\"\xff\"}]}"[..],
            b"{\"data\":",
            b"\xfe{}",
        ] {
            assert!(matches!(
                decode::<crate::ModelList>(bad),
                Err(Error::Decode { .. })
            ));
        }
        let body = encode(&serde_json::json!({"a": "b".repeat(5000)})).unwrap();
        assert_eq!(body.remaining(), 5000 + 8);
    }

    #[test]
    fn a_call_future_holds_no_second_copy_of_itself() {
        // 1976 bytes when the total timeout was applied by a helper `async fn` (its argument and
        // the `Timeout` around it both stored); moved and, by many callers, boxed on every call.
        let client = Client::new("http://127.0.0.1:1").unwrap();
        let req = ChatRequest::new("m", vec![]);
        let size = std::mem::size_of_val(&client.chat(&req));
        assert!(size <= 1024, "chat future: {size} bytes");
    }

    #[test]
    fn base_urls_are_normalized() {
        assert_eq!(
            normalize_base("http://127.0.0.1:8000/v1/").unwrap(),
            "http://127.0.0.1:8000"
        );
        assert_eq!(
            normalize_base("http://h:1/proxy/v1").unwrap(),
            "http://h:1/proxy"
        );
        assert_eq!(normalize_base("http://h:1").unwrap(), "http://h:1");
        assert!(matches!(
            normalize_base("https://h"),
            Err(Error::InvalidUrl(_))
        ));
        assert!(matches!(
            normalize_base("127.0.0.1:80"),
            Err(Error::InvalidUrl(_))
        ));
        assert!(matches!(
            normalize_base("not a url"),
            Err(Error::InvalidUrl(_))
        ));
    }
}
