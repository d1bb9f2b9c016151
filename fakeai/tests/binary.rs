//! The `horos-fakeai` binary as its own process, driven with raw HTTP/1.1 over std sockets.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use horos_fakeai::{CRASH_EXIT_CODE, FakeConfig, FakeProcess, Fault};
use horos_testkit::wait_for;

const BIN: &str = env!("CARGO_BIN_EXE_horos-fakeai");

/// Sends one request (`Connection: close`) and returns (status, headers+body text); `None` when the
/// connection broke before a status line.
fn http(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, String)> {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text))
}

const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#;

#[test]
fn binary_serves_and_exits_on_the_crash_marker() {
    let mut p = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            crash_marker: Some("POISON-PILL".into()),
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = p.url().to_owned();
    let (status, text) = http(&url, "POST", "/v1/chat/completions", &[], CHAT).unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("\"content\":\"hello there\""), "{text}");
    let (status, _) = http(&url, "GET", "/health", &[], "").unwrap();
    assert_eq!(status, 200);

    let poisoned = r#"{"model":"m","messages":[{"role":"user","content":"a POISON-PILL here"}]}"#;
    assert!(http(&url, "POST", "/v1/chat/completions", &[], poisoned).is_none());
    let status = p.wait_exit(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(status.code(), Some(CRASH_EXIT_CODE));
    assert!(TcpStream::connect(url.strip_prefix("http://").unwrap()).is_err());

    // restarted on the same port, the way a supervisor restarts a crashed inference server
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let again = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            port,
            crash_marker: Some("POISON-PILL".into()),
            ..FakeConfig::default()
        },
    )
    .unwrap();
    assert_eq!(again.url(), url);
    let (status, _) = http(&url, "POST", "/v1/chat/completions", &[], CHAT).unwrap();
    assert_eq!(status, 200);
}

#[test]
fn binary_metrics_count_running_and_waiting() {
    let p = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            slots: 1,
            latency: Duration::from_millis(1500),
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = p.url().to_owned();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                http(&url, "POST", "/v1/chat/completions", &[], CHAT)
                    .unwrap()
                    .0
            })
        })
        .collect();
    let seen = wait_for(
        "2 requests waiting in /metrics",
        Duration::from_secs(2),
        || {
            let (_, text) = http(&url, "GET", "/metrics", &[], "").unwrap();
            text.contains("vllm:num_requests_waiting{model_name=\"fake-model\"} 2")
                .then_some(text)
        },
    );
    assert!(
        seen.contains("vllm:num_requests_running{model_name=\"fake-model\"} 1"),
        "{seen}"
    );
    for w in workers {
        assert_eq!(w.join().unwrap(), 200);
    }
    let (_, text) = http(&url, "GET", "/metrics", &[], "").unwrap();
    assert!(text.contains("vllm:num_requests_running{model_name=\"fake-model\"} 0"));
    assert!(text.contains("fakeai:requests_total 3"));
}

#[test]
fn per_request_header_overrides_the_configured_fault() {
    let p = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            fault: Fault::Status(503),
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = p.url().to_owned();
    let (status, text) = http(&url, "POST", "/v1/chat/completions", &[], CHAT).unwrap();
    assert_eq!(status, 503);
    assert!(text.contains("\"error\""), "{text}");
    let (status, _) = http(
        &url,
        "POST",
        "/v1/chat/completions",
        &[("x-fakeai-fault", "none")],
        CHAT,
    )
    .unwrap();
    assert_eq!(status, 200);
    let (status, _) = http(
        &url,
        "POST",
        "/v1/chat/completions",
        &[("x-fakeai-fault", "status:422")],
        CHAT,
    )
    .unwrap();
    assert_eq!(status, 422);
    let (status, _) = http(
        &url,
        "POST",
        "/v1/chat/completions",
        &[("x-fakeai-fault", "bogus")],
        CHAT,
    )
    .unwrap();
    assert_eq!(status, 400);
    // non-inference endpoints are never faulted; unknown paths are 404
    assert_eq!(http(&url, "GET", "/v1/models", &[], "").unwrap().0, 200);
    assert_eq!(http(&url, "GET", "/nope", &[], "").unwrap().0, 404);
    assert_eq!(
        http(&url, "GET", "/v1/chat/completions", &[], "")
            .unwrap()
            .0,
        405
    );
}

#[test]
fn binary_help_and_bad_arguments() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--crash-marker"));
    let out = Command::new(BIN)
        .args(["--fault", "explode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown fault"));
}
