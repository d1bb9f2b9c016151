//! `[gpus]`: the one view of the GPUs. Only wiring: which monitor (NVML or gpu-alloc's
//! simulated fleet), gpu-alloc's `Sampler` over it, the coordinator's gauges over the sampler,
//! and the alert events handed to a command and a webhook.

use std::sync::Arc;
use std::time::Duration;

use horos_coordinator::{GpuGauge, GpuGauges, HistoryPoint};
use horos_gpu_alloc::monitor::nvml::NvmlMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::monitor::{GpuMonitor, MonitorEvent, Sampler};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::config::{GpuSource, GpusSection, WebhookUrl};

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

/// The sampler and the task that delivers its alerts; dropping it stops both.
pub struct GpuWatch {
    sampler: Arc<Sampler>,
    notifier: JoinHandle<()>,
    threshold_c: f64,
}

impl GpuWatch {
    /// Samples `monitor` as `[gpus]` says and sends each alert raised or cleared to the
    /// section's command and webhook (on a task of their own: a slow or failing receiver never
    /// delays a sample).
    pub fn start(section: &GpusSection, monitor: Arc<dyn GpuMonitor>) -> Result<Self, String> {
        let sampler = Arc::new(Sampler::spawn(monitor, section.sampler.clone()));
        let sinks = Sinks {
            command: section.alert_command.clone(),
            command_timeout: Duration::from_secs(section.alert_command_timeout_s),
            webhook: section.webhook()?,
            webhook_timeout: Duration::from_millis(section.alert_webhook_timeout_ms),
        };
        let notifier = tokio::spawn(sinks.run(sampler.subscribe()));
        Ok(GpuWatch {
            sampler,
            notifier,
            threshold_c: section.sampler.alert.threshold_c,
        })
    }

    /// The coordinator's gauges over the sampler's latest readings, alerts and history.
    pub fn gauges(&self) -> Arc<dyn GpuGauges> {
        Arc::new(SamplerGauges(Arc::clone(&self.sampler), self.threshold_c))
    }

    /// The hottest GPU's latest temperature (the feeder's pacing).
    pub fn hottest(&self) -> horos_feeder::TemperatureSource {
        let sampler = Arc::clone(&self.sampler);
        Arc::new(move || {
            sampler
                .latest()?
                .iter()
                .filter_map(|g| g.temperature_c)
                .reduce(f64::max)
        })
    }
}

impl Drop for GpuWatch {
    fn drop(&mut self) {
        self.notifier.abort();
    }
}

/// [`GpuGauges`] over gpu-alloc's [`Sampler`]: reads what it last sampled (no monitor call),
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

/// Where alert events go.
struct Sinks {
    command: Vec<String>,
    command_timeout: Duration,
    webhook: Option<WebhookUrl>,
    webhook_timeout: Duration,
}

impl Sinks {
    /// Delivers each alert raised or cleared, each delivery on a task of its own.
    async fn run(self, mut events: broadcast::Receiver<MonitorEvent>) {
        let sinks = Arc::new(self);
        loop {
            let event = match events.recv().await {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "GPU alert delivery fell behind");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if matches!(event, MonitorEvent::SampleFailed { .. }) {
                continue;
            }
            let body = alert_json(&event);
            if !sinks.command.is_empty() {
                let (s, body, event) = (Arc::clone(&sinks), body.clone(), event.clone());
                tokio::spawn(async move { s.run_command(&event, &body).await });
            }
            if sinks.webhook.is_some() {
                let (s, body) = (Arc::clone(&sinks), body.clone());
                tokio::spawn(async move { s.post(&body).await });
            }
        }
    }

    /// Runs the alert command with the event on stdin and in its environment; a failure is
    /// logged.
    async fn run_command(&self, event: &MonitorEvent, body: &str) {
        let Some((program, args)) = self.command.split_first() else {
            return;
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        for (k, v) in alert_env(event) {
            cmd.env(k, v);
        }
        let run = async {
            let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
            if let Some(mut stdin) = child.stdin.take() {
                // A command that does not read its stdin is not a failure.
                let _ = stdin.write_all(body.as_bytes()).await;
                let _ = stdin.write_all(b"\n").await;
            }
            let status = child.wait().await.map_err(|e| e.to_string())?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("exited with {status}"))
            }
        };
        match tokio::time::timeout(self.command_timeout, run).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(command = %program, error = %e, "GPU alert command failed")
            }
            Err(_) => tracing::warn!(
                command = %program,
                timeout_s = self.command_timeout.as_secs(),
                "GPU alert command timed out (killed)"
            ),
        }
    }

    /// POSTs the event to the webhook; a failure is logged.
    async fn post(&self, body: &str) {
        let Some(w) = &self.webhook else { return };
        match tokio::time::timeout(self.webhook_timeout, post_json(w, body)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(url = %w.authority, error = %e, "GPU alert webhook failed")
            }
            Err(_) => tracing::warn!(url = %w.authority, "GPU alert webhook timed out"),
        }
    }
}

