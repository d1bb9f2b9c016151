//! GPU monitoring behind a trait.
//!
//! - [`GpuMonitor`]: one snapshot of every GPU (memory, temperature, utilization, power,
//!   processes);
//! - `nvml::NvmlMonitor` (feature `nvml`, on by default): the NVIDIA implementation (a typed
//!   [`MonitorError::NoDriver`] where NVML is absent, never a panic);
//! - [`sim_fleet::SimFleet`]: a simulated fleet whose memory, temperature and utilization
//!   respond to loads, unloads and batches (or follow a temperature script);
//! - [`AlertTracker`] turns samples into temperature alert events (above 80 °C by default),
//!   one per crossing;
//! - [`Sampler`] samples a monitor every second on a tokio runtime (the blocking NVML calls
//!   run in `spawn_blocking`), keeps the latest snapshot, a short [`HistoryPoint`] history and
//!   each GPU's [`AlertStatus`], logs each alert raised or cleared once, and broadcasts the
//!   events;
//! - [`settings`]: the `[gpus]` section of a configuration file ([`settings::GpusSettings`]),
//!   and the monitor ([`settings::open`]) and sampler ([`settings::watch`]) it describes.

pub mod alerts;
#[cfg(feature = "nvml")]
pub mod nvml;
pub mod settings;
pub mod sim_fleet;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// Monitoring failures.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum MonitorError {
    /// The NVIDIA driver / NVML library is not available on this machine.
    #[error("no NVIDIA driver: {0}")]
    NoDriver(String),
    /// NVML answered with an error.
    #[error("NVML error: {0}")]
    Nvml(String),
    /// No GPU with that index.
    #[error("no GPU with index {0}")]
    NoSuchGpu(u32),
    /// A simulated load did not fit.
    #[error("GPU {gpu}: {requested_mb} MB requested, {free_mb} MB free")]
    OutOfMemory {
        /// GPU index.
        gpu: u32,
        /// MB requested.
        requested_mb: u64,
        /// MB free.
        free_mb: u64,
    },
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Process id.
    pub pid: u32,
    /// GPU memory it uses, MB, when the driver reports it.
    pub used_mb: Option<u64>,
}

/// One GPU at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// GPU index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// Total memory, MB.
    pub memory_total_mb: u64,
    /// Used memory, MB.
    pub memory_used_mb: u64,
    /// Free memory, MB.
    pub memory_free_mb: u64,
    /// Die temperature, °C.
    pub temperature_c: Option<f64>,
    /// Compute utilization, percent.
    pub utilization_pct: Option<u32>,
    /// Power draw, watts.
    pub power_w: Option<f64>,
    /// Compute processes.
    pub processes: Vec<GpuProcess>,
}

/// A source of GPU samples.
pub trait GpuMonitor: Send + Sync {
    /// Samples every GPU (blocking; call it from `spawn_blocking` in async code).
    fn sample(&self) -> Result<Vec<GpuSample>, MonitorError>;

    /// Actual free memory of one GPU, MB.
    fn free_mb(&self, gpu: u32) -> Result<u64, MonitorError> {
        self.sample()?
            .into_iter()
            .find(|s| s.index == gpu)
            .map(|s| s.memory_free_mb)
            .ok_or(MonitorError::NoSuchGpu(gpu))
    }

    /// `owner`'s server now runs, holding `parts` (GPU, MB). On real GPUs its process takes
    /// that memory itself and the driver reports it: the default does nothing. A simulated
    /// fleet standing in for GPUs under real servers
    /// ([`SimFleet::servers_take_what_they_book`](sim_fleet::SimFleet::servers_take_what_they_book))
    /// takes it, so that what it reports used follows what runs there.
    fn occupy(&self, owner: &str, parts: &[(u32, u64)]) {
        let _ = (owner, parts);
    }

