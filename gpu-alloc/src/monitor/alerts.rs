//! Temperature alerts delivered to a command and a webhook ([`AlertSinks`]). The webhook
//! ([`Webhook`]) is an HTTP POST through hyper's client, over http:// or https:// (the `webhook`
//! feature); its URL is checked as every URL a setting names ([`WebhookUrl`]).

use std::sync::Arc;
use std::time::Duration;

use horos_server_control::settings::{BadUrl, http_url};
use tokio::io::AsyncWriteExt;
use tokio::sync::broadcast;

use super::MonitorEvent;

mod webhook;

pub use webhook::{Webhook, WebhookError};

/// A webhook's URL, checked: `http://` or `https://`, a host, no user name or password, no
/// control character or whitespace ([`http_url`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl(http::Uri);

impl WebhookUrl {
    /// Checks `url`; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<WebhookUrl, BadUrl> {
        http_url(url, true).map(WebhookUrl)
    }

    /// The URL.
    pub fn uri(&self) -> &http::Uri {
        &self.0
    }

    /// Whether the host is this machine (`localhost`, `127.x.x.x`, `[::1]`).
    pub fn is_loopback(&self) -> bool {
        let h = self.0.host().unwrap_or_default();
        let h = h.trim_start_matches('[').trim_end_matches(']');
        h.eq_ignore_ascii_case("localhost")
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// The scheme and authority only (`https://hooks.example.com:8443`): what a log line shows,
/// never the path, which may carry a token.
impl std::fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = self.0.scheme_str().unwrap_or("http");
        match self.0.authority() {
            Some(a) => write!(f, "{scheme}://{a}"),
            None => write!(f, "{scheme}://"),
        }
    }
}

/// `e` and its causes, `: `-separated: what a log line or a settings error shows.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Where a [`Sampler`](super::Sampler)'s temperature alerts go: a command (the event on its
/// stdin and in its environment) and a webhook (an HTTP POST of the event's JSON), each
/// delivery on a task of its own, so a slow or failing receiver never delays a sample.
#[derive(Debug, Clone, Default)]
pub struct AlertSinks {
    /// The command and its arguments (empty: none).
    pub command: Vec<String>,
    /// How long the command may run before it is killed.
    pub command_timeout: Duration,
    /// The webhook (`None`: none).
    pub webhook: Option<Webhook>,
}

impl AlertSinks {
    /// Delivers each alert raised or cleared, each delivery on a task of its own, until the
    /// sender closes.
    pub async fn run(self, mut events: broadcast::Receiver<MonitorEvent>) {
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
        if let Err(e) = w.post(body).await {
            tracing::warn!(url = %w.url(), error = %with_causes(&e), "GPU alert webhook failed");
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
        o.insert("at_ms".into(), now_ms().into());
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

/// Milliseconds since the Unix epoch (0 on a clock before it).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
            let sinks = AlertSinks {
                command,
                command_timeout: Duration::from_millis(200),
                webhook: None,
            };
            let started = std::time::Instant::now();
            sinks.run_command(&event, "{}").await;
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }
}