/// The event as the command and the webhook receive it: gpu-alloc's `MonitorEvent` JSON
/// (`event`: `temperature_alert` or `temperature_normal`, `gpu`, `temperature_c`,
/// `threshold_c` when raised) plus `state` (`raised` / `cleared`) and `at_ms`.
fn alert_json(event: &MonitorEvent) -> String {
    let mut v = serde_json::to_value(event).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("state".into(), state_of(event).into());
        o.insert("at_ms".into(), squeueha::now_ms().into());
    }
    v.to_string()
}

fn state_of(event: &MonitorEvent) -> &'static str {
    match event {
        MonitorEvent::TemperatureAlert { .. } => "raised",
        MonitorEvent::TemperatureNormal { .. } => "cleared",
        MonitorEvent::SampleFailed { .. } => "failed",
    }
}

/// `HOROS_GPU_ALERT` (`raised` / `cleared`), `HOROS_GPU_INDEX`, `HOROS_GPU_TEMPERATURE_C` and,
/// when raised, `HOROS_GPU_THRESHOLD_C`.
fn alert_env(event: &MonitorEvent) -> Vec<(&'static str, String)> {
    let mut env = vec![("HOROS_GPU_ALERT", state_of(event).to_owned())];
    match event {
        MonitorEvent::TemperatureAlert {
            gpu,
            temperature_c,
            threshold_c,
        } => {
            env.push(("HOROS_GPU_INDEX", gpu.to_string()));
            env.push(("HOROS_GPU_TEMPERATURE_C", temperature_c.to_string()));
            env.push(("HOROS_GPU_THRESHOLD_C", threshold_c.to_string()));
        }
        MonitorEvent::TemperatureNormal { gpu, temperature_c } => {
            env.push(("HOROS_GPU_INDEX", gpu.to_string()));
            env.push(("HOROS_GPU_TEMPERATURE_C", temperature_c.to_string()));
        }
        MonitorEvent::SampleFailed { .. } => {}
    }
    env
}

/// One HTTP/1.1 POST of `body` (JSON) to `w`, answered 2xx (the connection closed after).
async fn post_json(w: &WebhookUrl, body: &str) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect(&w.authority)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\nuser-agent: horos-ref\r\n\r\n{body}",
        w.path,
        w.host,
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        let got = stream
            .read(&mut head[n..])
            .await
            .map_err(|e| e.to_string())?;
        if got == 0 {
            break;
        }
        n += got;
    }
    let status_line = String::from_utf8_lossy(&head[..n]);
    match status_line.split_whitespace().nth(1) {
        Some(code) if code.starts_with('2') => Ok(()),
        Some(code) => Err(format!("answered {code}")),
        None => Err("no HTTP answer".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_event_carries_its_state_and_fields() {
        let e = MonitorEvent::TemperatureAlert {
            gpu: 1,
            temperature_c: 91.5,
            threshold_c: 80.0,
        };
        let v: serde_json::Value = serde_json::from_str(&alert_json(&e)).unwrap();
        assert_eq!(v["event"], "temperature_alert");
        assert_eq!(v["state"], "raised");
        assert_eq!(v["gpu"], 1);
        assert_eq!(v["temperature_c"], 91.5);
        let env = alert_env(&e);
        assert!(env.contains(&("HOROS_GPU_INDEX", "1".into())));
        assert!(env.contains(&("HOROS_GPU_ALERT", "raised".into())));
        let cleared = MonitorEvent::TemperatureNormal {
            gpu: 1,
            temperature_c: 60.0,
        };
        assert_eq!(
            alert_env(&cleared)[0],
            ("HOROS_GPU_ALERT", "cleared".into())
        );
    }

    /// A command that fails or hangs is logged and, past its timeout, killed: delivery goes on.
    #[tokio::test]
    async fn a_failing_or_hanging_command_is_only_logged() {
        let event = MonitorEvent::TemperatureNormal {
            gpu: 0,
            temperature_c: 60.0,
        };
        for command in [
            vec!["sh".to_owned(), "-c".into(), "exit 3".into()],
            vec!["sleep".to_owned(), "30".into()],
            vec!["/nonexistent/horos-alert".to_owned()],
        ] {
            let sinks = Sinks {
                command,
                command_timeout: Duration::from_millis(200),
                webhook: None,
                webhook_timeout: Duration::from_millis(200),
            };
            let started = std::time::Instant::now();
            sinks.run_command(&event, "{}").await;
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }

    #[tokio::test]
    async fn a_webhook_that_refuses_or_is_absent_is_an_error_not_a_panic() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
        });
        let w = WebhookUrl::parse(&format!("http://{addr}/hook")).unwrap();
        assert_eq!(post_json(&w, "{}").await.unwrap_err(), "answered 500");
        let closed = WebhookUrl::parse("http://127.0.0.1:1/").unwrap();
        assert!(post_json(&closed, "{}").await.is_err());
    }
}