    /// `owner`'s server stopped (see [`GpuMonitor::occupy`]).
    fn vacate(&self, owner: &str) {
        let _ = owner;
    }
}

/// Temperature alert settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertConfig {
    /// Alert above this temperature, °C (80).
    pub threshold_c: f64,
    /// The alert clears once the GPU is this many degrees below the threshold (5).
    pub clear_margin_c: f64,
}

impl Default for AlertConfig {
    fn default() -> Self {
        Self {
            threshold_c: 80.0,
            clear_margin_c: 5.0,
        }
    }
}

impl AlertConfig {
    /// Checks the values; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidSamplerConfig> {
        if !(self.threshold_c.is_finite() && (0.0..=150.0).contains(&self.threshold_c)) {
            return Err(InvalidSamplerConfig {
                key: "alert.threshold_c".into(),
                value: self.threshold_c,
                expected: "a temperature between 0 and 150 °C",
            });
        }
        if !(self.clear_margin_c.is_finite() && self.clear_margin_c >= 0.0) {
            return Err(InvalidSamplerConfig {
                key: "alert.clear_margin_c".into(),
                value: self.clear_margin_c,
                expected: "a number of degrees, 0 or more",
            });
        }
        Ok(())
    }
}

/// Events produced by monitoring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum MonitorEvent {
    /// A GPU went above the threshold.
    TemperatureAlert {
        /// GPU index.
        gpu: u32,
        /// Its temperature, °C.
        temperature_c: f64,
        /// The threshold, °C.
        threshold_c: f64,
    },
    /// A GPU in alert cooled below threshold − margin.
    TemperatureNormal {
        /// GPU index.
        gpu: u32,
        /// Its temperature, °C.
        temperature_c: f64,
    },
    /// A sample failed.
    SampleFailed {
        /// The error, as text.
        error: String,
    },
}

/// Turns successive samples into alert events, once per crossing (with hysteresis).
#[derive(Debug, Clone, Default)]
pub struct AlertTracker {
    cfg: AlertConfig,
    alerted: BTreeSet<u32>,
}

impl AlertTracker {
    /// A tracker with the given settings.
    pub fn new(cfg: AlertConfig) -> Self {
        Self {
            cfg,
            alerted: BTreeSet::new(),
        }
    }

    /// GPUs currently in alert.
    pub fn alerted(&self) -> impl Iterator<Item = u32> + '_ {
        self.alerted.iter().copied()
    }

    /// Feeds one snapshot, returns the events it causes.
    pub fn observe(&mut self, samples: &[GpuSample]) -> Vec<MonitorEvent> {
        let mut out = Vec::new();
        for s in samples {
            let Some(t) = s.temperature_c else { continue };
            if t > self.cfg.threshold_c {
                if self.alerted.insert(s.index) {
                    out.push(MonitorEvent::TemperatureAlert {
                        gpu: s.index,
                        temperature_c: t,
                        threshold_c: self.cfg.threshold_c,
                    });
                }
            } else if t <= self.cfg.threshold_c - self.cfg.clear_margin_c
                && self.alerted.remove(&s.index)
            {
                out.push(MonitorEvent::TemperatureNormal {
                    gpu: s.index,
                    temperature_c: t,
                });
            }
        }
        out
    }
}

/// Sampler settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplerConfig {
    /// Sampling period, milliseconds (1000).
    pub interval_ms: u64,
    /// How long the samples are kept for [`Sampler::history`], seconds (3600; 0 keeps none).
    pub history_s: u64,
    /// Temperature alert.
    pub alert: AlertConfig,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            interval_ms: 1000,
            history_s: 3600,
            alert: AlertConfig::default(),
        }
    }
}

/// A [`SamplerConfig`] value out of its range, named by its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct InvalidSamplerConfig {
    /// The setting, e.g. `interval_ms` or `alert.threshold_c`.
    pub key: String,
    /// Its value as given.
    pub value: f64,
    /// What it must be.
    pub expected: &'static str,
}

