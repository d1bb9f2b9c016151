//! The control plane (runtime config, metrics, status page) and async jobs.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{CoordinatorConfig, GpuGauge, GpuGauges, HistoryPoint, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer, Fault};
use http::{Method, StatusCode};
use serde_json::{Value, json};

async fn fake(cfg: FakeConfig) -> FakeServer {
    FakeServer::start(cfg).await.expect("fake upstream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_is_persisted_across_restarts_and_guarded_by_the_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let up = fake(FakeConfig::default()).await;
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        api_key: Some("s3cret".into()),
        ..config()
    };
    let upstream = Arc::new(StaticUpstream::new().with("m", up.url()));
    let c = start(cfg.clone(), upstream.clone()).await;
    let url = format!("{}/api/v1/config", c.url());
    let auth = [("authorization", "Bearer s3cret")];

    let a = get(&url).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(a.json()["error"]["type"], "authentication_error");
    let a = call(Method::GET, &url, None, &[("authorization", "Bearer nope")]).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let a = call(Method::GET, &url, None, &auth).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json(), json!({"allowCloudFallback": true}));
    // The scheme's name is case-insensitive (RFC 7235); the token is not.
    for scheme in ["bearer s3cret", "BEARER s3cret"] {
        let a = call(Method::GET, &url, None, &[("authorization", scheme)]).await;
        assert_eq!(a.status, StatusCode::OK, "{scheme}");
    }
    for wrong in ["Bearer S3CRET", "Basic s3cret", "Bearers3cret"] {
        let a = call(Method::GET, &url, None, &[("authorization", wrong)]).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{wrong}");
    }

    let put = |body: &'static str, headers: &'static [(&'static str, &'static str)]| {
        let u = url.clone();
        async move { call(Method::PUT, &u, Some(body.as_bytes().to_vec()), headers).await }
    };
    let a = put("{\"allowCloudFallback\": false}", &[]).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let a = put(
        "{\"allowCloudFallback\": \"no\"}",
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = put(
        "{\"allowCloudFallback\": false}",
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json(), json!({"allowCloudFallback": false}));
    drop(c);

    // A new process on the same file sees the stored value, not the configured default.
    let c = start(cfg, upstream).await;
    let url = format!("{}/api/v1/config", c.url());
    let a = call(Method::GET, &url, None, &auth).await;
    assert_eq!(a.json(), json!({"allowCloudFallback": false}));
    assert!(
        get(&format!("{}/status", c.url()))
            .await
            .text()
            .contains("cloud fallback: <b>blocked</b>")
    );
}

/// Submits a job (`POST /v1/jobs`, which must accept it); its id.
async fn submit_job(base: &str, job: &Value) -> i64 {
    let a = post(&format!("{base}/v1/jobs"), job).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text());
    a.json()["id"]
        .as_i64()
        .expect("the answer names the job id")
}

