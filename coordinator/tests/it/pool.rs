//! Routing through gpu-alloc's model pool: cold-load budget, learned load times, eviction,
//! keep-alive, task ladders.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{
    CompletionApi, CoordinatorConfig, ModelManifest, Readiness, TaskSpec, UpstreamPool,
};
use http::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_load_beyond_budget_is_an_immediate_503_and_the_load_goes_on() {
    let (up, _f) = pool(&["m"], Duration::from_millis(1500), 24_000, 1000);
    let cfg = CoordinatorConfig {
        default_load_s: 30.0,
        ..config()
    };
    let c = start(cfg, Arc::new(up.clone())).await;
    let url = format!("{}/v1/chat/completions", c.url());

    let mut body = chat("m", "hi");
    body["x_timeout_s"] = json!(1);
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.text());
    // Answered before the load could end (it takes 1.5 s): no waiting mid-load.
    assert_ne!(up.readiness("m"), Readiness::Ready);
    assert_eq!(a.headers["retry-after"], "30");
    let e = &a.json()["error"];
    assert_eq!(e["code"], "model_loading");
    assert_eq!(e["model"], "m");
    let eta = e["estimated_ready_s"].as_f64().unwrap();
    assert!(eta > 29.0 && eta <= 30.0, "{eta}");
    assert!(e["estimated_ready_at_ms"].as_u64().is_some());

    // The load started by the refusal completes in the background.
    wait_until("model ready", || async {
        up.readiness("m") == Readiness::Ready
    })
    .await;
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let text = get(&format!("{}/metrics", c.url())).await.text();
    assert_eq!(
        metric(&text, "horos_coordinator_model_loads_total{model=\"m\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &text,
            "horos_coordinator_cold_rejections_total{model=\"m\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &text,
            "horos_coordinator_model_load_seconds_count{model=\"m\"}"
        ),
        Some(1.0)
    );

    // The learned load time (~1.5 s) now fits a 20 s budget: a cold call waits for its load.
    assert!(up.pool().unload("m").await.unwrap());
    let mut body = chat("m", "again");
    body["x_timeout_s"] = json!(20);
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["choices"][0]["message"]["content"], "again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_model_evicts_the_first_when_memory_is_short() {
    // One 1000 MB GPU (300 MB for the driver), models of 600 MB: one at a time.
    let (up, f) = pool(&["a", "b"], Duration::from_millis(50), 1000, 600);
    let cfg = CoordinatorConfig {
        default_load_s: 5.0,
        ..config()
    };
    let c = start(cfg, Arc::new(up.clone())).await;
    let url = format!("{}/v1/chat/completions", c.url());
    assert_eq!(post(&url, &chat("a", "1")).await.status, StatusCode::OK);
    assert_eq!(up.readiness("a"), Readiness::Ready);
    // Eviction takes only idle models of lower priority (larger number) than the newcomer.
    let mut body = chat("b", "2");
    body["x_priority"] = json!(1);
    let r = post(&url, &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(up.readiness("b"), Readiness::Ready);
    assert_ne!(up.readiness("a"), Readiness::Ready);
    assert_eq!(f.servers.lock().unwrap()["b"].requests().len(), 1);

    let text = get(&format!("{}/metrics", c.url())).await.text();
    assert_eq!(
        metric(&text, "horos_coordinator_model_swaps_total{model=\"b\"}"),
        Some(1.0)
    );
    wait_until("decision on the status page", || async {
        get(&format!("{}/status", c.url()))
            .await
            .text()
            .contains("swapped out")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_zero_unloads_right_after_the_call() {
    let (up, _f) = pool(&["m"], Duration::from_millis(10), 24_000, 1000);
    let c = start(config(), Arc::new(up.clone())).await;
    let mut body = chat("m", "short");
    body["keep_alive"] = json!(0);
    let a = post(&format!("{}/v1/chat/completions", c.url()), &body).await;
    assert_eq!(a.status, StatusCode::OK);
    wait_until("unloaded by keep_alive", || async {
        up.readiness("m") != Readiness::Ready
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ladder_prefers_a_warm_fallback_unless_the_primary_is_pinned() {
    let (up, f) = pool(&["big", "small"], Duration::from_millis(10), 24_000, 1000);
    let mut cfg = config();
    cfg.default_load_s = 1.0;
    cfg.tasks.insert(
        "classify".into(),
        TaskSpec {
            models: vec!["big".into(), "small".into()],
            ..TaskSpec::default()
        },
    );
    cfg.tasks.insert(
        "extract".into(),
        TaskSpec {
            models: vec!["big".into(), "small".into()],
            pin_primary: true,
            ..TaskSpec::default()
        },
    );
    let c = start(cfg, Arc::new(up.clone())).await;
    let url = format!("{}/v1/chat/completions", c.url());
    assert_eq!(
        post(&url, &chat("small", "warm up")).await.status,
        StatusCode::OK
    );

    let mut body = chat("ignored", "classify me");
    body["x_task"] = json!("classify");
    assert_eq!(post(&url, &body).await.status, StatusCode::OK);
    assert_eq!(f.servers.lock().unwrap()["small"].requests().len(), 2);
    assert_ne!(up.readiness("big"), Readiness::Ready);

    let a = post(&url, &chat("task:extract", "extract me")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["model"], "big");
    assert_eq!(f.servers.lock().unwrap()["big"].requests().len(), 1);

    let mut body = chat("x", "y");
    body["x_task"] = json!("nope");
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.json()["error"]["code"], "task_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_longer_than_the_stay_warm_time_keeps_the_model_loaded() {
    use horos_gpu_alloc::pool::ModelSpec;
    let (up, _f) = pool(&[], Duration::from_millis(10), 24_000, 1000);
    for id in ["kept", "default"] {
        up.register(ModelSpec {
            id: id.into(),
            stay_warm_s: Some(1),
            facts: horos_gpu_alloc::estimate::ModelFacts {
                name: id.into(),
                explicit_mb: Some(1000),
                ..Default::default()
            },
            ..ModelSpec::default()
        });
    }
    let c = start(config(), Arc::new(up.clone())).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let mut body = chat("kept", "stay");
    body["keep_alive"] = json!("10m");
    assert_eq!(post(&url, &body).await.status, StatusCode::OK);
    assert_eq!(
        post(&url, &chat("default", "go")).await.status,
        StatusCode::OK
    );
    // The model without keep-alive leaves after its 1 s stay-warm time...
    wait_until("default unloaded", || async {
        up.readiness("default") != Readiness::Ready
    })
    .await;
    // ... and a few housekeeping rounds later the one asked to stay is still there.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(up.readiness("kept"), Readiness::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_gpu_room_goes_to_the_most_important_waiter_first() {
    use horos_gpu_alloc::pool::ModelSpec;
    // Room for one model. `slow` serves a long call; `low` (priority 9) then `high` (priority
    // 1) wait for room. When the call ends, `high` is loaded first though it came later.
    let (up, _f) = pool(&["low", "high"], Duration::from_millis(10), 1000, 600);
    up.register(ModelSpec {
        id: "slow".into(),
        // Long enough for both waiters to be seen waiting on a busy machine.
        settings: json!({"latency_ms": 8000}),
        facts: horos_gpu_alloc::estimate::ModelFacts {
            name: "slow".into(),
            explicit_mb: Some(600),
            ..Default::default()
        },
        ..ModelSpec::default()
    });
    let c = start(config(), Arc::new(up.clone())).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let call = |model: &str, priority: i32| {
        let (url, mut body) = (url.clone(), chat(model, model));
        body["x_priority"] = json!(priority);
        // Each model unloads right after its call, so the next can load: a waiter may only
        // evict less important models.
        body["keep_alive"] = json!(0);
        tokio::spawn(async move {
            let a = post(&url, &body).await;
            let done = std::time::Instant::now();
            assert_eq!(a.status, StatusCode::OK, "{}", a.text());
            done
        })
    };
    let status_url = format!("{}/api/v1/status", c.url());
    let waiting_for_room = |model: &'static str| {
        let status_url = status_url.clone();
        async move {
            get(&status_url).await.json()["decisions"]
                .as_array()
                .is_some_and(|d| {
                    d.iter()
                        .any(|d| d["model"] == model && d["action"] == "wait_vram")
                })
        }
    };

    let slow = call("slow", 10);
    wait_until("slow serving", || async {
        up.slots()
            .iter()
            .any(|s| s.model == "slow" && s.active == 1)
    })
    .await;
    let low = call("low", 9);
    wait_until("low waiting for room", || waiting_for_room("low")).await;
    let high = call("high", 1);
    wait_until("high waiting for room", || waiting_for_room("high")).await;

    slow.await.unwrap();
    let high_done = high.await.unwrap();
    let low_done = low.await.unwrap();
    assert!(
        high_done < low_done,
        "the later, more important request was served second"
    );
}

/// A model's upstream declares the paths its server serves (an image worker: images only): a
/// chat sent to it, or an image request sent to a chat model, is refused with a 400 that names
/// the model and what it serves, before anything is loaded; a task's ladder skips such a rung;
/// a chat the manifest renders to a completion endpoint the server lacks is refused as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_path_its_model_does_not_serve_is_refused_before_any_load() {
    let (up, f) = pool(
        &["sd", "chat", "raw"],
        Duration::from_millis(50),
        24_000,
        1000,
    );
    up.declare_paths("sd", ["/v1/images/generations"]);
    up.declare_paths("chat", ["/v1/chat/completions", "/v1/completions"]);
    up.declare_paths("raw", ["/v1/chat/completions", "/v1/completions"]);
    let mut cfg = config();
    cfg.tasks.insert(
        "draw-or-talk".into(),
        TaskSpec {
            models: vec!["sd".into(), "chat".into()],
            ..TaskSpec::default()
        },
    );
    // `raw`'s chats are rendered for llama-server's /completion, which its server lacks.
    cfg.manifest.insert(
        "raw".into(),
        ModelManifest {
            template: Some("chatml".into()),
            completion_api: CompletionApi::Llama,
            ..ModelManifest::default()
        },
    );
    let c = start(cfg, Arc::new(up.clone())).await;
    let chats = format!("{}/v1/chat/completions", c.url());
    let images = format!("{}/v1/images/generations", c.url());

    let a = post(&chats, &chat("sd", "hi")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    let e = &a.json()["error"];
    assert_eq!(e["code"], "unsupported_endpoint");
    assert_eq!(e["param"], "model");
    assert_eq!(e["serves"], json!(["/v1/images/generations"]));
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("`sd`")
            && message.contains("/v1/chat/completions")
            && message.contains("/v1/images/generations"),
        "{message}"
    );

    let a = post(&images, &json!({"model": "chat", "prompt": "a cat"})).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    let message = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("`chat`") && message.contains("/v1/images/generations"),
        "{message}"
    );

    let a = post(&chats, &chat("raw", "hi")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    let message = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("/completion:"), "{message}");

    // Nothing was loaded by the refused requests.
    assert!(f.servers.lock().unwrap().is_empty());
    for m in ["sd", "chat", "raw"] {
        assert_eq!(up.readiness(m), Readiness::Cold, "{m}");
    }

    // A task's chat skips the image model (its first rung) and is answered by the chat model.
    let a = post(&chats, &chat("task:draw-or-talk", "hello")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["choices"][0]["message"]["content"], "hello");
    assert!(!f.servers.lock().unwrap().contains_key("sd"));
    assert_eq!(up.readiness("sd"), Readiness::Cold);
    // An undeclared model (a plain command) takes every path.
    assert_eq!(up.paths("nope"), None);
}

/// What a coordinator measured of a model's cold load is kept in its state file: restarted, it
/// answers a cold call's 503 with the measured time, not the configured default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_load_time_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || CoordinatorConfig {
        default_load_s: 30.0,
        state_path: Some(dir.path().join("state.db")),
        job_workers: 0,
        ..config()
    };
    let (up, _f) = pool(&["m"], Duration::from_millis(1200), 24_000, 1000);
    let c = start(cfg(), Arc::new(up.clone())).await;
    // 30 s expected, 1 s of budget: refused, and the load it started is measured.
    let mut body = chat("m", "hi");
    body["x_timeout_s"] = json!(1);
    let a = post(&format!("{}/v1/chat/completions", c.url()), &body).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.text());
    assert_eq!(a.json()["error"]["estimated_ready_s"], 30.0);
    let metrics = format!("{}/metrics", c.url());
    wait_until("the load measured", || async {
        let text = get(&metrics).await.text();
        metric(
            &text,
            "horos_coordinator_model_load_seconds_count{model=\"m\"}",
        ) == Some(1.0)
    })
    .await;
    assert_eq!(up.readiness("m"), Readiness::Ready);
    c.shutdown(Duration::from_secs(1)).await;

    // A new coordinator on the same file, its model cold: the 503's estimate is the measured
    // load (about 1.2 s, never under the second a load's end takes), not the 30 s default.
    let (up, _f) = pool(&["m"], Duration::from_millis(1200), 24_000, 1000);
    let c = start(cfg(), Arc::new(up)).await;
    body["x_timeout_s"] = json!(0.5);
    let a = post(&format!("{}/v1/chat/completions", c.url()), &body).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.text());
    let eta = a.json()["error"]["estimated_ready_s"].as_f64().unwrap();
    assert!(
        (1.0..5.0).contains(&eta),
        "the learned load time is not used: {eta}"
    );
    assert!(
        a.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            <= 5
    );
    c.shutdown(Duration::from_secs(1)).await;
}

