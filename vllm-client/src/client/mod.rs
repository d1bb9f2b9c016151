//! The client: [`Client`] and its calls here; its settings in `config`, request and response
//! bodies in `body`, event streams in `stream`.

mod body;
mod config;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;

use crate::error::{self, Error, TimeoutPhase};
use crate::metrics::{ServerLoad, parse_prometheus};
use crate::types::{
    ChatRequest, ChatResponse, CompletionRequest, CompletionResponse, EmbeddingRequest,
    EmbeddingResponse, ModelList,
};
use body::{
    Payload, decode, decode_fast, encode, encode_chat, millis, read_body, read_error_body,
    with_stream, without_stream,
};
pub use config::ClientConfig;
pub use stream::{ChatStream, ChatStreamSummary, SseStream, StreamItem};

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
            health: uri(&format!("/{}", config.health_path.trim_start_matches('/')))?,
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

    /// `GET /health` (or [`ClientConfig::health_path`]): `Ok` when the server answers 2xx
    /// (llama-server answers 503 while loading).
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

    /// `GET` a path under the base URL (e.g. an admin API's `/api/v1/models`) and decode the
    /// JSON answer.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let uri: Uri = format!("{}{}", self.inner.base, path)
            .parse()
            .map_err(|e| Error::InvalidUrl(format!("{path}: {e}")))?;
        let (body, _) = self.get_bytes(&uri).await?;
        decode(&body)
    }

    /// `GET` a path under the base URL as text (a status page, a metrics page): its body,
    /// decoded as UTF-8, and its content type.
    pub async fn get_text(&self, path: &str) -> Result<(String, Option<String>), Error> {
        let uri: Uri = format!("{}{}", self.inner.base, path)
            .parse()
            .map_err(|e| Error::InvalidUrl(format!("{path}: {e}")))?;
        let (body, headers) = self.get_bytes(&uri).await?;
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = String::from_utf8(body.to_vec()).map_err(|_| Error::Decode {
            message: format!("{path}: the answer is not UTF-8"),
            body: String::new(),
        })?;
        Ok((text, content_type))
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

    /// `POST` any JSON body to a path under the base URL whose answer is server-sent events of
    /// JSON objects, read as they come (`T`: [`serde_json::Value`] for any JSON).
    pub async fn post_events<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<SseStream<T>, Error> {
        let uri: Uri = format!("{}{}", self.inner.base, path)
            .parse()
            .map_err(|e| Error::InvalidUrl(format!("{path}: {e}")))?;
        self.post_stream(&uri, encode(body)?).await
    }

    /// `POST` any JSON body to a path under the base URL and keep the answer's bytes as they
    /// are (audio from `/v1/audio/speech`, say): its body and its content type.
    pub async fn post_bytes<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<(Bytes, Option<String>), Error> {
        let uri: Uri = format!("{}{}", self.inner.base, path)
            .parse()
            .map_err(|e| Error::InvalidUrl(format!("{path}: {e}")))?;
        let payload = encode(body)?;
        let deadline = Instant::now() + self.total_timeout;
        let limit = self.inner.config.max_response_bytes;
        let call = async {
            let call = self
                .start(Method::POST, &uri, Some(payload), deadline)
                .await?;
            let content_type = call
                .response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = read_body(call.response.into_body(), limit).await?;
            Ok((bytes, content_type))
        };
        tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or_else(|_| Err(self.total_timeout_error()))
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
        Ok(SseStream::new(
            call.response.into_body(),
            self.inner.config.max_response_bytes,
            deadline,
            millis(self.total_timeout),
            call.permit,
        ))
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

#[cfg(test)]
mod tests {
    use bytes::Buf;

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
