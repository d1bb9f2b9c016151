//! The feeder: batches in, results out, poison pills isolated by bisection. The run loop
//! ([`run`](self::run)), one batch and its bisection ([`bisect`](self::bisect)), and sending a
//! group of requests and settling each job ([`send`](self::send)) are in submodules.

mod bisect;
mod run;
mod send;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use squeueha::AsyncQueue;

use crate::config::FeederConfig;
use crate::error::{Error, Result};
use crate::lane::{Lane, TemperatureSource};
use crate::report::{BatchReport, FeederStats};

/// The feeder: claims batches per lane (first lane first: put Think first), sends each batch's
/// requests concurrently so the server batches them, stores results, releases the batch when the
/// server is down, dead-letters bad requests after their attempts, and isolates poison pills by
/// bisection. See the crate documentation.
pub struct Feeder {
    queue: AsyncQueue,
    lanes: Vec<Lane>,
    config: FeederConfig,
    temperature: Option<TemperatureSource>,
    in_flight: Arc<AtomicUsize>,
    stats: Mutex<FeederStats>,
    heartbeat: crate::health::Heartbeat,
}

impl std::fmt::Debug for Feeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeder")
            .field("lanes", &self.lanes)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Feeder {
    /// A feeder over `queue` (the database every lane claims from).
    pub fn new(queue: AsyncQueue, lanes: Vec<Lane>, config: FeederConfig) -> Result<Self> {
        if lanes.is_empty() {
            return Err(Error::Config("a feeder needs at least one lane".into()));
        }
        Ok(Feeder {
            queue,
            lanes,
            config,
            temperature: None,
            in_flight: Arc::new(AtomicUsize::new(0)),
            stats: Mutex::new(FeederStats::default()),
            heartbeat: crate::health::Heartbeat::default(),
        })
    }

    /// Reads the GPU temperature for [`ThermalPolicy::FollowTemperature`](horos_server_control::ThermalPolicy::FollowTemperature).
    pub fn with_temperature(mut self, source: TemperatureSource) -> Self {
        self.temperature = Some(source);
        self
    }

    /// The lanes, in priority order.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// Requests being sent right now (all lanes): a gauge for pacing and benchmarks.
    pub fn in_flight_gauge(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.in_flight)
    }

    /// Beats `beat` instead of a heartbeat of its own (made before the feeder, for a health
    /// check set up first).
    pub fn with_heartbeat(mut self, beat: crate::health::Heartbeat) -> Self {
        self.heartbeat = beat;
        self
    }

    /// When the feeder last moved (its loop turned, a request was answered), for the deep
    /// health check ([`FeederHealth`](crate::health::FeederHealth)).
    pub fn heartbeat(&self) -> crate::health::Heartbeat {
        self.heartbeat.clone()
    }

    /// Totals so far.
    pub fn stats(&self) -> FeederStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn record(&self, report: &BatchReport) {
        if let Ok(mut s) = self.stats.lock() {
            s.add(report);
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}
