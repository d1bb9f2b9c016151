//! `[gpus]` end to end: the real `horos-ref run` with a simulated two-GPU fleet whose GPU 1 is
//! scripted above 80 °C, then to 77 °C (inside the 5 °C hysteresis), then to 60 °C. Exactly one
//! alert is raised (one log line, `alerts_total` 1 on `/metrics`, the command and the webhook
//! called once), however many samples stay hot, and it clears once. The model pool measures the
//! same fleet.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{free_port, spawn_run, stop, wait_for};
use serde_json::Value;

/// A loopback webhook that answers 200 and keeps each request's body.
fn webhook() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&bodies);
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let body = loop {
                let n = s.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                let Some((head, body)) = text.split_once("\r\n\r\n") else {
                    continue;
                };
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    assert!(head.starts_with("POST /gpu-alert HTTP/1.1"), "{head}");
                    break Some(body.to_owned());
                }
            };
            if let Some(b) = body {
                kept.lock().unwrap().push(b);
            }
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (port, bodies)
}

fn get(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-m", "10", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The value of one series in a Prometheus text.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_simulated_gpu_above_80_c_raises_one_alert_and_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (hook_port, hook) = webhook();
    let base = format!("http://127.0.0.1:{port}");
    let d = dir.path().display();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        format!(
            r#"database = "q.db"

[coordinator]
bind = "127.0.0.1:{port}"

[coordinator.pool]
ledger = "ledger.db"

[gpus]
source = "simulated"
simulated_mb = [24000, 16000]
interval_ms = 20
alert_command = ["sh", "-c", "cat >> {d}/alerts.jsonl; echo \"$HOROS_GPU_ALERT $HOROS_GPU_INDEX\" >> {d}/env.txt"]
alert_webhook = "http://127.0.0.1:{hook_port}/gpu-alert"

[[gpus.simulated_temperature]]
gpu = 1
at_ms = 1000
temperature_c = 91.0

[[gpus.simulated_temperature]]
gpu = 1
at_ms = 15000
temperature_c = 77.0

[[gpus.simulated_temperature]]
gpu = 1
at_ms = 16000
temperature_c = 60.0
"#
        ),
    )
    .unwrap();
    let log = dir.path().join("run.log");
    // The timeline counts from the start: 14 s in alert leave a busy machine time to start
    // and to see it.
    let mut run = spawn_run(&config, &log);
    let base_ready = format!("{base}/health");
    wait_for("the coordinator", Duration::from_secs(60), || {
        get(&base_ready).contains("ok")
    });
    // One view: the model pool measures the same simulated fleet (no memory_mb budget needed,
    // each GPU's capacity is its simulated size).
    let ledger = horos_gpu_alloc::ledger::VramLedger::open(dir.path().join("ledger.db")).unwrap();
    assert_eq!(ledger.free_mb(0).unwrap(), 24_000);
    assert_eq!(ledger.free_mb(1).unwrap(), 16_000);

    let alert = "horos_gpu_temperature_alert{gpu=\"1\"}";
    let total = "horos_gpu_temperature_alerts_total{gpu=\"1\"}";
    let (mut seen_active, mut seen_on_page) = (false, false);
    wait_for(
        "the alert raised and cleared",
        Duration::from_secs(60),
        || {
            let t = get(&format!("{base}/metrics"));
            if metric(&t, alert) == Some(1.0) {
                seen_active = true;
                assert_eq!(metric(&t, total), Some(1.0), "{t}");
                // (The page is read after the metrics: the alert may have cleared in between.)
                seen_on_page |= get(&format!("{base}/status")).contains("ALERT (1 raised)");
            }
            metric(&t, alert) == Some(0.0) && metric(&t, total) == Some(1.0)
        },
    );
    assert!(seen_active, "/metrics never showed GPU 1 in alert");
    assert!(seen_on_page, "/status never showed GPU 1 in alert");
    let t = get(&format!("{base}/metrics"));
    for (series, value) in [
        ("horos_gpu_temperature_alerts_total{gpu=\"0\"}", 0.0),
        ("horos_gpu_temperature_alert{gpu=\"0\"}", 0.0),
        ("horos_gpu_temperature_celsius{gpu=\"1\"}", 60.0),
        (
            "horos_gpu_memory_total_bytes{gpu=\"1\"}",
            16_000.0 * 1024.0 * 1024.0,
        ),
        ("horos_gpu_utilization_ratio{gpu=\"0\"}", 0.0),
    ] {
        assert_eq!(metric(&t, series), Some(value), "{series} in\n{t}");
    }
    assert!(get(&format!("{base}/status")).contains("ok (1 raised)"));

    // The history: GPU 1 sampled in alert many times (one alert still), GPU 0 never.
    let gpus: Value = serde_json::from_str(&get(&format!("{base}/api/v1/gpus"))).unwrap();
    let history = gpus["history"].as_array().unwrap();
    let hot = history
        .iter()
        .filter(|p| p["gpu"] == 1 && p["alert"] == true)
        .count();
    assert!(hot > 10, "{hot} samples in alert");
    assert!(
        history
            .iter()
            .any(|p| p["gpu"] == 1 && p["alert"] == true && p["temperature_c"] == 77.0),
        "77 °C is inside the hysteresis: still in alert"
    );
    assert!(!history.iter().any(|p| p["gpu"] == 0 && p["alert"] == true));

    // The command and the webhook: one raise, one clear, in that order.
    let events = |bodies: Vec<String>| -> Vec<(String, f64)> {
        bodies
            .iter()
            .map(|b| {
                let v: Value = serde_json::from_str(b).unwrap();
                assert_eq!(v["gpu"], 1, "{v}");
                (
                    v["state"].as_str().unwrap().to_owned(),
                    v["temperature_c"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let expected = vec![("raised".to_owned(), 91.0), ("cleared".to_owned(), 60.0)];
    wait_for("the webhook's two calls", Duration::from_secs(10), || {
        hook.lock().unwrap().len() >= 2
    });
    let lines = |name: &str| {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    wait_for("the command's two runs", Duration::from_secs(10), || {
        lines("alerts.jsonl").len() >= 2 && lines("env.txt").len() >= 2
    });
    let status = stop(&mut run.0, libc::SIGTERM);
    assert!(status.success(), "{status:?}");
    assert_eq!(events(hook.lock().unwrap().clone()), expected);
    assert_eq!(events(lines("alerts.jsonl")), expected);
    assert_eq!(lines("env.txt"), vec!["raised 1", "cleared 1"]);

    // The log: one line per crossing, not one per sample.
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        log.matches("GPU temperature alert raised").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("GPU temperature alert cleared").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("alert command failed") && !log.contains("webhook failed"));
}
