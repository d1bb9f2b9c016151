//! The seam between a status page or metrics endpoint and a source of GPU readings:
//! [`GpuGauges`] (gpu-alloc's monitors and sampler implement it).

use serde::{Deserialize, Serialize};

/// One GPU's readings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuGauge {
    /// GPU index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// Die temperature, °C.
    pub temperature_c: Option<f64>,
    /// Memory used, MB.
    pub memory_used_mb: u64,
    /// Memory total, MB.
    pub memory_total_mb: u64,
    /// Compute utilization, percent.
    pub utilization_pct: Option<u32>,
    /// Whether the GPU is in temperature alert now; `None` where the source tracks no alerts
    /// (then no alert series is rendered for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_active: Option<bool>,
    /// Temperature alerts raised on this GPU since start-up (one per crossing); `None` where
    /// the source tracks no alerts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts_total: Option<u64>,
    /// The temperature above which an alert is raised, °C, where the source has one (drawn
    /// on the status page's temperature chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_threshold_c: Option<f64>,
}

/// A source of GPU readings fed by the binary (NVML, a simulated fleet, a sampler, nothing).
/// Called from a blocking thread of the snapshotter, never from a request.
pub trait GpuGauges: Send + Sync {
    /// Reads every GPU (may block).
    fn read(&self) -> Vec<GpuGauge>;

    /// Recent readings, oldest first, for charts (`GET /api/v1/gpus`). None by default: only
    /// a source that keeps a history (gpu-alloc's `Sampler`) has one.
    fn history(&self) -> Vec<HistoryPoint> {
        Vec::new()
    }
}

/// One GPU's reading in the sampler's history (what a chart needs, nothing more).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPoint {
    /// When it was sampled, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// GPU index.
    pub gpu: u32,
    /// Die temperature, °C.
    pub temperature_c: Option<f64>,
    /// Used memory, MB.
    pub memory_used_mb: u64,
    /// Compute utilization, percent.
    pub utilization_pct: Option<u32>,
    /// Power draw, watts.
    pub power_w: Option<f64>,
    /// Whether the GPU was in temperature alert after this sample.
    pub alert: bool,
}
