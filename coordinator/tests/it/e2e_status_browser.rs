//! End-to-end test of the status page (`GET /status`) in a real headless browser: Chromium
//! loads the page of a coordinator that has loaded models on two simulated GPUs, a model
//! still loading, requests queued behind a busy model, queued async jobs and routing
//! decisions; the test reads the DOM the browser built (`--dump-dom`) and takes a screenshot.
//!
//! Needs Chromium (Debian: `apt-get install --no-install-recommends chromium`), found as
//! `HOROS_CHROMIUM`, else `chromium`, `chromium-browser` or `google-chrome` on the PATH. Skips
//! without it, unless `HOROS_REQUIRE_BROWSER=1`.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{
    Coordinator, CoordinatorConfig, GpuGauge, GpuGauges, HistoryPoint, StatusSection,
};
use horos_gpu_alloc::monitor::MonitorGauges;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::{BackendFactory, ModelPool, ModelSpec, PoolConfig, PoolUpstream};
use serde_json::{Value, json};

const GPU_MB: u64 = 2000;
const MODEL_MB: u64 = 600;
const CLIENT: &str = "browser-test";

/// A Chromium that runs (`--version`), or `None` (skip) when none does and none is required.
fn chromium() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = match std::env::var("HOROS_CHROMIUM") {
        Ok(p) => vec![PathBuf::from(p)],
        Err(_) => ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .map(PathBuf::from)
            .collect(),
    };
    for c in &candidates {
        let mut cmd = Command::new(c);
        cmd.arg("--version");
        if let Ok(r) = run_limited(cmd, Duration::from_secs(30))
            && r.code == Some(0)
        {
            eprintln!("browser: {}", r.stdout.trim());
            return Some(c.clone());
        }
    }
    let why = format!("no Chromium runs (tried {candidates:?}; Debian: apt-get install chromium)");
    if std::env::var("HOROS_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!("HOROS_REQUIRE_BROWSER=1 but {why}");
    }
    eprintln!("SKIP: status page in a browser: {why}");
    None
}