async fn job_state(base: &str, id: i64) -> Value {
    let a = get(&format!("{base}/v1/jobs/{id}")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    a.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_jobs_complete_and_errors_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let up = fake(FakeConfig::default()).await;
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    let id = submit_job(
        &base,
        &json!({"kind": "chat", "request": chat("m", "job text"), "priority": 1}),
    )
    .await;
    wait_until("job done", || async {
        job_state(&base, id).await["state"] == "succeeded"
    })
    .await;
    let v = job_state(&base, id).await;
    assert_eq!(v["kind"], "chat");
    assert_eq!(v["result"]["choices"][0]["message"]["content"], "job text");

    let a = post(
        &format!("{base}/v1/jobs"),
        &json!({"kind": "embeddings", "request": {"model": "m", "input": "x", "x_client_id": "batch"}}),
    )
    .await;
    let id = a.json()["id"].as_i64().unwrap();
    wait_until("embedding job done", || async {
        job_state(&base, id).await["state"] == "succeeded"
    })
    .await;
    assert!(job_state(&base, id).await["result"]["data"][0]["embedding"].is_array());

    // A request the upstream refuses as bad fails at once, with the upstream's error.
    up.set_fault(Fault::Status(400), Some(1));
    let a = post(
        &format!("{base}/v1/jobs"),
        &json!({"kind": "chat", "request": chat("m", "bad")}),
    )
    .await;
    let id = a.json()["id"].as_i64().unwrap();
    wait_until("job failed", || async {
        job_state(&base, id).await["state"] == "failed"
    })
    .await;
    assert_eq!(job_state(&base, id).await["status_code"], 400);

    for bad in [
        json!({"kind": "dance", "request": {}}),
        json!({"kind": "chat"}),
    ] {
        let a = post(&format!("{base}/v1/jobs"), &bad).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
    }
    assert_eq!(
        get(&format!("{base}/v1/jobs/999999")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let up = fake(FakeConfig::default()).await;
    let upstream = Arc::new(StaticUpstream::new().with("m", up.url()));
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        ..config()
    };
    // A first process accepts the jobs but has no worker, then goes away.
    let c = start(
        CoordinatorConfig {
            job_workers: 0,
            ..cfg.clone()
        },
        upstream.clone(),
    )
    .await;
    let a = post(
        &format!("{}/v1/jobs", c.url()),
        &json!({"kind": "chat", "request": chat("m", "persisted")}),
    )
    .await;
    let id = a.json()["id"].as_i64().unwrap();
    assert_eq!(job_state(&c.url(), id).await["state"], "queued");
    drop(c);

    // A second one, on the same file, runs it.
    let c = start(cfg, upstream).await;
    let base = c.url();
    wait_until("job done after restart", || async {
        job_state(&base, id).await["state"] == "succeeded"
    })
    .await;
    assert_eq!(
        job_state(&base, id).await["result"]["choices"][0]["message"]["content"],
        "persisted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_by_a_process_that_dies_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let hang = fake(FakeConfig {
        fault: Fault::Hang,
        ..FakeConfig::default()
    })
    .await;
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_visibility_s: 1,
        ..config()
    };
    let c = start(
        cfg.clone(),
        Arc::new(StaticUpstream::new().with("m", hang.url())),
    )
    .await;
    let a = post(
        &format!("{}/v1/jobs", c.url()),
        &json!({"kind": "chat", "request": chat("m", "taken over")}),
    )
    .await;
    let id = a.json()["id"].as_i64().unwrap();
    wait_until("job running", || async { hang.requests().len() == 1 }).await;
    assert_eq!(job_state(&c.url(), id).await["state"], "running");
    drop(c); // dies mid-job: no release, the lease must expire

    let up = fake(FakeConfig::default()).await;
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    wait_until("job taken over", || async {
        job_state(&base, id).await["state"] == "succeeded"
    })
    .await;
    assert_eq!(up.requests().len(), 1);
}

struct TwoGpus;

impl GpuGauges for TwoGpus {
    fn read(&self) -> Vec<GpuGauge> {
        (0..2)
            .map(|i| GpuGauge {
                index: i,
                name: "Test GPU".into(),
                temperature_c: Some(60.0 + f64::from(i)),
                memory_used_mb: 1000,
                memory_total_mb: 24_000,
                utilization_pct: Some(50),
                // GPU 1 is in temperature alert, raised once.
                alert_active: Some(i == 1),
                alerts_total: Some(u64::from(i)),
                alert_threshold_c: Some(80.0),
            })
            .collect()
    }

