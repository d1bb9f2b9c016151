//! The seam between an OpenAI-compatible gateway and whatever serves its models:
//! [`UpstreamPool`], with the types it speaks in. A model pool (gpu-alloc's), fixed servers, a
//! remote API and a feeder's lanes each implement it; the coordinator only calls it.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Lifecycle state of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SlotState {
    /// Not loaded.
    Idle,
    /// Being loaded.
    Loading,
    /// Serving.
    Ready,
    /// Being stopped.
    Stopping,
    /// Asleep: its server's process stays, the GPU's memory is freed (level 1 keeps the
    /// weights in host RAM); a request wakes it in seconds where a load takes minutes.
    Sleeping,
}

impl SlotState {
    /// Every state, in lifecycle order.
    pub const ALL: [SlotState; 5] = [
        Self::Idle,
        Self::Loading,
        Self::Ready,
        Self::Stopping,
        Self::Sleeping,
    ];

    /// The state's name as serialised (`IDLE`, `LOADING`, `READY`, `STOPPING`, `SLEEPING`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "IDLE",
            Self::Loading => "LOADING",
            Self::Ready => "READY",
            Self::Stopping => "STOPPING",
            Self::Sleeping => "SLEEPING",
        }
    }
}

impl std::fmt::Display for SlotState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One GPU's share of a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// GPU index.
    pub gpu: u32,
    /// MB placed on it.
    pub mb: u64,
}

/// Whether a model can serve a request without a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// Loaded and serving.
    Ready,
    /// Known but not loaded (or loading, or stopping): a call would wait for a load.
    Cold,
    /// Asleep: a call would wait for it to wake (seconds, where a load takes minutes).
    Asleep,
    /// Not a model of this upstream.
    Unknown,
}

/// A model in use: where its server is and how to call it. Dropping it tells the upstream the
/// request is over (the model becomes evictable again).
pub struct UpstreamLease {
    endpoint: String,
    api_base: bool,
    upstream_model: Option<String>,
    authorization: Option<http::HeaderValue>,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for UpstreamLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The authorization value is a secret: never printed.
        f.debug_struct("UpstreamLease")
            .field("endpoint", &self.endpoint)
            .field("api_base", &self.api_base)
            .field("upstream_model", &self.upstream_model)
            .field("authorized", &self.authorization.is_some())
            .finish_non_exhaustive()
    }
}

impl UpstreamLease {
    /// A lease on a server at `endpoint` (`http://host:port`, without `/v1`), holding `guard`
    /// until dropped.
    pub fn new(endpoint: impl Into<String>, guard: Option<Box<dyn Send + Sync>>) -> Self {
        Self {
            endpoint: endpoint.into().trim_end_matches('/').to_owned(),
            api_base: false,
            upstream_model: None,
            authorization: None,
            _guard: guard,
        }
    }

    /// A lease on a remote OpenAI-compatible API whose base URL is `api_base` as its clients
    /// take it (`https://api.example.com/v1`: request paths are appended without their `/v1`),
    /// serving the model under the name `upstream_model`, called with `authorization` (the
    /// whole header value, `Bearer ...`).
    pub fn remote(
        api_base: impl Into<String>,
        upstream_model: Option<String>,
        authorization: Option<http::HeaderValue>,
    ) -> Self {
        Self {
            endpoint: api_base.into().trim_end_matches('/').to_owned(),
            api_base: true,
            upstream_model,
            authorization,
            _guard: None,
        }
    }

    /// Keeps `guard` alive as long as the lease (it is dropped after the lease's own guard).
    pub fn guarded(mut self, guard: Box<dyn Send + Sync>) -> Self {
        let inner = self._guard.take();
        self._guard = Some(Box::new((inner, guard)));
        self
    }

    /// The server's base URL (without `/v1`), or the remote API's base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The URL of `path` (`/v1/chat/completions`, ...) on this server.
    pub fn url(&self, path: &str) -> String {
        let path = match (self.api_base, path.strip_prefix("/v1")) {
            (true, Some(rest)) => rest,
            _ => path,
        };
        format!("{}{path}", self.endpoint)
    }

    /// The name the server knows the model by, when it differs from the name clients use.
    pub fn upstream_model(&self) -> Option<&str> {
        self.upstream_model.as_deref()
    }

    /// The `Authorization` header value to send, if any.
    pub fn authorization(&self) -> Option<&http::HeaderValue> {
        self.authorization.as_ref()
    }
}

/// Why a model could not be acquired.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum UpstreamError {
    /// Not a model of this upstream.
    #[error("unknown model {0:?}")]
    UnknownModel(String),
    /// No room to load it now (every resident model is busy or more important): wait for a
    /// request to finish and try again.
    #[error("no capacity for {0:?} now")]
    NoCapacity(String),
    /// The load or the backend failed.
    #[error("upstream failed: {0}")]
    Failed(String),
    /// This upstream does not do that (a fixed or remote server cannot be unloaded or pinned).
    #[error("{0}")]
    Unsupported(String),
}

