//! A [`Sampler`] with its alerts delivered ([`GpuWatch`]): the one view of the GPUs that a
//! model pool, a status page and a feeder's pacing all read.

use std::sync::Arc;

use horos_server_control::{GpuGauge, GpuGauges, HistoryPoint};
use tokio::task::JoinHandle;

use super::alerts::AlertSinks;
use super::{GpuMonitor, Sampler, SamplerConfig};

/// The sampler and the task that delivers its alerts; dropping it stops both.
pub struct GpuWatch {
    sampler: Arc<Sampler>,
    notifier: JoinHandle<()>,
    threshold_c: f64,
}

impl GpuWatch {
    /// Samples `monitor` with `config` and sends each alert raised or cleared to `sinks`.
    pub fn start(monitor: Arc<dyn GpuMonitor>, config: SamplerConfig, sinks: AlertSinks) -> Self {
        let threshold_c = config.alert.threshold_c;
        let sampler = Arc::new(Sampler::spawn(monitor, config));
        let notifier = tokio::spawn(sinks.run(sampler.subscribe()));
        GpuWatch {
            sampler,
            notifier,
            threshold_c,
        }
    }

    /// The seam's gauges (a status page's, a metrics endpoint's) over the sampler's latest
    /// readings, alerts and history.
    pub fn gauges(&self) -> Arc<dyn GpuGauges> {
        Arc::new(SamplerGauges(Arc::clone(&self.sampler), self.threshold_c))
    }

    /// The hottest GPU's latest temperature, read from the sampler (a feeder's pacing).
    pub fn hottest(&self) -> impl Fn() -> Option<f64> + Send + Sync + 'static {
        let sampler = Arc::clone(&self.sampler);
        move || {
            sampler
                .latest()?
                .iter()
                .filter_map(|g| g.temperature_c)
                .reduce(f64::max)
        }
    }
}

impl Drop for GpuWatch {
    fn drop(&mut self) {
        self.notifier.abort();
    }
}

/// The seam's [`GpuGauges`] over a [`Sampler`]: reads what it last sampled (no monitor call),
/// with each GPU's alert state and the sampler's history.
struct SamplerGauges(Arc<Sampler>, f64);

impl GpuGauges for SamplerGauges {
    fn read(&self) -> Vec<GpuGauge> {
        let alerts = self.0.alerts();
        self.0
            .latest()
            .unwrap_or_default()
            .into_iter()
            .map(|s| {
                let a = alerts.get(&s.index).copied().unwrap_or_default();
                GpuGauge {
                    index: s.index,
                    name: s.name,
                    temperature_c: s.temperature_c,
                    memory_used_mb: s.memory_used_mb,
                    memory_total_mb: s.memory_total_mb,
                    utilization_pct: s.utilization_pct,
                    alert_active: Some(a.active),
                    alerts_total: Some(a.raised_total),
                    alert_threshold_c: Some(self.1),
                }
            })
            .collect()
    }

    fn history(&self) -> Vec<HistoryPoint> {
        self.0.history()
    }
}