    fn history(&self) -> Vec<HistoryPoint> {
        vec![HistoryPoint {
            at_ms: 1_000,
            gpu: 1,
            temperature_c: Some(61.0),
            memory_used_mb: 1000,
            utilization_pct: Some(50),
            power_w: None,
            alert: true,
        }]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_page_show_requests_queues_and_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let board = horos_coordinator::ModeBoard::new();
    board.set(0, "vision", "serving");
    board.set(1, "think", "switching to <embed>");
    let up = fake(FakeConfig::default()).await;
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_workers: 0,
        ..config()
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = horos_coordinator::Coordinator::builder(
        cfg,
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .gpu_gauges(Arc::new(TwoGpus))
    .modes(board.clone())
    .start(l)
    .await
    .unwrap();
    let base = c.url();
    // Another component's decision (an allocator's) is listed with the coordinator's.
    c.decision_log()
        .record("gpu0", "switch", "think -> vision: <starvation> bound");
    let mut body = chat("m", "count me");
    body["x_client_id"] = json!("dash.board");
    assert_eq!(
        post(&format!("{base}/v1/chat/completions"), &body)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        post(&format!("{base}/v1/chat/completions"), &chat("zzz", "x"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    post(
        &format!("{base}/v1/jobs"),
        &json!({"kind": "embeddings", "request": {"model": "m", "input": "q"}}),
    )
    .await;

    wait_until("snapshot with the queued job", || async {
        let t = get(&format!("{base}/metrics")).await.text();
        metric(
            &t,
            "horos_coordinator_job_queue_depth{queue=\"coord.jobs.embeddings\",state=\"ready\"}",
        ) == Some(1.0)
    })
    .await;
    let t = get(&format!("{base}/metrics")).await.text();
    for series in [
        "horos_coordinator_request_duration_seconds_count{route=\"chat\",model=\"m\"} 1",
        "horos_coordinator_requests_total{route=\"chat\",model=\"m\",status=\"2xx\"} 1",
        "horos_coordinator_requests_total{route=\"chat\",model=\"_other\",status=\"4xx\"} 1",
        "horos_coordinator_requests_in_flight{route=\"chat\"} 0",
        "horos_coordinator_queue_waiting{model=\"m\"} 0",
        "horos_coordinator_model_loads_total{model=\"m\"} 0",
        "horos_coordinator_model_swaps_total{model=\"m\"} 0",
        "horos_coordinator_dead_letters{queue=\"coord.jobs.embeddings\"} 0",
        "horos_coordinator_job_queue_depth{queue=\"coord.jobs.chat\",state=\"ready\"} 0",
        "horos_coordinator_jobs_submitted_total 1",
        "horos_gpu_temperature_celsius{gpu=\"1\"} 61",
        "horos_gpu_memory_total_bytes{gpu=\"0\"} 25165824000",
        "horos_gpu_mode{gpu=\"0\",mode=\"vision\"} 1",
        "horos_gpu_mode{gpu=\"1\",mode=\"think\"} 1",
        "horos_gpu_utilization_ratio{gpu=\"0\"} 0.5",
        "horos_gpu_temperature_alert{gpu=\"0\"} 0",
        "horos_gpu_temperature_alert{gpu=\"1\"} 1",
        "horos_gpu_temperature_alerts_total{gpu=\"1\"} 1",
        "# TYPE horos_gpu_temperature_alerts_total counter",
    ] {
        assert!(t.contains(series), "missing `{series}` in\n{t}");
    }
    assert!(t.contains("# TYPE horos_coordinator_request_duration_seconds histogram"));

    let a = get(&format!("{base}/status")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        a.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = a.text();
    for needle in [
        "<h2>Models</h2>",
        ">m<",
        "coord.jobs.embeddings",
        "Test GPU",
        "61 °C",
        "<td class=\"alert\">ALERT (1 raised)</td>",
        "<td>ok (0 raised)</td>",
        "Recent decisions",
    ] {
        assert!(page.contains(needle), "missing `{needle}`");
    }
    assert!(
        page.contains("<h2>Modes</h2>") && page.contains("switching to &lt;embed&gt;"),
        "no modes table"
    );
    assert!(
        page.contains("think -&gt; vision: &lt;starvation&gt; bound"),
        "the posted decision is missing or unescaped"
    );
    let snap = get(&format!("{base}/api/v1/status")).await.json();
    assert_eq!(snap["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(snap["gpus"][1]["alert_active"], json!(true));
    assert!(
        snap.get("gpu_history").is_none(),
        "the history has its own route"
    );
    let gpus = get(&format!("{base}/api/v1/gpus")).await.json();
    assert_eq!(gpus["gpus"][1]["alerts_total"], json!(1));
    assert_eq!(
        gpus["history"],
        json!([{"at_ms": 1000, "gpu": 1, "temperature_c": 61.0, "memory_used_mb": 1000,
                "utilization_pct": 50, "power_w": null, "alert": true}])
    );
    assert!(
        snap["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["model"] == "gpu0" && d["action"] == "switch"),
        "{snap}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_answers_while_the_data_plane_is_saturated() {
    let hang = fake(FakeConfig {
        fault: Fault::Hang,
        ..FakeConfig::default()
    })
    .await;
    let cfg = CoordinatorConfig {
        per_model_concurrency: 2,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", hang.url()))).await;
    let base = c.url();
    let mut calls = Vec::new();
    for i in 0..20 {
        let u = format!("{base}/v1/chat/completions");
        calls.push(tokio::spawn(async move {
            post(&u, &chat("m", &format!("r{i}"))).await
        }));
    }
    wait_until("saturated", || async {
        let t = get(&format!("{base}/metrics")).await.text();
        metric(&t, "horos_coordinator_queue_waiting{model=\"m\"}") == Some(18.0)
            && metric(&t, "horos_coordinator_model_running{model=\"m\"}") == Some(2.0)
    })
    .await;
    for _ in 0..10 {
        assert_eq!(get(&format!("{base}/status")).await.status, StatusCode::OK);
        assert_eq!(
            get(&format!("{base}/api/v1/config")).await.status,
            StatusCode::OK
        );
    }
    for t in calls {
        t.abort();
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_gives_running_jobs_back_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let hang = fake(FakeConfig {
        fault: Fault::Hang,
        ..FakeConfig::default()
    })
    .await;
    // A visibility far longer than the test: only an explicit release can hand the job over.
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_visibility_s: 3600,
        ..config()
    };
    let c = start(
        cfg.clone(),
        Arc::new(StaticUpstream::new().with("m", hang.url())),
    )
    .await;
    let a = post(
        &format!("{}/v1/jobs", c.url()),
        &json!({"kind": "chat", "request": chat("m", "handed over")}),
    )
    .await;
    let id = a.json()["id"].as_i64().unwrap();
    wait_until("job running", || async { hang.requests().len() == 1 }).await;
    c.shutdown(Duration::from_secs(1)).await;

    let up = fake(FakeConfig::default()).await;
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    wait_until("job done by the next process", || async {
        job_state(&base, id).await["state"] == "succeeded"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_run_most_important_first() {
    let dir = tempfile::tempdir().unwrap();
    let up = fake(FakeConfig::default()).await;
    let upstream = Arc::new(StaticUpstream::new().with("m", up.url()));
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_workers: 1,
        ..config()
    };
    let c = start(
        CoordinatorConfig {
            job_workers: 0,
            ..cfg.clone()
        },
        upstream.clone(),
    )
    .await;
    let mut ids = Vec::new();
    for (text, prio) in [("low", json!(9)), ("none", Value::Null), ("high", json!(0))] {
        let mut req = chat("m", text);
        if text == "high" {
            req["x_priority"] = json!(-3); // overridden by the job's own priority
        }
        let a = post(
            &format!("{}/v1/jobs", c.url()),
            &json!({"kind": "chat", "request": req, "priority": prio}),
        )
        .await;
        ids.push(a.json()["id"].as_i64().unwrap());
    }
    drop(c);
    let c = start(cfg, upstream).await;
    let base = c.url();
    for id in ids {
        wait_until("job done", || async {
            job_state(&base, id).await["state"] == "succeeded"
        })
        .await;
    }
    let order: Vec<String> = up
        .requests()
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_str(&r.body).unwrap();
            v["messages"][0]["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(order, vec!["high", "none", "low"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedicated_control_listener_serves_only_the_control_plane() {
    let up = fake(FakeConfig::default()).await;
    let cfg = CoordinatorConfig {
        api_key: Some("k".into()),
        ..config()
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = horos_coordinator::Coordinator::builder(
        cfg,
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .control_listener(control)
    .start(l)
    .await
    .unwrap();
    let ctl = format!("http://{}", c.control_addr().unwrap());
    assert_eq!(
        post(&format!("{}/v1/chat/completions", c.url()), &chat("m", "x"))
            .await
            .status,
        StatusCode::OK
    );
    wait_until("metrics on the control port", || async {
        let t = get(&format!("{ctl}/metrics")).await.text();
        t.contains("horos_coordinator_requests_total{route=\"chat\",model=\"m\",status=\"2xx\"} 1")
    })
    .await;
    assert!(
        get(&format!("{ctl}/status"))
            .await
            .text()
            .contains("HOROS status")
    );
    assert_eq!(
        get(&format!("{ctl}/api/v1/config")).await.status,
        StatusCode::UNAUTHORIZED
    );
    let a = call(
        Method::GET,
        &format!("{ctl}/api/v1/config"),
        None,
        &[("authorization", "Bearer k")],
    )
    .await;
    assert_eq!(a.json(), json!({"allowCloudFallback": true}));
    let a = post(&format!("{ctl}/v1/chat/completions"), &chat("m", "x")).await;
    assert_eq!(
        a.status,
        StatusCode::NOT_FOUND,
        "no data plane on the control port"
    );
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_upstream_stalls_mid_answer_ends_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    // Headers and half the answer, then silence on an open connection.
    let up = fake(FakeConfig {
        fault: Fault::StallMidStream(0),
        ..FakeConfig::default()
    })
    .await;
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_budget_s: 1.0,
        job_max_attempts: 1,
        job_visibility_s: 1,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    let id = submit_job(
        &base,
        &json!({"kind": "chat", "request": chat("m", "never finished")}),
    )
    .await;
    // Its lease is renewed while it runs, so only the budget can end it.
    wait_until("the stalled job to fail", || async {
        job_state(&base, id).await["state"] == "failed"
    })
    .await;
    let v = job_state(&base, id).await;
    assert!(
        v.to_string().contains("budget"),
        "the failure does not name the budget: {v}"
    );
}

/// A pool that knows one model and never has room for it.
struct NeverRoom;

#[async_trait::async_trait]
impl horos_coordinator::UpstreamPool for NeverRoom {
    fn models(&self) -> Vec<String> {
        vec!["huge".into()]
    }
    fn readiness(&self, model: &str) -> horos_coordinator::Readiness {
        if model == "huge" {
            horos_coordinator::Readiness::Cold
        } else {
            horos_coordinator::Readiness::Unknown
        }
    }
    async fn acquire(
        &self,
        model: &str,
        _priority: i32,
    ) -> Result<horos_coordinator::UpstreamLease, horos_coordinator::UpstreamError> {
        Err(horos_coordinator::UpstreamError::NoCapacity(format!(
            "{model} needs more VRAM than the GPUs have"
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_can_never_start_fails_after_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_budget_s: 0.5,
        job_max_attempts: 1,
        ..config()
    };
    let c = start(cfg, Arc::new(NeverRoom)).await;
    let base = c.url();
    let id = submit_job(
        &base,
        &json!({"kind": "chat", "request": chat("huge", "hello")}),
    )
    .await;
    // Each try is answered "no room, retry later"; past its budget that costs an attempt.
    wait_until("the job that can never start to fail", || async {
        job_state(&base, id).await["state"] == "failed"
    })
    .await;
    let v = job_state(&base, id).await;
    assert!(v.to_string().contains("job budget"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_job_kinds_leave_every_worker_to_the_busy_one() {
    // Four workers, three job kinds, only chat jobs: all four run at once. (Idle kinds used
    // to hold a worker each for up to 500 ms while they waited for work, so the third and
    // fourth chat jobs started late and at most three ran together.)
    let dir = tempfile::tempdir().unwrap();
    // Each call long enough for the four submissions to reach the workers on a busy machine.
    let up = fake(FakeConfig {
        latency: Duration::from_millis(3000),
        slots: 8,
        ..FakeConfig::default()
    })
    .await;
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_workers: 4,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            submit_job(
                &base,
                &json!({"kind": "chat", "request": chat("m", &format!("job {i}"))}),
            )
            .await,
        );
    }
    for id in ids {
        wait_until("job done", || async {
            job_state(&base, id).await["state"] == "succeeded"
        })
        .await;
    }
    assert_eq!(up.stats().max_running, 4, "{:?}", up.stats());
}

/// A dead letter of a watched queue is on the status page with its reason, and is put back in
/// its queue through the admin API: refused without the key, done with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_shown_and_requeued_behind_the_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let up = fake(FakeConfig::default()).await;
    let db = dir.path().join("state.db");
    let queue = squeueha::Queue::open(&db).unwrap();
    let id = queue
        .enqueue("think", squeueha::NewJob::new("summarise <this>"))
        .unwrap()
        .id();
    let job = queue
        .poll_batch("think", 1, std::time::Duration::from_secs(60))
        .unwrap()
        .remove(0);
    queue.bury(job.lease, "upstream said <400>").unwrap();
    let cfg = CoordinatorConfig {
        state_path: Some(db),
        api_key: Some("s3cret".into()),
        watch_queues: vec!["think".into()],
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let page_url = format!("{}/status", c.url());
    let mut page = String::new();
    for _ in 0..100 {
        page = get(&page_url).await.text();
        if page.contains("<h2>Dead letters</h2>") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        page.contains(&format!("<tr><td>{id}</td><td>think</td>"))
            && page.contains("upstream said &lt;400&gt;")
            && page.contains(&format!("requeue({id})")),
        "{page}"
    );
    let url = format!("{}/api/v1/dead/{id}/requeue", c.url());
    let a = call(Method::POST, &url, None, &[]).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text());
    assert_eq!(queue.stats("think").unwrap().dead, 1);
    let a = call(
        Method::POST,
        &url,
        None,
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["requeued"], id);
    let s = queue.stats("think").unwrap();
    assert_eq!((s.dead, s.ready), (0, 1), "{s:?}");
    let a = call(
        Method::POST,
        &url,
        None,
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text());
}

/// An owner's admin route (`/api/v1/NAME/...`) answers behind the admin key, with the request's
/// method, the rest of its path and its JSON body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_admin_route_is_served_behind_the_key() {
    struct Echo;

    #[async_trait::async_trait]
    impl horos_coordinator::AdminExtension for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        async fn call(
            &self,
            method: &Method,
            rest: &str,
            body: Value,
        ) -> horos_coordinator::AdminAnswer {
            // A route its table serves under GET only: the table's 405.
            if rest == "/read-only" && method != Method::GET {
                let miss = horos_server_control::routes::Miss::MethodNotAllowed {
                    allow: "GET".into(),
                };
                return miss.answer(method, rest);
            }
            (
                StatusCode::OK,
                json!({"method": method.as_str(), "rest": rest, "body": body}),
            )
        }
    }

    let up = fake(FakeConfig::default()).await;
    let cfg = CoordinatorConfig {
        api_key: Some("s3cret".into()),
        ..config()
    };
    let upstream = Arc::new(StaticUpstream::new().with("m", up.url()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = horos_coordinator::Coordinator::builder(cfg, upstream)
        .admin_extension(Arc::new(Echo))
        .start(listener)
        .await
        .unwrap();
    let url = format!("{}/api/v1/echo/a/b", c.url());
    let a = call(Method::PUT, &url, Some(b"{\"x\":1}".to_vec()), &[]).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let auth = [("authorization", "Bearer s3cret")];
    let a = call(Method::PUT, &url, Some(b"{\"x\":1}".to_vec()), &auth).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(
        a.json(),
        json!({"method": "PUT", "rest": "/a/b", "body": {"x": 1}})
    );
    let a = call(Method::PUT, &url, Some(b"not json".to_vec()), &auth).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    // An extension's 405 carries the Allow header its table names.
    let read_only = format!("{}/api/v1/echo/read-only", c.url());
    let a = call(Method::POST, &read_only, None, &auth).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{}", a.text());
    assert_eq!(a.headers["allow"], "GET");
    // A name that only starts like it is not its route.
    let a = call(
        Method::GET,
        &format!("{}/api/v1/echoes", c.url()),
        None,
        &auth,
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}