impl SamplerConfig {
    /// Checks every value's range; the error names the first key out of range.
    pub fn validate(&self) -> Result<(), InvalidSamplerConfig> {
        if !(10..=3_600_000).contains(&self.interval_ms) {
            return Err(InvalidSamplerConfig {
                key: "interval_ms".into(),
                value: self.interval_ms as f64,
                expected: "10 to 3600000 milliseconds",
            });
        }
        if self.history_s > 7 * 24 * 3600 {
            return Err(InvalidSamplerConfig {
                key: "history_s".into(),
                value: self.history_s as f64,
                expected: "at most 604800 seconds (a week)",
            });
        }
        self.alert.validate()
    }
}

pub use horos_server_control::HistoryPoint;
use horos_server_control::{GpuGauge, GpuGauges};

/// The seam's [`GpuGauges`] over a [`GpuMonitor`] (a failed sample reads as no GPU): a status
/// page or metrics endpoint reads any monitor through it.
pub struct MonitorGauges(pub Arc<dyn GpuMonitor>);

impl std::fmt::Debug for MonitorGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MonitorGauges")
    }
}

impl GpuGauges for MonitorGauges {
    fn read(&self) -> Vec<GpuGauge> {
        self.0
            .sample()
            .map(|v| {
                v.into_iter()
                    .map(|s| GpuGauge {
                        index: s.index,
                        name: s.name,
                        temperature_c: s.temperature_c,
                        memory_used_mb: s.memory_used_mb,
                        memory_total_mb: s.memory_total_mb,
                        utilization_pct: s.utilization_pct,
                        alert_active: None,
                        alerts_total: None,
                        alert_threshold_c: None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One GPU's temperature alert state as the sampler tracks it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertStatus {
    /// In alert now (raised, not yet cleared).
    pub active: bool,
    /// Alerts raised since the sampler started (one per crossing, not one per sample).
    pub raised_total: u64,
}

/// At most this many points are kept in the history, whatever `history_s` and the period.
pub const MAX_HISTORY_POINTS: usize = 200_000;

/// What the sampling task shares with the [`Sampler`]'s readers.
#[derive(Debug, Default)]
struct Shared {
    latest: Option<Vec<GpuSample>>,
    history: VecDeque<HistoryPoint>,
    alerts: BTreeMap<u32, AlertStatus>,
    failing: bool,
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Shared {
    /// Records one successful sample and the events it caused.
    fn record(&mut self, samples: Vec<GpuSample>, events: &[MonitorEvent], cfg: &SamplerConfig) {
        for e in events {
            match e {
                MonitorEvent::TemperatureAlert { gpu, .. } => {
                    let a = self.alerts.entry(*gpu).or_default();
                    a.active = true;
                    a.raised_total += 1;
                }
                MonitorEvent::TemperatureNormal { gpu, .. } => {
                    self.alerts.entry(*gpu).or_default().active = false;
                }
                MonitorEvent::SampleFailed { .. } => {}
            }
        }
        for s in &samples {
            self.alerts.entry(s.index).or_default();
        }
        if cfg.history_s > 0 {
            let at_ms = now_ms();
            for s in &samples {
                self.history.push_back(HistoryPoint {
                    at_ms,
                    gpu: s.index,
                    temperature_c: s.temperature_c,
                    memory_used_mb: s.memory_used_mb,
                    utilization_pct: s.utilization_pct,
                    power_w: s.power_w,
                    alert: self.alerts.get(&s.index).is_some_and(|a| a.active),
                });
            }
            let oldest = at_ms.saturating_sub(cfg.history_s.saturating_mul(1000));
            while self
                .history
                .front()
                .is_some_and(|p| p.at_ms < oldest || self.history.len() > MAX_HISTORY_POINTS)
            {
                self.history.pop_front();
            }
        }
        self.latest = Some(samples);
    }
}

/// Logs an alert event once (the tracker emits one per crossing).
fn log_event(e: &MonitorEvent) {
    match e {
        MonitorEvent::TemperatureAlert {
            gpu,
            temperature_c,
            threshold_c,
        } => tracing::warn!(
            gpu,
            temperature_c,
            threshold_c,
            "GPU temperature alert raised"
        ),
        MonitorEvent::TemperatureNormal { gpu, temperature_c } => {
            tracing::info!(gpu, temperature_c, "GPU temperature alert cleared")
        }
        MonitorEvent::SampleFailed { error } => {
            tracing::warn!(%error, "GPU sampling failed")
        }
    }
}

/// A background task sampling a monitor periodically; keeps the latest snapshot, a short
/// history and each GPU's alert state, logs each alert once per crossing (raised: a warning,
/// cleared: info) and broadcasts the [`MonitorEvent`]s. Dropping it stops the task.
#[derive(Debug)]
pub struct Sampler {
    shared: Arc<RwLock<Shared>>,
    events: broadcast::Sender<MonitorEvent>,
    first: std::sync::Mutex<Option<broadcast::Receiver<MonitorEvent>>>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling on the current tokio runtime (the first sample at once, then every
    /// `interval_ms`; the monitor is called in `spawn_blocking`).
    pub fn spawn(monitor: Arc<dyn GpuMonitor>, cfg: SamplerConfig) -> Self {
        let shared: Arc<RwLock<Shared>> = Arc::default();
        let (events, first) = broadcast::channel(256);
        let task = {
            let shared = Arc::clone(&shared);
            let events = events.clone();
            tokio::spawn(async move {
                let mut tracker = AlertTracker::new(cfg.alert.clone());
                let mut interval =
                    tokio::time::interval(Duration::from_millis(cfg.interval_ms.max(1)));
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    let m = Arc::clone(&monitor);
                    let sampled = match tokio::task::spawn_blocking(move || m.sample()).await {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    match sampled {
                        Ok(samples) => {
                            let evs = tracker.observe(&samples);
                            let recovered = {
                                let mut sh = shared.write().unwrap_or_else(|e| e.into_inner());
                                sh.record(samples, &evs, &cfg);
                                std::mem::replace(&mut sh.failing, false)
                            };
                            if recovered {
                                tracing::info!("GPU sampling works again");
                            }
                            for e in evs {
                                log_event(&e);
                                let _ = events.send(e);
                            }
                        }
                        Err(error) => {
                            let first_failure = {
                                let mut sh = shared.write().unwrap_or_else(|e| e.into_inner());
                                !std::mem::replace(&mut sh.failing, true)
                            };
                            let e = MonitorEvent::SampleFailed { error };
                            // Logged when sampling starts failing, not at every period.
                            if first_failure {
                                log_event(&e);
                            }
                            let _ = events.send(e);
                        }
                    }
                }
            })
        };
        Self {
            shared,
            events,
            first: std::sync::Mutex::new(Some(first)),
            task,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.shared.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest snapshot, if one was taken.
    pub fn latest(&self) -> Option<Vec<GpuSample>> {
        self.read().latest.clone()
    }

    /// The samples of the last `history_s` seconds, oldest first (every GPU of a sample
    /// shares its `at_ms`).
    pub fn history(&self) -> Vec<HistoryPoint> {
        self.read().history.iter().cloned().collect()
    }

    /// Each GPU's alert state, by index (every GPU sampled at least once is listed).
    pub fn alerts(&self) -> BTreeMap<u32, AlertStatus> {
        self.read().alerts.clone()
    }

    /// Subscribes to events. The first call receives every event since [`Sampler::spawn`]
    /// (none is lost to the race with the first sample); later calls, the events from then on.
    pub fn subscribe(&self) -> broadcast::Receiver<MonitorEvent> {
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        first.take().unwrap_or_else(|| self.events.subscribe())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}
