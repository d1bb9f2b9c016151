//! GPU monitoring behind a trait.
//!
//! - [`GpuMonitor`]: one snapshot of every GPU (memory, temperature, utilization, power,
//!   processes);
//! - `nvml::NvmlMonitor` (feature `nvml`, on by default): the NVIDIA implementation (a typed
//!   [`MonitorError::NoDriver`] where NVML is absent, never a panic);
//! - [`sim_fleet::SimFleet`]: a simulated fleet whose memory, temperature and utilization
//!   respond to loads, unloads and batches;
//! - [`AlertTracker`] turns samples into temperature alert events (above 80 °C by default);
//! - [`Sampler`] samples a monitor every second on a tokio runtime (the blocking NVML calls
//!   run in `spawn_blocking`) and broadcasts the events.

#[cfg(feature = "nvml")]
pub mod nvml;
pub mod sim_fleet;

use std::collections::BTreeSet;
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
}

/// Temperature alert settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
#[serde(default)]
pub struct SamplerConfig {
    /// Sampling period, milliseconds (1000).
    pub interval_ms: u64,
    /// Temperature alert.
    pub alert: AlertConfig,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            interval_ms: 1000,
            alert: AlertConfig::default(),
        }
    }
}

/// A background task sampling a monitor periodically; keeps the latest snapshot and
/// broadcasts [`MonitorEvent`]s. Dropping it stops the task.
#[derive(Debug)]
pub struct Sampler {
    latest: Arc<RwLock<Option<Vec<GpuSample>>>>,
    events: broadcast::Sender<MonitorEvent>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling on the current tokio runtime.
    pub fn spawn(monitor: Arc<dyn GpuMonitor>, cfg: SamplerConfig) -> Self {
        let latest: Arc<RwLock<Option<Vec<GpuSample>>>> = Arc::new(RwLock::new(None));
        let (events, _) = broadcast::channel(256);
        let task = {
            let latest = Arc::clone(&latest);
            let events = events.clone();
            tokio::spawn(async move {
                let mut tracker = AlertTracker::new(cfg.alert.clone());
                let mut interval =
                    tokio::time::interval(Duration::from_millis(cfg.interval_ms.max(1)));
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    let m = Arc::clone(&monitor);
                    let sampled = tokio::task::spawn_blocking(move || m.sample()).await;
                    match sampled {
                        Ok(Ok(samples)) => {
                            for e in tracker.observe(&samples) {
                                tracing::warn!(event = ?e, "gpu temperature");
                                let _ = events.send(e);
                            }
                            if let Ok(mut l) = latest.write() {
                                *l = Some(samples);
                            }
                        }
                        Ok(Err(e)) => {
                            let _ = events.send(MonitorEvent::SampleFailed {
                                error: e.to_string(),
                            });
                        }
                        Err(e) => {
                            let _ = events.send(MonitorEvent::SampleFailed {
                                error: e.to_string(),
                            });
                        }
                    }
                }
            })
        };
        Self {
            latest,
            events,
            task,
        }
    }

    /// The latest snapshot, if one was taken.
    pub fn latest(&self) -> Option<Vec<GpuSample>> {
        self.latest.read().ok().and_then(|l| l.clone())
    }

    /// Subscribes to events.
    pub fn subscribe(&self) -> broadcast::Receiver<MonitorEvent> {
        self.events.subscribe()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}
