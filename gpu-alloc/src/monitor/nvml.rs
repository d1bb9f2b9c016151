//! The NVML implementation of [`GpuMonitor`] (nvml-wrapper; the library is loaded at run
//! time, so this builds and runs on machines without a GPU and answers
//! [`MonitorError::NoDriver`] there).

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::{GpuMonitor, GpuProcess, GpuSample, MonitorError};

const MB: u64 = 1024 * 1024;

/// NVIDIA GPUs through NVML.
pub struct NvmlMonitor {
    nvml: Nvml,
}

impl std::fmt::Debug for NvmlMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlMonitor").finish_non_exhaustive()
    }
}

/// Maps an NVML error: a missing library or driver is [`MonitorError::NoDriver`].
pub fn classify(e: NvmlError) -> MonitorError {
    match e {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::DriverNotLoaded
        | NvmlError::LibraryNotFound => MonitorError::NoDriver(e.to_string()),
        other => MonitorError::Nvml(other.to_string()),
    }
}

impl NvmlMonitor {
    /// Initialises NVML. Where the driver is absent: `Err(MonitorError::NoDriver)`.
    pub fn new() -> Result<Self, MonitorError> {
        Nvml::init().map(|nvml| Self { nvml }).map_err(classify)
    }

    /// Number of GPUs.
    pub fn gpu_count(&self) -> Result<u32, MonitorError> {
        self.nvml.device_count().map_err(classify)
    }
}

impl GpuMonitor for NvmlMonitor {
    fn sample(&self) -> Result<Vec<GpuSample>, MonitorError> {
        let n = self.gpu_count()?;
        let mut out = Vec::with_capacity(n as usize);
        for index in 0..n {
            let d = self.nvml.device_by_index(index).map_err(classify)?;
            let mem = d.memory_info().map_err(classify)?;
            let processes = d
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    used_mb: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b / MB),
                        UsedGpuMemory::Unavailable => None,
                    },
                })
                .collect();
            out.push(GpuSample {
                index,
                name: d.name().unwrap_or_default(),
                memory_total_mb: mem.total / MB,
                memory_used_mb: mem.used / MB,
                memory_free_mb: mem.free / MB,
                temperature_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                utilization_pct: d.utilization_rates().ok().map(|u| u.gpu),
                power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                processes,
            });
        }
        Ok(out)
    }
}