/// Where keys are configured, `keep_alive` may unload a model other callers share only for a
/// key with `may_unload = true`: a tenant's `keep_alive: 0` leaves the model loaded, the
/// operator's unloads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_key_that_may_unload_unloads_a_shared_model() {
    use sha2::Digest as _;
    let sha = |k: &str| -> String {
        sha2::Sha256::digest(k.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let key = |secret: &str, may_unload: bool| horos_coordinator::VirtualKey {
        key_sha256: Some(sha(secret)),
        may_unload,
        ..horos_coordinator::VirtualKey::default()
    };
    let (up, _f) = pool(&["m"], Duration::from_millis(10), 24_000, 1000);
    let cfg = CoordinatorConfig {
        keys: std::collections::BTreeMap::from([
            ("tenant".to_owned(), key("sk-tenant", false)),
            ("operator".to_owned(), key("sk-operator", true)),
        ]),
        ..config()
    };
    let c = start(cfg, Arc::new(up.clone())).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let as_key = |secret: &'static str, body: serde_json::Value| {
        let url = url.clone();
        async move {
            let auth = format!("Bearer {secret}");
            call(
                http::Method::POST,
                &url,
                Some(serde_json::to_vec(&body).unwrap()),
                &[("authorization", auth.as_str())],
            )
            .await
        }
    };
    let mut body = chat("m", "short");
    body["keep_alive"] = json!(0);
    assert_eq!(
        as_key("sk-tenant", body.clone()).await.status,
        StatusCode::OK
    );
    // Several housekeeping rounds (every 100 ms here): still loaded.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        up.readiness("m"),
        Readiness::Ready,
        "a tenant's keep_alive: 0 ignored"
    );
    assert_eq!(as_key("sk-operator", body).await.status, StatusCode::OK);
    wait_until("unloaded by the operator's keep_alive", || async {
        up.readiness("m") != Readiness::Ready
    })
    .await;
    c.shutdown(Duration::from_secs(1)).await;
}