/// Runs headless Chromium on `url` with `args` (a profile of its own, so runs never share
/// one); its stdout.
fn browse(chrome: &Path, profile: &Path, url: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(chrome);
    cmd.args([
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url);
    let r = run_limited(cmd, Duration::from_secs(45)).unwrap();
    assert_eq!(
        r.code,
        Some(0),
        "chromium {args:?} failed (None: killed at 45 s)\nstdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// Text of an HTML fragment: tags dropped, entities decoded, blanks collapsed.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for ch in html.chars() {
        match ch {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The rows (cell texts; header cells included) of the table after `<h2>heading</h2>`.
fn table(dom: &str, heading: &str) -> Vec<Vec<String>> {
    let h = format!("<h2>{heading}</h2>");
    let start = dom
        .find(&h)
        .unwrap_or_else(|| panic!("no {h} in the DOM:\n{dom}"));
    let rest = &dom[start..];
    let t0 = rest.find("<table").unwrap();
    let t1 = rest.find("</table>").unwrap();
    let t = &rest[t0..t1];
    t.split("<tr")
        .skip(1)
        .map(|row| {
            let mut cells = Vec::new();
            let mut r = row;
            while let Some(i) = r.find("<td").into_iter().chain(r.find("<th")).min() {
                let body = &r[i..];
                let open = body.find('>').unwrap() + 1;
                let close = body.find("</t").unwrap_or(body.len());
                cells.push(text(&body[open..close]));
                r = &body[close..];
                if r.len() > 2 {
                    r = &r[2..];
                }
            }
            cells
        })
        .collect()
}

/// The row whose first cell is `key` (with the header row, to index by column name).
fn row<'a>(rows: &'a [Vec<String>], key: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r.first().is_some_and(|c| c == key))
        .unwrap_or_else(|| panic!("no row {key} in {rows:?}"))
}

fn col(rows: &[Vec<String>], name: &str) -> usize {
    rows[0]
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {:?}", rows[0]))
}

/// Three models of 600 MB on two simulated GPUs of 2000 MB: `alpha` and `beta` load in
/// 50 ms, `gamma` in a minute (it stays LOADING for the whole test).
fn upstream() -> (PoolUpstream, Arc<FakeFactory>, Arc<SimFleet>) {
    let fleet = Arc::new(SimFleet::new(2, GPU_MB));
    let factory = Arc::new(FakeFactory::new(
        Arc::clone(&fleet),
        Duration::from_millis(50),
        MODEL_MB,
    ));
    let pool = ModelPool::new(
        PoolConfig {
            reclaim_delay_ms: 10,
            margin_mb: 0,
            ..PoolConfig::default()
        },
        Arc::clone(&factory) as Arc<dyn BackendFactory>,
        Arc::clone(&fleet) as _,
        None,
    );
    let specs = ["alpha", "beta", "gamma"].map(|m| ModelSpec {
        id: m.to_owned(),
        facts: horos_gpu_alloc::estimate::ModelFacts {
            name: m.to_owned(),
            explicit_mb: Some(MODEL_MB),
            ..Default::default()
        },
        settings: if m == "gamma" {
            json!({"load_ms": 60_000})
        } else {
            Value::Null
        },
        ..ModelSpec::default()
    });
    (PoolUpstream::new(pool, specs), factory, fleet)
}

/// The fleet's readings with an hour of history (one point a minute, the temperature of GPU 1
/// climbing past the 80 °C alert line), as a sampler keeps it.
struct WithHistory(MonitorGauges);

impl GpuGauges for WithHistory {
    fn read(&self) -> Vec<GpuGauge> {
        self.0
            .read()
            .into_iter()
            .map(|g| GpuGauge {
                alert_threshold_c: Some(80.0),
                ..g
            })
            .collect()
    }

    fn history(&self) -> Vec<HistoryPoint> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        (0..60u64)
            .flat_map(|i| {
                (0..2u32).map(move |gpu| HistoryPoint {
                    at_ms: now - (59 - i) * 60_000,
                    gpu,
                    temperature_c: Some(40.0 + f64::from(gpu) * i as f64 * 0.8),
                    memory_used_mb: i * 10,
                    utilization_pct: Some(u32::try_from(i).unwrap()),
                    power_w: None,
                    alert: false,
                })
            })
            .collect()
    }
}

/// A section the coordinator's owner adds (horos-ref adds its lanes and ingest this way).
struct Lanes;

impl StatusSection for Lanes {
    fn render_html(&self, out: &mut String) {
        out.push_str(
            "<h2>Lanes</h2><table><tr><th>lane</th><th>gate</th></tr>\
                      <tr><td>think</td><td>open</td></tr></table>",
        );
    }
}

fn chat_from(model: &str, text: &str) -> Value {
    let mut b = chat(model, text);
    b["x_client_id"] = json!(CLIENT);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_headless_chromium_shows_models_gpus_queues_and_decisions() {
    let Some(chrome) = tokio::task::spawn_blocking(chromium).await.unwrap() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (up, factory, fleet) = upstream();
    let mut cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_workers: 0, // jobs stay queued
        default_load_s: 30.0,
        ..config()
    };
    cfg.model_concurrency.insert("alpha".into(), 1);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c: Coordinator = Coordinator::builder(cfg, Arc::new(up))
        .gpu_gauges(Arc::new(WithHistory(MonitorGauges(fleet))))
        .status_section(Arc::new(Lanes))
        .start(listener)
        .await
        .unwrap();
    let chat_url = format!("{}/v1/chat/completions", c.url());

    // Two models loaded by calls (decisions `load`), with generous budgets.
    for m in ["alpha", "beta"] {
        let mut b = chat_from(m, "load me");
        b["x_timeout_s"] = json!(60);
        let a = post(&chat_url, &b).await;
        assert_eq!(a.status, 200, "{}", a.text());
    }
    // A cold model whose expected load (30 s) exceeds the call's 1 s: refused, load started.
    let mut b = chat_from("gamma", "too slow");
    b["x_timeout_s"] = json!(1);
    let a = post(&chat_url, &b).await;
    assert_eq!(a.status, 503, "{}", a.text());
    // alpha (one place) made slow: one call holds the place, two wait behind it.
    factory.servers.lock().unwrap()["alpha"].set_latency(Duration::from_secs(20));
    let mut busy = Vec::new();
    for i in 0..3 {
        let (url, body) = (chat_url.clone(), chat_from("alpha", &format!("busy {i}")));
        busy.push(tokio::spawn(async move { post(&url, &body).await }));
    }
    // Async jobs nobody works on (job_workers = 0).
    for i in 0..3 {
        let a = post(
            &format!("{}/v1/jobs", c.url()),
            &json!({"kind": "chat", "request": chat("beta", &format!("job {i}"))}),
        )
        .await;
        assert_eq!(a.status, 202, "{}", a.text());
    }

    // Wait until the control plane's snapshot holds all of it.
    let status_url = format!("{}/api/v1/status", c.url());
    let metrics_url = format!("{}/metrics", c.url());
    wait_until("the snapshot and the queue", || async {
        let s = get(&status_url).await.json();
        let m = get(&metrics_url).await.text();
        let state = |name: &str| {
            s["slots"]
                .as_array()
                .and_then(|v| v.iter().find(|x| x["model"] == name))
                .map(|x| x["state"].clone())
        };
        state("alpha") == Some(json!("READY"))
            && state("beta") == Some(json!("READY"))
            && state("gamma") == Some(json!("LOADING"))
            && s["decisions"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["action"] == "cold_reject"))
            && s["queues"]
                .as_array()
                .is_some_and(|q| q.iter().any(|q| q["ready"] == 3))
            && metric(&m, "horos_coordinator_queue_waiting{model=\"alpha\"}") == Some(2.0)
    })
    .await;
    let snap = get(&status_url).await.json();

    // The browser's view of the page.
    let page = format!("{}/status", c.url());
    let profile = dir.path().join("chromium-profile");
    let (chrome2, profile2, page2) = (chrome.clone(), profile.clone(), page.clone());
    let dom =
        tokio::task::spawn_blocking(move || browse(&chrome2, &profile2, &page2, &["--dump-dom"]))
            .await
            .unwrap();
    assert!(dom.contains("<title>HOROS status</title>"), "{dom}");
    assert!(text(&dom).contains("cloud fallback: allowed"), "{dom}");

    // Models: state, placement, the data-plane queue.
    let models = table(&dom, "Models");
    let (state, gpus, waiting, admitted, loads) = (
        col(&models, "state"),
        col(&models, "GPUs"),
        col(&models, "waiting"),
        col(&models, "admitted"),
        col(&models, "loads"),
    );
    for m in ["alpha", "beta"] {
        let r = row(&models, m);
        assert_eq!(r[state], "READY", "{models:?}");
        assert_eq!(r[loads], "1", "{models:?}");
        // The placement the pool reports, as the page shows it.
        let slot = snap["slots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["model"] == m)
            .unwrap();
        let shown: Vec<String> = slot["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| format!("{} ({} MB)", g["gpu"], g["mb"]))
            .collect();
        assert!(!shown.is_empty(), "{m} has no GPU: {snap}");
        assert_eq!(r[gpus], shown.join(", "), "{models:?}");
    }
    assert_eq!(row(&models, "gamma")[state], "LOADING", "{models:?}");
    assert_eq!(row(&models, "alpha")[waiting], "2", "{models:?}");
    assert_eq!(row(&models, "alpha")[admitted], "1", "{models:?}");

    // GPUs: both, each with the models whose weights are on it.
    let gpu_rows = table(&dom, "GPUs");
    assert_eq!(gpu_rows.len(), 3, "{gpu_rows:?}"); // header + 2 GPUs
    let (name, memory, on) = (
        col(&gpu_rows, "name"),
        col(&gpu_rows, "memory"),
        col(&gpu_rows, "models"),
    );
    let mut placed = 0;
    for gpu in [0u64, 1] {
        let r = row(&gpu_rows, &gpu.to_string());
        assert_eq!(r[name], "Simulated GPU");
        let mut here = 0;
        for s in snap["slots"].as_array().unwrap() {
            for g in s["gpus"].as_array().unwrap() {
                if g["gpu"] == gpu {
                    let entry = format!(
                        "{} ({} MB, {})",
                        s["model"].as_str().unwrap(),
                        g["mb"],
                        s["state"].as_str().unwrap()
                    );
                    assert!(r[on].contains(&entry), "GPU {gpu}: {entry} not in {r:?}");
                    here += g["mb"].as_u64().unwrap();
                    placed += 1;
                }
            }
        }
        let (used, total) = r[memory].trim_end_matches(" MB").split_once(" / ").unwrap();
        assert_eq!(total, GPU_MB.to_string());
        assert!(used.parse::<u64>().unwrap() >= here, "{r:?}");
    }
    assert!(placed >= 2, "alpha and beta are on a GPU: {gpu_rows:?}");

    // Each GPU's last hour as charts the browser drew: 60 points, the alert line.
    for gpu in 0..2 {
        let h = format!("<h3>GPU {gpu}</h3>");
        let at = dom.find(&h).unwrap_or_else(|| panic!("no {h}:\n{dom}"));
        let charts = &dom[at..];
        let charts = &charts[..charts.find("</div>").unwrap()];
        assert_eq!(charts.matches("<svg").count(), 3, "{charts}");
        assert_eq!(charts.matches("data-points=\"60\"").count(), 3, "{charts}");
        assert!(charts.contains("class=\"threshold\""), "{charts}");
        assert!(charts.contains("<polyline"), "{charts}");
    }
    // The owner's section, and the refresh: the page's script swaps in /status?fragment=main.
    let lanes = table(&dom, "Lanes");
    assert_eq!(row(&lanes, "think")[col(&lanes, "gate")], "open");
    assert!(dom.contains("<main id=\"main\">"), "{dom}");
    let fragment = get(&format!("{}/status?fragment=main", c.url()))
        .await
        .text();
    assert!(
        fragment.starts_with("<h1>HOROS status</h1>") && !fragment.contains("<html"),
        "{fragment}"
    );

    // Job queues: three chat jobs waiting.
    let queues = table(&dom, "Job queues");
    let r = row(&queues, "coord.jobs.chat");
    assert_eq!(r[col(&queues, "ready")], "3", "{queues:?}");
    assert_eq!(r[col(&queues, "in flight")], "0", "{queues:?}");

    // Recent decisions, with their reasons.
    let decisions = table(&dom, "Recent decisions");
    let (client, model, decision, reason) = (
        col(&decisions, "client"),
        col(&decisions, "model"),
        col(&decisions, "decision"),
        col(&decisions, "reason"),
    );
    let find = |m: &str, d: &str| {
        decisions
            .iter()
            .find(|r| {
                r.get(model).is_some_and(|x| x == m) && r.get(decision).is_some_and(|x| x == d)
            })
            .unwrap_or_else(|| panic!("no decision {d} for {m}: {decisions:?}"))
    };
    for m in ["alpha", "beta"] {
        let r = find(m, "load");
        assert!(r[reason].starts_with("loaded in "), "{r:?}");
        assert_eq!(r[client], CLIENT);
    }
    let r = find("gamma", "cold_reject");
    assert!(
        r[reason].starts_with("cold: ready in ~30.0 s > ") && r[reason].ends_with("load started"),
        "{r:?}"
    );
    assert_eq!(r[client], CLIENT);

    // A screenshot as a person would see the page (kept under the target dir to look at).
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("horos-coordinator-status.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    let (chrome2, profile2) = (chrome.clone(), profile.clone());
    tokio::task::spawn_blocking(move || {
        browse(
            &chrome2,
            &profile2,
            &page,
            &[&arg, "--window-size=1280,1100"],
        )
    })
    .await
    .unwrap();
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 10_000, "a blank page? {} bytes", png.len());
    eprintln!("screenshot: {}", shot.display());

    for t in busy {
        t.abort();
    }
    c.shutdown(Duration::from_secs(1)).await;
}
