//! Temperature alerts delivered to a command and a webhook ([`AlertSinks`]). The webhook is one
//! HTTP/1.1 POST over a plain TCP connection: a few lines for a loopback receiver, so that this
//! crate needs no HTTP client stack.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;

use super::MonitorEvent;

/// A webhook URL split for a plain HTTP/1.1 POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    /// `host:port` to connect to.
    pub authority: String,
    /// The host alone (the `Host` header's name).
    pub host: String,
    /// The path and query (`/` when empty).
    pub path: String,
}

impl WebhookUrl {
    /// Splits `http://host[:port][/path]`; only `http://`.
    pub fn parse(url: &str) -> Result<WebhookUrl, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{url}`: only http:// URLs"))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if hostport.is_empty() || hostport.contains('@') {
            return Err(format!("`{url}`: needs a host (and no user)"));
        }
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !p.contains(']') => {
                let port: u16 = p.parse().map_err(|_| format!("`{url}`: bad port"))?;
                (h, port)
            }
            _ => (hostport, 80),
        };
        Ok(WebhookUrl {
            authority: format!("{host}:{port}"),
            host: host.to_owned(),
            path: path.to_owned(),
        })
    }

    /// Whether the host is this machine (`localhost`, `127.x.x.x`, `[::1]`).
    pub fn is_loopback(&self) -> bool {
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        h.eq_ignore_ascii_case("localhost")
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
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
    pub webhook: Option<WebhookUrl>,
    /// How long the webhook may take to answer.
    pub webhook_timeout: Duration,
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

/// One HTTP/1.1 POST of `body` (JSON) to `w`, answered 2xx (the connection closed after).
async fn post_json(w: &WebhookUrl, body: &str) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect(&w.authority)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\nuser-agent: horos\r\n\r\n{body}",
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
            let sinks = AlertSinks {
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
