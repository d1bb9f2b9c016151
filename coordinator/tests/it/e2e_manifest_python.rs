//! The model manifest and client profiles end to end with the official `openai` Python client
//! (`coordinator/tests/py/openai_e2e.py`): a real llama-server serving SmolLM2 through its
//! completion endpoints, the chat rendered by the coordinator's template (whole and streamed);
//! thinking on and off with the reasoning split from the answer; a rerank; a profile's alias
//! routing a request; a client in cooldown answered 429 with `Retry-After`; an image from the
//! diffusers worker (`servers/py/diffusers_worker.py`) serving the tiny Stable Diffusion pipeline
//! with random weights that `scripts/make_tiny_diffusers.py` builds.
//!
//! Skips without python + openai (`scripts/setup_py_e2e.sh`) unless `HOROS_REQUIRE_PY_E2E=1`;
//! the real-model test skips without the llama-servers (`scripts/start_llama.sh`,
//! `HOROS_LLAMA_CHAT_URL` / `HOROS_LLAMA_EMBED_URL`) unless `HOROS_REQUIRE_LLAMA=1`; the image
//! test without `scripts/setup_diffusers.sh`'s `HOROS_DIFFUSERS_PYTHON` /
//! `HOROS_DIFFUSERS_PYTHONPATH` / `HOROS_DIFFUSERS_TINY_PIPELINE` unless
//! `HOROS_REQUIRE_DIFFUSERS=1`.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::py::*;
use crate::common::*;
use horos_coordinator::Cooldown;
use horos_coordinator::{ClientProfile, CompletionApi, Limits, ModelManifest, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_chats_with_smollm2_through_the_coordinators_templates() {
    let test = "openai_python_chats_with_smollm2_through_the_coordinators_templates";
    let Some((chat_url, _)) = llama_urls(test).await else {
        return;
    };
    let Some(py) = python(test).await else {
        return;
    };
    let mut cfg = config();
    // SmolLM2-Instruct speaks ChatML: rendered here, sent to llama-server's own /completion.
    cfg.manifest.insert(
        "smollm2-chatml".into(),
        ModelManifest {
            template: Some("chatml".into()),
            completion_api: CompletionApi::Llama,
            ..ModelManifest::default()
        },
    );
    // Alpaca through OpenAI's /v1/completions.
    cfg.manifest.insert(
        "smollm2-alpaca".into(),
        ModelManifest {
            template: Some("alpaca".into()),
            completion_api: CompletionApi::Openai,
            ..ModelManifest::default()
        },
    );
    let up = StaticUpstream::new()
        .with("smollm2-chatml", chat_url.clone())
        .with("smollm2-alpaca", chat_url);
    let c = start(cfg, Arc::new(up)).await;

    for model in ["smollm2-chatml", "smollm2-alpaca"] {
        let v = scenario(&py, &c, "chat", &["--model", model, "--max-tokens", "8"]).await;
        let content = v["content"].as_str().unwrap_or("");
        assert!(!content.trim().is_empty(), "{model}: {v}");
        assert!(!content.contains("<|im_end|>"), "{model}: {v}");
        assert_eq!(v["object"], "chat.completion", "{v}");
        assert_eq!(v["model"], model);
        assert_eq!(v["role"], "assistant");
        let finish = v["finish_reason"].as_str().unwrap();
        assert!(finish == "stop" || finish == "length", "{v}");
        let used = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((1..=8).contains(&used), "{v}");
    }

    let v = scenario(
        &py,
        &c,
        "stream",
        &["--model", "smollm2-chatml", "--max-tokens", "12"],
    )
    .await;
    assert!(v["content_chunks"].as_u64().unwrap() >= 2, "{v}");
    assert!(!v["text"].as_str().unwrap().trim().is_empty(), "{v}");
    let finish = v["finish_reason"].as_str().unwrap();
    assert!(finish == "stop" || finish == "length", "{v}");
    assert!(
        v["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"),
        "{v}"
    );
    c.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_thinking_rerank_profiles_and_cooldown() {
    let Some(py) = python("openai_python_thinking_rerank_profiles_and_cooldown").await else {
        return;
    };
    // Echoes its prompt: what the template rendered comes back as the answer.
    let echo = FakeServer::start(FakeConfig {
        model: "thinker".into(),
        reply: Reply::Echo,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let a_up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed("from A".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let b_up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed("from B".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("thinker.jinja");
    std::fs::write(
        &template,
        "{%- for m in messages %}{% if thinking %}<think>the user said {{ m.content }}</think>\
         {% endif %}answer: {{ m.content }}{% endfor %}",
    )
    .unwrap();
    let mut cfg = config();
    cfg.manifest.insert(
        "thinker".into(),
        ModelManifest {
            template_file: Some(template),
            thinking: Some(false),
            ..ModelManifest::default()
        },
    );
    cfg.profiles.insert(
        "py-app".into(),
        ClientProfile {
            aliases: BTreeMap::from([("best".to_owned(), "model-b".to_owned())]),
            ..ClientProfile::default()
        },
    );
    cfg.clients.insert(
        "py-bursty".into(),
        Limits {
            cooldown: Some(Cooldown {
                requests: 2,
                window_s: 600.0,
                cooldown_s: 60.0,
            }),
            ..Limits::default()
        },
    );
    let up = StaticUpstream::new()
        .with("thinker", echo.url())
        .with("reranker", echo.url())
        .with("model-a", a_up.url())
        .with("model-b", b_up.url());
    let c = start(cfg, Arc::new(up)).await;

    // Thinking on: the template's flag puts reasoning in the answer, which comes back split;
    // off: none. Whole and streamed alike.
    let v = scenario(
        &py,
        &c,
        "thinking",
        &["--model", "thinker", "--prompt", "Q"],
    )
    .await;
    for on in ["on", "on_stream"] {
        assert_eq!(v[on]["content"], "answer: Q", "{on}: {v}");
        assert_eq!(v[on]["reasoning"], "the user said Q", "{on}: {v}");
    }
    assert_eq!(v["off"]["content"], "answer: Q", "{v}");
    assert!(v["off"]["reasoning"].is_null(), "{v}");
    assert_eq!(v["off_stream"]["content"], "answer: Q", "{v}");
    assert_eq!(v["off_stream"]["reasoning"], "", "{v}");
    let prompts: Vec<String> = echo
        .requests()
        .iter()
        .map(|r| serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["prompt"].to_string())
        .collect();
    assert_eq!(prompts.len(), 4);
    assert!(echo.requests().iter().all(|r| r.path == "/v1/completions"));

    // A rerank, through the same front door.
    let v = scenario(&py, &c, "rerank", &["--model", "reranker"]).await;
    let order: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [1, 2, 0], "{v}");
    assert_eq!(echo.requests().last().unwrap().path, "/v1/rerank");

    // The profile's alias decides the model; without the profile the alias means nothing.
    let v = scenario(
        &py,
        &c,
        "profile",
        &["--model", "best", "--client-id", "py-app"],
    )
    .await;
    assert_eq!(v["content"], "from B", "{v}");
    assert_eq!(v["without_profile"]["status"], 404, "{v}");
    assert_eq!(v["without_profile"]["code"], "model_not_found");
    assert_eq!(b_up.requests().len(), 1);
    assert!(a_up.requests().is_empty());

    // Two calls pass; the third starts the client's cooldown, and the fourth is still in it.
    let v = scenario(
        &py,
        &c,
        "cooldown",
        &[
            "--model",
            "model-a",
            "--client-id",
            "py-bursty",
            "--calls",
            "4",
        ],
    )
    .await;
    let calls = v["calls"].as_array().unwrap();
    assert_eq!(calls[0]["status"], 200, "{v}");
    assert_eq!(calls[1]["status"], 200, "{v}");
    for refused in &calls[2..] {
        assert_eq!(refused["type"], "RateLimitError", "{v}");
        assert_eq!(refused["status"], 429);
        assert_eq!(refused["code"], "client_cooldown");
        let after: u64 = refused["headers"]["retry-after"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&after), "{v}");
    }
    assert_eq!(a_up.requests().len(), 2);
    let m = get(&format!("{}/metrics", c.url())).await.text();
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_caller_requests_total{caller=\"client:py-bursty\"}"
        ),
        Some(4.0),
        "{m}"
    );
    c.shutdown(Duration::from_secs(1)).await;
}

/// Ends the worker process this test started.
struct Worker(std::process::Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_generates_an_image_through_the_coordinator() {
    let test = "openai_python_generates_an_image_through_the_coordinator";
    let (Ok(worker_python), Ok(site), Ok(pipeline)) = (
        std::env::var("HOROS_DIFFUSERS_PYTHON"),
        std::env::var("HOROS_DIFFUSERS_PYTHONPATH"),
        std::env::var("HOROS_DIFFUSERS_TINY_PIPELINE"),
    ) else {
        assert!(
            !required("HOROS_REQUIRE_DIFFUSERS"),
            "HOROS_REQUIRE_DIFFUSERS=1 but HOROS_DIFFUSERS_PYTHON / HOROS_DIFFUSERS_PYTHONPATH / \
             HOROS_DIFFUSERS_TINY_PIPELINE are not set"
        );
        eprintln!("SKIP: {test}: no diffusers (scripts/setup_diffusers.sh)");
        return;
    };
    let Some(py) = python(test).await else {
        return;
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let _worker = Worker(
        std::process::Command::new(worker_python)
            .arg(repo_root().join("servers/py/diffusers_worker.py"))
            .args(["--port", &port.to_string(), "--model", "tiny-image"])
            .args(["--pipeline", &pipeline])
            .env("PYTHONPATH", site)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}");
    // PyTorch's import alone may take a while on a busy machine: up to two minutes.
    let mut up = false;
    for _ in 0..240 {
        if healthy(&url).await {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        up,
        "the diffusers worker did not answer /health within two minutes"
    );
    let up = StaticUpstream::new().with("tiny-image", url);
    let c = start(config(), Arc::new(up)).await;
    let v = scenario(
        &py,
        &c,
        "image",
        &["--model", "tiny-image", "--size", "64x48"],
    )
    .await;
    assert_eq!(v["count"], 1, "{v}");
    assert_eq!(v["signature"], "89504e470d0a1a0a", "a PNG: {v}");
    assert_eq!(v["chunk"], "IHDR");
    assert_eq!(
        (v["width"].as_u64(), v["height"].as_u64()),
        (Some(64), Some(48))
    );
    c.shutdown(Duration::from_secs(1)).await;
}
