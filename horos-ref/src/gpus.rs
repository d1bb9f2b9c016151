//! `[gpus]`: the one view of the GPUs. Only wiring: which monitor (NVML or gpu-alloc's
//! simulated fleet), and gpu-alloc's `GpuWatch` (its sampler and alert sinks) over it.

use std::sync::Arc;
use std::time::Duration;

use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::alerts::AlertSinks;
use horos_gpu_alloc::monitor::nvml::NvmlMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
pub use horos_gpu_alloc::monitor::watch::GpuWatch;

use crate::config::{GpuSource, GpusSection};

/// The GPUs' monitor as `[gpus]` says: NVML (required with `source = "nvml"`, where it answers
/// with `auto`), a simulated fleet, or none.
pub async fn open(section: &GpusSection) -> Result<Option<Arc<dyn GpuMonitor>>, String> {
    match section.source {
        GpuSource::None => Ok(None),
        GpuSource::Simulated => {
            let fleet = Arc::new(
                SimFleet::with_sizes(&section.simulated_mb)
                    .with_temperature_script(section.simulated_temperature.clone()),
            );
            tracing::info!(gpus = section.simulated_mb.len(), "simulated GPU fleet");
            for p in &section.simulated_process {
                tokio::spawn(simulate_process(Arc::downgrade(&fleet), p.clone()));
            }
            Ok(Some(fleet))
        }
        GpuSource::Nvml | GpuSource::Auto => {
            match tokio::task::spawn_blocking(NvmlMonitor::new).await {
                Ok(Ok(monitor)) => Ok(Some(Arc::new(monitor))),
                Ok(Err(e)) if section.source == GpuSource::Nvml => {
                    Err(format!("gpus.source = \"nvml\": {e}"))
                }
                Ok(Err(e)) => {
                    tracing::info!(error = %e, "no GPU readings (NVML unavailable)");
                    Ok(None)
                }
                Err(e) if section.source == GpuSource::Nvml => Err(format!(
                    "gpus.source = \"nvml\": the NVML probe failed: {e}"
                )),
                Err(e) => {
                    tracing::warn!(error = %e, "NVML probe failed");
                    Ok(None)
                }
            }
        }
    }
}

/// A `[[gpus.simulated_process]]`: its memory taken on the fleet from `at_ms` to `until_ms`.
async fn simulate_process(fleet: std::sync::Weak<SimFleet>, p: crate::config::SimulatedProcess) {
    let key = format!("process:{}", p.name);
    tokio::time::sleep(std::time::Duration::from_millis(p.at_ms)).await;
    let Some(f) = fleet.upgrade() else { return };
    match f.load(p.gpu, &key, p.mb, None) {
        Ok(()) => {
            tracing::info!(gpu = p.gpu, mb = p.mb, name = %p.name, "simulated process takes GPU memory")
        }
        Err(e) => tracing::warn!(gpu = p.gpu, error = %e, "simulated process not placed"),
    }
    drop(f);
    let Some(until) = p.until_ms else { return };
    tokio::time::sleep(std::time::Duration::from_millis(until - p.at_ms)).await;
    if let Some(f) = fleet.upgrade() {
        let _ = f.unload(p.gpu, &key);
        tracing::info!(gpu = p.gpu, name = %p.name, "simulated process ends");
    }
}

/// Samples `monitor` as `[gpus]` says, its alerts sent to the section's command and webhook.
pub fn watch(section: &GpusSection, monitor: Arc<dyn GpuMonitor>) -> Result<GpuWatch, String> {
    let sinks = AlertSinks {
        command: section.alert_command.clone(),
        command_timeout: Duration::from_secs(section.alert_command_timeout_s),
        webhook: section.webhook()?,
        webhook_timeout: Duration::from_millis(section.alert_webhook_timeout_ms),
    };
    Ok(GpuWatch::start(monitor, section.sampler.clone(), sinks))
}