/// One model slot as shown on the status page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotView {
    /// Model id.
    pub model: String,
    /// Lifecycle state (serialised as `IDLE`, `LOADING`, `READY`, `STOPPING`, `SLEEPING`).
    pub state: SlotState,
    /// The level it sleeps at, while `SLEEPING`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep_level: Option<crate::SleepLevel>,
    /// Port of its server, if any.
    pub port: Option<u16>,
    /// Requests in progress.
    pub active: usize,
    /// Never evicted.
    pub pinned: bool,
    /// Seconds since last use.
    pub idle_s: f64,
    /// Where its weights are: GPU index and MB on it (empty: not on a GPU, or unknown).
    pub gpus: Vec<Share>,
}

impl SlotView {
    /// The slot of a model served by a server that is always running (fixed, or remote).
    pub fn always_ready(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            state: SlotState::Ready,
            sleep_level: None,
            port: None,
            active: 0,
            pinned: true,
            idle_s: 0.0,
            gpus: Vec::new(),
        }
    }
}

/// Where requests go: a pool of models that may need loading before they serve.
///
/// Implementations must make [`UpstreamPool::acquire`] safe to cancel: a caller that gives
/// up (its client left) must not interrupt a load that others may be waiting for.
#[async_trait]
pub trait UpstreamPool: Send + Sync + 'static {
    /// Every model this upstream can serve.
    fn models(&self) -> Vec<String>;

    /// Whether `model` would serve at once.
    fn readiness(&self, model: &str) -> Readiness;

    /// The request paths `model`'s server serves (`/v1/chat/completions`, ...), where this
    /// upstream knows them: a request it would send elsewhere is refused before `model` is
    /// loaded. `None` (the default): not declared, every request is forwarded.
    fn paths(&self, _model: &str) -> Option<Vec<String>> {
        None
    }

    /// Whether `model`'s server serves `path` (`None`: its paths are not declared). The
    /// default asks [`UpstreamPool::paths`]; an upstream that keeps them can answer without a
    /// copy (this is asked for every rung of every request).
    fn serves_path(&self, model: &str, path: &str) -> Option<bool> {
        self.paths(model).map(|p| p.iter().any(|x| x == path))
    }

    /// Whether `model` reads images (a vision-language model), where this upstream knows it
    /// (a pool model's `category = "vision"`); `None` (the default): it does not say.
    fn reads_images(&self, _model: &str) -> Option<bool> {
        None
    }

    /// Seconds until `model` would serve if acquired now, by what this upstream measured
    /// (a wake for a model asleep, a load for one not loaded; 0 when ready), where it knows.
    /// `None` (the default): it does not say; the caller estimates.
    fn expected_ready_s(&self, _model: &str) -> Option<f64> {
        None
    }

    /// A lease on `model`, loading it first if needed. `priority`: smaller is more important
    /// (it decides what may be evicted for it).
    async fn acquire(&self, model: &str, priority: i32) -> Result<UpstreamLease, UpstreamError>;

    /// Requests in progress on `model`, where the upstream counts them (`None`: it does not;
    /// every lease's end then counts as room that may have been freed).
    fn active(&self, _model: &str) -> Option<usize> {
        None
    }

    /// After a call: keep `model` warm for `keep_alive` from now (replaces its default
    /// stay-warm time). Default: ignored.
    fn keep_alive(&self, _model: &str, _keep_alive: Duration) {}

    /// Housekeeping called every `maintain_interval_ms` (stay-warm timers, keep-alive, lease
    /// renewal). Returns the models unloaded.
    async fn maintain(&self) -> Result<Vec<String>, UpstreamError> {
        Ok(Vec::new())
    }

    /// The slots, for the status page.
    fn slots(&self) -> Vec<SlotView> {
        Vec::new()
    }

    /// Unloads `model` now if it is loaded, unpinned and idle; `Ok(false)`: it was not (a
    /// pinned or busy model stays). Default: unsupported.
    async fn unload(&self, model: &str) -> Result<bool, UpstreamError> {
        Err(UpstreamError::Unsupported(format!(
            "`{model}` is not loaded on demand here: it cannot be unloaded"
        )))
    }

    /// Pins (`true`) or unpins `model`: a pinned model is never evicted nor unloaded by its
    /// stay-warm timer. Default: unsupported.
    fn pin(&self, model: &str, _pinned: bool) -> Result<(), UpstreamError> {
        Err(UpstreamError::Unsupported(format!(
            "`{model}` is not loaded on demand here: it cannot be pinned"
        )))
    }
}
