//! End-to-end tests with a real client: the official `openai` Python package (from PyPI)
//! drives a coordinator started in-process on 127.0.0.1:0, through
//! `coordinator/tests/py/openai_e2e.py`, which prints what it observed as JSON.
//!
//! The Python side comes from `scripts/setup_py_e2e.sh` (a venv cached in
//! `~/.cache/horos/py-e2e`), or from `HOROS_PY_E2E_PYTHON` (a python that has `openai`). When
//! neither works the tests skip, unless `HOROS_REQUIRE_PY_E2E=1`. The real-model test needs
//! llama-servers (`HOROS_LLAMA_CHAT_URL`, `HOROS_LLAMA_EMBED_URL`, as `scripts/test.sh` exports
//! them) and skips without them, unless `HOROS_REQUIRE_LLAMA=1`. The other tests use fakeai
//! upstreams and gpu-alloc's pool with simulated loads.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::sync::Arc;
use std::time::Duration;

use crate::common::py::*;
use crate::common::*;
use horos_coordinator::{CoordinatorConfig, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer, Fault, Reply};
use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

const REPLY: &str = "one two three four five six seven eight";
const CHUNK_MS: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_chat_stream_embeddings_and_errors_through_the_coordinator() {
    let Some(py) = python("openai_python_chat_stream_embeddings_and_errors").await else {
        return;
    };
    let chat_up = FakeServer::start(FakeConfig {
        model: "fake-chat".into(),
        reply: Reply::Fixed(REPLY.into()),
        chunk_latency: Duration::from_millis(CHUNK_MS),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let embed_up = FakeServer::start(FakeConfig {
        model: "fake-embed".into(),
        embedding_dim: 16,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    // An upstream that refuses every call with 429 (its own error body).
    let busy_up = FakeServer::start(FakeConfig {
        model: "fake-busy".into(),
        fault: Fault::Status(429),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let up = StaticUpstream::new()
        .with("fake-chat", chat_up.url())
        .with("fake-embed", embed_up.url())
        .with("fake-busy", busy_up.url());
    let cfg = CoordinatorConfig {
        max_body_bytes: 64 * 1024,
        ..config()
    };
    let c = start(cfg, Arc::new(up)).await;

    // Chat: the answer, and the upstream never saw the coordinator's extension fields.
    let v = scenario(&py, &c, "chat", &["--model", "fake-chat"]).await;
    assert_eq!(v["content"], REPLY, "{v}");
    assert_eq!(
        v["models"],
        serde_json::json!(["fake-busy", "fake-chat", "fake-embed"])
    );
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["finish_reason"], "stop");
    let sent: Value = serde_json::from_str(&chat_up.requests()[0].body).unwrap();
    let keys: Vec<&String> = sent.as_object().unwrap().keys().collect();
    assert!(
        keys.iter()
            .all(|k| !k.starts_with("x_") && k.as_str() != "keep_alive"),
        "forwarded body kept extension fields: {sent}"
    );
    assert_eq!(sent["max_tokens"], 16);

    // Streaming: the chunks reach the client one by one, as the upstream sends them (a
    // buffering proxy would deliver them all at the end, with no time between them).
    let v = scenario(&py, &c, "stream", &["--model", "fake-chat"]).await;
    assert_eq!(v["text"], REPLY, "{v}");
    assert_eq!(v["finish_reason"], "stop");
    let k = v["content_chunks"].as_u64().unwrap();
    assert_eq!(k, 8, "{v}");
    let spread = f(&v["last_content_t"]) - f(&v["first_content_t"]);
    let at_least = (k - 2) as f64 * CHUNK_MS as f64 / 1000.0;
    assert!(
        spread >= at_least,
        "chunks arrived within {spread:.3} s, expected >= {at_least:.3} s apart in all: {v}"
    );

    // Embeddings, in the client's default (base64) and float encodings.
    let v = scenario(&py, &c, "embed", &["--model", "fake-embed"]).await;
    assert_eq!(v["count"], 3, "{v}");
    assert_eq!(v["indices"], serde_json::json!([0, 1, 2]));
    assert_eq!(v["dims"], serde_json::json!([16, 16, 16]));
    assert_eq!(v["float_dims"], serde_json::json!([16, 16, 16]));
    assert!(f(&v["max_abs_diff_encodings"]) < 1e-5, "{v}");

    // Errors as the client's typed exceptions, with OpenAI's error body.
    let v = scenario(
        &py,
        &c,
        "errors",
        &["--model", "fake-chat", "--failing-model", "fake-busy"],
    )
    .await;
    let e = &v["bad_priority"];
    assert_eq!(e["type"], "BadRequestError", "{v}");
    assert_eq!(e["status"], 400);
    assert_eq!(e["json"]["error"]["type"], "invalid_request_error");
    assert_eq!(e["json"]["error"]["param"], "x_priority");
    assert_eq!(e["param"], "x_priority");
    assert!(
        e["json"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x_priority")
    );
    for name in ["unknown_model", "unknown_model_embeddings"] {
        let e = &v[name];
        assert_eq!(e["type"], "NotFoundError", "{name}: {v}");
        assert_eq!(e["status"], 404);
        assert_eq!(e["code"], "model_not_found");
        assert_eq!(e["json"]["error"]["param"], "model");
        assert_eq!(e["json"]["error"]["type"], "invalid_request_error");
    }
    assert_eq!(v["unknown_task"]["type"], "NotFoundError", "{v}");
    assert_eq!(v["unknown_task"]["code"], "task_not_found");
    let e = &v["too_large"];
    assert_eq!(e["status"], 413, "{v}");
    assert_eq!(e["is_api_status_error"], true);
    assert_eq!(e["code"], "request_too_large");
    let e = &v["upstream_error"];
    assert_eq!(e["type"], "RateLimitError", "{v}");
    assert_eq!(e["status"], 429);
    assert_eq!(e["json"]["error"]["message"], "injected error", "{v}");
    // Retried (no Retry-After: after the back-off) until the attempts were spent.
    assert_eq!(busy_up.requests().len(), 3);
    assert_eq!(v["after"], REPLY);
    // Only the good calls reached an upstream: chat, stream, the last one; two embeddings.
    assert_eq!(chat_up.requests().len(), 3);
    assert_eq!(embed_up.requests().len(), 2);
    c.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_completions_fallback_rate_limits_and_the_admin_api() {
    let Some(py) = python("openai_python_completions_fallback_rate_limits_and_the_admin_api").await
    else {
        return;
    };
    let chat_up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed(REPLY.into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let limited_up = FakeServer::start(FakeConfig {
        fault: Fault::RateLimited(30),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let up = StaticUpstream::new()
        .with("fake-chat", chat_up.url())
        .with("fake-down", down)
        .with("fake-limited", limited_up.url());
    let mut cfg = CoordinatorConfig {
        api_key: Some("admin-secret".into()),
        retry_backoff_s: 0.01,
        ..config()
    };
    cfg.tasks.insert(
        "ladder".into(),
        horos_coordinator::TaskSpec {
            models: vec!["fake-down".into(), "fake-chat".into()],
            ..Default::default()
        },
    );
    let c = start(cfg, Arc::new(up)).await;
    let v = scenario(
        &py,
        &c,
        "gateway",
        &[
            "--model",
            "fake-chat",
            "--task",
            "ladder",
            "--limited-model",
            "fake-limited",
            "--admin-key",
            "admin-secret",
        ],
    )
    .await;
    assert_eq!(v["completion"]["object"], "text_completion", "{v}");
    assert_eq!(v["completion"]["text"], REPLY);
    assert_eq!(chat_up.requests()[0].path, "/v1/completions");
    assert_eq!(v["fallback"]["content"], REPLY, "{v}");
    assert_eq!(v["fallback"]["object"], "chat.completion");
    let e = &v["rate_limited"];
    assert_eq!(e["type"], "RateLimitError", "{v}");
    assert_eq!(e["status"], 429);
    assert_eq!(e["headers"]["retry-after"], "30", "{v}");
    assert_eq!(
        limited_up.requests().len(),
        1,
        "30 s is beyond the 5 s budget"
    );
    assert_eq!(v["admin_without_key"][0], 401, "{v}");
    assert_eq!(v["admin_wrong_key"][0], 401, "{v}");
    assert_eq!(v["admin_with_key"][0], 200, "{v}");
    let listed: Vec<&str> = v["admin_with_key"][1]["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert_eq!(listed.len(), 3, "{v}");
    c.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_high_priority_call_overtakes_queued_low_priority_calls() {
    let Some(py) = python("openai_python_high_priority_overtakes").await else {
        return;
    };
    // The first call never gets an answer (it holds the model's only place until its client
    // leaves, which the script does once the queue is built); the others are answered after
    // 300 ms, so that their clients also see them complete one after the other.
    let up = FakeServer::start(FakeConfig {
        model: "m".into(),
        latency: Duration::from_millis(300),
        fault: Fault::Hang,
        fault_count: Some(1),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let cfg = CoordinatorConfig {
        per_model_concurrency: 1,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;

    let v = scenario(&py, &c, "priority", &["--model", "m", "--low", "3"]).await;
    assert_eq!(v["errors"], serde_json::json!([]), "{v}");
    assert_eq!(
        v["queued"],
        serde_json::json!({"waiting": 4.0, "running": 1.0})
    );
    // Smaller is more important: priority 0 goes before the 9s that were queued earlier;
    // equal priorities keep their arrival order. The upstream saw them in that order.
    let seen: Vec<String> = up
        .requests()
        .iter()
        .map(|r| {
            let b: Value = serde_json::from_str(&r.body).unwrap();
            b["messages"][0]["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(seen, ["blocker", "high", "low-0", "low-1", "low-2"]);
    // Their clients got the answers in that order; the blocker's client left without one.
    let expected = ["high", "low-0", "low-1", "low-2"];
    assert_eq!(v["order"], serde_json::json!(expected), "{v}");
    assert_eq!(v["contents"], serde_json::json!(expected));
    // The place was given back when its client left, and nothing stays queued.
    assert_eq!(
        v["after"],
        serde_json::json!({"waiting": 0.0, "running": 0.0})
    );
    // One place per model: the answered calls never ran upstream together. The abandoned
    // blocker may still count there for a moment after its place was given back (the
    // coordinator drops its upstream connection, and the server notices the close on its own
    // time), so the upstream can see two at once, never three (a flaky `== 1` on a busy CI VM).
    assert!(up.stats().max_running <= 2, "{:?}", up.stats());
    c.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_cold_load_beyond_budget_gets_503_with_retry_after() {
    let Some(py) = python("openai_python_cold_load_503").await else {
        return;
    };
    // A pool whose model takes 3 s to load, estimated at 30 s before any load was measured.
    let (up, _factory) = pool(&["big"], Duration::from_secs(3), 24_000, 1000);
    let cfg = CoordinatorConfig {
        default_load_s: 30.0,
        ..config()
    };
    let c = start(cfg, Arc::new(up)).await;

    let v = scenario(
        &py,
        &c,
        "cold",
        &["--model", "big", "--timeout-s", "1", "--wait-s", "30"],
    )
    .await;
    let e = &v["first"];
    assert_eq!(e["is_api_status_error"], true, "{v}");
    assert_eq!(e["status"], 503);
    assert_eq!(e["type"], "InternalServerError"); // openai's class for 5xx
    assert_eq!(e["headers"]["retry-after"], "30");
    let body = &e["json"]["error"];
    assert_eq!(body["code"], "model_loading");
    assert_eq!(body["type"], "server_error");
    assert_eq!(body["model"], "big");
    let eta = f(&body["estimated_ready_s"]);
    assert!(eta > 29.0 && eta <= 30.0, "{v}");
    assert!(body["estimated_ready_at_ms"].as_u64().is_some());
    // The script saw the model loading after the refusal, then ready.
    assert_eq!(v["states"].as_array().unwrap().last().unwrap(), "READY");
    // Retries during the load are refused the same way; once loaded, the call is served.
    for r in v["retries"].as_array().unwrap() {
        assert_eq!(r["status"], 503, "{v}");
        assert!(r["retry_after"].as_str().is_some(), "{v}");
    }
    assert_eq!(v["answer"], "warm now", "{v}");

    // Answered before the load ended, and the load took its 3 s (the 503 neither waited for
    // it nor cut it short).
    let status_url = format!("{}/api/v1/status", c.url());
    wait_until("the load's decision in the snapshot", || async {
        get(&status_url).await.json()["decisions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["action"] == "load"))
    })
    .await;
    let snap = get(&status_url).await.json();
    let decisions = snap["decisions"].as_array().unwrap();
    let at = |action: &str| {
        decisions
            .iter()
            .rev() // oldest first
            .find(|d| d["model"] == "big" && d["action"] == action)
            .unwrap_or_else(|| panic!("no {action} decision: {snap}"))
    };
    let (reject, load) = (at("cold_reject"), at("load"));
    // The refusal started the 3 s load: it was decided (and answered) seconds before the end.
    let gap_ms = load["at_ms"].as_u64().unwrap() - reject["at_ms"].as_u64().unwrap();
    assert!(gap_ms >= 2000, "{gap_ms} ms: {snap}");
    assert_eq!(reject["client"], "py-e2e");
    assert!(
        reject["reason"].as_str().unwrap().ends_with("load started"),
        "{reject}"
    );
    let took: f64 = load["reason"]
        .as_str()
        .unwrap()
        .trim_start_matches("loaded in ")
        .trim_end_matches(" s")
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {load}"));
    assert!(took >= 3.0, "{load}");

    let text = get(&format!("{}/metrics", c.url())).await.text();
    assert_eq!(
        metric(&text, "horos_coordinator_model_loads_total{model=\"big\"}"),
        Some(1.0)
    );
    let rejections = metric(
        &text,
        "horos_coordinator_cold_rejections_total{model=\"big\"}",
    )
    .unwrap();
    assert_eq!(
        rejections,
        1.0 + v["retries"].as_array().unwrap().len() as f64,
        "{v}"
    );
    c.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_against_real_llama_servers() {
    let test = "openai_python_against_real_llama_servers";
    let Some((chat_url, embed_url)) = llama_urls(test).await else {
        return;
    };
    let Some(py) = python(test).await else {
        return;
    };
    // The names are llama-server's aliases (scripts/start_llama.sh).
    let up = StaticUpstream::new()
        .with("smollm2", chat_url)
        .with("minilm", embed_url);
    let cfg = CoordinatorConfig {
        max_body_bytes: 64 * 1024,
        ..config()
    };
    let c = start(cfg, Arc::new(up)).await;

    let v = scenario(
        &py,
        &c,
        "chat",
        &["--model", "smollm2", "--max-tokens", "8"],
    )
    .await;
    assert!(!v["content"].as_str().unwrap_or("").is_empty(), "{v}");
    assert_eq!(v["models"], serde_json::json!(["minilm", "smollm2"]));
    assert_eq!(v["object"], "chat.completion");
    let finish = v["finish_reason"].as_str().unwrap();
    assert!(finish == "stop" || finish == "length", "{v}");
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap() <= 8,
        "{v}"
    );

    let v = scenario(
        &py,
        &c,
        "stream",
        &["--model", "smollm2", "--max-tokens", "12"],
    )
    .await;
    assert!(v["content_chunks"].as_u64().unwrap() >= 2, "{v}");
    assert!(!v["text"].as_str().unwrap().is_empty(), "{v}");
    assert!(v["finish_reason"].is_string(), "{v}");
    // Every chunk after the first came later than it (delivered as generated, in order).
    let ts: Vec<f64> = v["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| f(&c["t"]))
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{v}");

    let v = scenario(&py, &c, "embed", &["--model", "minilm"]).await;
    assert_eq!(v["dims"], serde_json::json!([384, 384, 384]), "{v}");
    assert_eq!(v["float_dims"], serde_json::json!([384, 384, 384]));
    assert!(f(&v["max_abs_diff_encodings"]) < 1e-4, "{v}");
    // A real embedding model: two phrasings of one sentence are closer than an unrelated one.
    assert!(f(&v["cos_similar"]) > f(&v["cos_different"]), "{v}");

    let v = scenario(&py, &c, "errors", &["--model", "smollm2"]).await;
    assert_eq!(v["bad_priority"]["type"], "BadRequestError", "{v}");
    assert_eq!(v["unknown_model"]["type"], "NotFoundError", "{v}");
    assert!(!v["after"].as_str().unwrap_or("").is_empty(), "{v}");
    c.shutdown(Duration::from_secs(1)).await;
}
