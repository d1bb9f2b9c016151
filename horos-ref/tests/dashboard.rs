//! The monitoring the docs ship: every metric the Grafana dashboard (docs/monitoring) queries is
//! one that `horos-ref run` exposes on `/metrics`, and `/metrics` passes `promtool check
//! metrics` (Prometheus' own lint: naming, units, counters' `_total`). The run has what the
//! dashboard shows: lanes on a simulated two-GPU fleet switched by the allocator, a model pool,
//! requests through the coordinator. promtool comes from Debian's `prometheus` package; the
//! promtool check skips without it unless `HOROS_REQUIRE_PROMTOOL=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{curl, fake_server_command, free_port, free_ports, spawn_run, stop, wait_for};
use serde_json::{Value, json};

const TEST: &str = "the_dashboard_queries_only_metrics_that_run_exposes_and_promtool_accepts_them";

/// Metric names an expression names (`horos_...`).
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("horos_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Families `/metrics` declares (`# TYPE name kind`), with a histogram's series names.
fn families(metrics: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        out.insert(name.to_owned());
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                out.insert(format!("{name}{suffix}"));
            }
        }
    }
    out
}

#[test]
fn the_dashboard_queries_only_metrics_that_run_exposes_and_promtool_accepts_them() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, pool_port, port) =
        (free_ports(2), free_ports(2), free_ports(2), free_port());
    let lane = |queue: &str, lane_port: u16| {
        format!(
            "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{lane_port}\"\n\
             model = \"{queue}-model\"\nbatch_size = 4\nstart_wait_s = 30\nswap_in_s = 0.2\n\
             job_s = 0.1\nvram_mb = 300\ncommand = {}\n",
            fake_server_command(TEST, &["--port", "{port}", "--slots", "4"])
        )
    };
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [1000, 1000]\ninterval_ms = 100\n\
         [allocator]\ngpus = [0, 1]\ntick_s = 0.1\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\n\
         [coordinator.pool]\nmargin_mb = 0\nport_min = {pool_port}\nport_max = {}\n\
         [[coordinator.pool.model]]\nname = \"pooled\"\ncommand = {}\nvram_mb = 100\n\n{}{}",
        pool_port + 1,
        fake_server_command(TEST, &["--port", "{port}", "--model", "pooled"]),
        lane("think", think_port),
        lane("vision", vision_port),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    for model in ["think-model", "vision-model", "pooled"] {
        let body = json!({"model": model, "x_timeout_s": 300,
            "messages": [{"role": "user", "content": "hello"}]});
        let (code, v) = curl(
            "POST",
            &format!("{base}/v1/chat/completions"),
            Some(&body),
            None,
        );
        assert_eq!(code, 200, "{model}: {v}");
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/monitoring/grafana-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queried.extend(names_in(target["expr"].as_str().unwrap()));
        }
    }
    // Some families appear with the first GPU sample or snapshot after start: read /metrics until
    // they are all there (or the wait ends and the assertion below names the missing ones).
    let read_metrics = || {
        let out = Command::new("curl")
            .args(["-s", &format!("{base}/metrics")])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut metrics = read_metrics();
    while !queried.is_subset(&families(&metrics)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        metrics = read_metrics();
    }
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    let exposed = families(&metrics);
    assert!(queried.len() >= 20, "{queried:?}");
    let missing: Vec<&String> = queried.difference(&exposed).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not expose: {missing:?}\n{metrics}"
    );

    // Prometheus' own lint of the exposition.
    if !common::promtool_accepts(&metrics) {
        common::skip_or_fail(
            "HOROS_REQUIRE_PROMTOOL",
            "promtool is not installed (Debian package prometheus)",
        );
    }
}
