//! A lane: one model type's queue, server and result sink, and how its jobs become requests.

use std::sync::Arc;
use std::time::Duration;

use horos_server_control::ServerControl;
use horos_vllm_client::{ChatRequest, Client};
use squeueha::Job;

use crate::gate::LaneGate;
use crate::sink::ResultSink;

/// Turns a claimed job into the request to send. An `Err` means the payload can never become a
/// request: the job is dead-lettered with that message.
pub type RequestBuilder =
    Arc<dyn Fn(&Job) -> std::result::Result<ChatRequest, String> + Send + Sync>;

/// A source of the GPU's temperature (°C) for a temperature-following
/// [`ThermalPolicy`](horos_server_control::ThermalPolicy).
pub type TemperatureSource = Arc<dyn Fn() -> Option<f64> + Send + Sync>;

/// One model type: its queue, its server (a client and a [`ServerControl`]) and where its results
/// go.
#[derive(Clone)]
pub struct Lane {
    pub(crate) queue: String,
    pub(crate) client: Client,
    pub(crate) control: Arc<dyn ServerControl>,
    pub(crate) sink: Arc<dyn ResultSink>,
    pub(crate) batch_size: usize,
    pub(crate) refill: usize,
    pub(crate) visibility: Duration,
    pub(crate) build: RequestBuilder,
    pub(crate) gate: Arc<LaneGate>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("queue", &self.queue)
            .field("server", &self.client.base_url())
            .field("batch_size", &self.batch_size)
            .field("refill", &self.refill)
            .field("visibility", &self.visibility)
            .finish_non_exhaustive()
    }
}

/// The default [`RequestBuilder`]: the payload is a JSON [`ChatRequest`].
pub fn json_chat_request(job: &Job) -> std::result::Result<ChatRequest, String> {
    serde_json::from_slice(&job.payload)
        .map_err(|e| format!("payload of job {} is not a chat request: {e}", job.id))
}

impl Lane {
    /// A lane claiming from `queue`, sending to `client`'s server, storing into `sink`; batches of
    /// 16, a 5-minute visibility, payloads read as JSON [`ChatRequest`]s.
    pub fn new(
        queue: impl Into<String>,
        client: Client,
        control: Arc<dyn ServerControl>,
        sink: Arc<dyn ResultSink>,
    ) -> Self {
        Lane {
            queue: queue.into(),
            client,
            control,
            sink,
            batch_size: 16,
            refill: 0,
            visibility: Duration::from_secs(300),
            build: Arc::new(json_chat_request),
            gate: Arc::new(LaneGate::default()),
        }
    }

    /// Jobs claimed per batch (8–16 is typical, matching the server's `--max-num-seqs`). At least 1.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// Refill mode: after the first batch of a round, claim a new job as each one finishes, so
    /// that `batch_size` requests stay in flight, up to `n` more jobs per round (then the round
    /// ends: the thermal pause, the lane priorities and a stop request are looked at). `0` (the
    /// default): one batch per round, all of it finished before the next.
    /// Refilling stops at the first cut or refused connection, so a crash still bisects at most
    /// `batch_size` jobs.
    pub fn refill(mut self, n: usize) -> Self {
        self.refill = n;
        self
    }

    /// How long claimed jobs stay invisible. The leases of jobs whose requests are running are
    /// renewed every third of it (and during bisection restarts), so it bounds how soon a crashed
    /// feeder's jobs come back, not how long a request may take.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// How a job becomes a request (default: [`json_chat_request`]).
    pub fn request_builder(mut self, build: RequestBuilder) -> Self {
        self.build = build;
        self
    }

    /// Shares `gate` (default: a gate of its own, always open): batches start only while it is
    /// open.
    pub fn gate(mut self, gate: Arc<LaneGate>) -> Self {
        self.gate = gate;
        self
    }

    /// The queue name.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}
