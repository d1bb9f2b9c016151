//! The `horos-fakeai` binary as its own process, driven with raw HTTP/1.1 over std sockets.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use horos_fakeai::{CRASH_EXIT_CODE, FakeConfig, FakeProcess, Fault, SleepScript};
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
    http_within(Duration::from_secs(10), url, method, path, headers, body)
}

/// [`http`], giving up (`None`) when no answer came within `limit`.
fn http_within(
    limit: Duration,
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, String)> {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(limit)).unwrap();
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

/// `GET /is_sleeping`'s answer.
fn is_sleeping(url: &str) -> bool {
    let (status, text) = http(url, "GET", "/is_sleeping", &[], "").unwrap();
    assert_eq!(status, 200, "{text}");
    if text.contains("\"is_sleeping\":true") {
        return true;
    }
    assert!(text.contains("\"is_sleeping\":false"), "{text}");
    false
}

/// A POST's status and how long it took to answer.
fn timed_post(url: &str, path: &str) -> (u16, Duration) {
    let t0 = std::time::Instant::now();
    let (status, _) = http(url, "POST", path, &[], "").unwrap();
    (status, t0.elapsed())
}

#[test]
fn binary_sleeps_and_wakes_like_vllm_with_scripted_latencies() {
    let p = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            sleep: SleepScript {
                enabled: true,
                sleep_latency: Duration::from_millis(100),
                wake_latency_l1: Duration::from_millis(150),
                wake_latency_l2: Duration::from_millis(400),
                ..SleepScript::default()
            },
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = p.url().to_owned();
    assert!(!is_sleeping(&url));
    let chat = |url: &str| http(url, "POST", "/v1/chat/completions", &[], CHAT).unwrap();
    assert_eq!(chat(&url).0, 200);
    // Awake, a wake-up answers at once.
    let (status, took) = timed_post(&url, "/wake_up");
    assert_eq!(status, 200);
    assert!(took < Duration::from_millis(150), "{took:?}");

    let (status, took) = timed_post(&url, "/sleep?level=1");
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(100), "{took:?}");
    assert!(is_sleeping(&url));
    // Asleep: what needs the weights is refused with 503, the rest answers.
    let (status, text) = chat(&url);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("sleeping"), "{text}");
    let (status, _) = http(&url, "POST", "/v1/embeddings", &[], r#"{"input":"x"}"#).unwrap();
    assert_eq!(status, 503);
    assert_eq!(http(&url, "GET", "/health", &[], "").unwrap().0, 200);
    assert_eq!(http(&url, "GET", "/v1/models", &[], "").unwrap().0, 200);

    let (status, took) = timed_post(&url, "/wake_up");
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(!is_sleeping(&url));
    assert_eq!(chat(&url).0, 200);

    // Level 2 wakes at its own pace; an unknown level and a wrong method are refused.
    assert_eq!(timed_post(&url, "/sleep?level=2").0, 200);
    let (status, took) = timed_post(&url, "/wake_up");
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert_eq!(timed_post(&url, "/sleep?level=3").0, 400);
    assert!(!is_sleeping(&url));
    assert_eq!(http(&url, "GET", "/sleep", &[], "").unwrap().0, 405);

    // Without --enable-sleep-mode (vLLM without it) the sleep API is not there.
    let plain = FakeProcess::spawn_binary(BIN, &FakeConfig::default()).unwrap();
    assert_eq!(
        http(plain.url(), "GET", "/is_sleeping", &[], "").unwrap().0,
        404
    );
    assert_eq!(timed_post(plain.url(), "/sleep?level=1").0, 404);
}

#[test]
fn binary_wake_that_fails_leaves_it_asleep_and_a_hung_sleep_never_answers() {
    let failing = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            sleep: SleepScript {
                enabled: true,
                wake_fault: Fault::Status(500),
                ..SleepScript::default()
            },
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = failing.url().to_owned();
    assert_eq!(timed_post(&url, "/sleep").0, 200, "level 1 by default");
    let (status, text) = http(&url, "POST", "/wake_up", &[], "").unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(is_sleeping(&url));
    assert_eq!(
        http(&url, "POST", "/v1/chat/completions", &[], CHAT)
            .unwrap()
            .0,
        503
    );

    let hanging = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            sleep: SleepScript {
                enabled: true,
                sleep_fault: Fault::Hang,
                ..SleepScript::default()
            },
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = hanging.url().to_owned();
    let answer = http_within(
        Duration::from_millis(500),
        &url,
        "POST",
        "/sleep?level=1",
        &[],
        "",
    );
    assert_eq!(answer, None, "a hung sleep answered");
    assert!(!is_sleeping(&url));
    assert_eq!(
        http(&url, "POST", "/v1/chat/completions", &[], CHAT)
            .unwrap()
            .0,
        200
    );
}

/// `GET /props`' `is_sleeping` (llama-server's).
fn props_sleeping(url: &str) -> bool {
    let (status, text) = http(url, "GET", "/props", &[], "").unwrap();
    assert_eq!(status, 200, "{text}");
    text.contains("\"is_sleeping\":true")
}

#[test]
fn binary_falls_asleep_when_idle_and_the_next_request_wakes_it_like_llama_server() {
    let p = FakeProcess::spawn_binary(
        BIN,
        &FakeConfig {
            sleep: SleepScript {
                idle_sleep: Some(Duration::from_millis(300)),
                wake_latency_l2: Duration::from_millis(200),
                ..SleepScript::default()
            },
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let url = p.url().to_owned();
    let chat = |url: &str| http(url, "POST", "/v1/chat/completions", &[], CHAT).unwrap();
    assert_eq!(chat(&url).0, 200);
    assert!(!props_sleeping(&url));
    wait_for("asleep after 300 ms idle", Duration::from_secs(5), || {
        props_sleeping(&url).then_some(())
    });
    // Its health and models still answer; a request wakes it, after the wake latency.
    assert_eq!(http(&url, "GET", "/health", &[], "").unwrap().0, 200);
    let t0 = std::time::Instant::now();
    assert_eq!(chat(&url).0, 200);
    assert!(
        t0.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    assert!(!props_sleeping(&url));
    // vLLM's sleep API is another thing.
    assert_eq!(http(&url, "GET", "/is_sleeping", &[], "").unwrap().0, 404);
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
