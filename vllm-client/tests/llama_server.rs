//! Against a real llama.cpp llama-server on CPU: SmolLM2-135M (chat, 4 slots, `--metrics`) on
//! `HOROS_LLAMA_CHAT_URL` (default http://127.0.0.1:18080) and MiniLM (embeddings) on
//! `HOROS_LLAMA_EMBED_URL` (default http://127.0.0.1:18081), as started by `scripts/start_llama.sh`.
//! Skipped when absent, unless `HOROS_REQUIRE_LLAMA=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use horos_vllm_client::{ChatMessage, ChatRequest, Client, EmbeddingRequest, ErrorClass};
use serde_json::json;

const HOW: &str = "start it with scripts/start_llama.sh";

/// The chat server's tests run one at a time: they read its load (requests running), which
/// another test's requests would change.
static CHAT_SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn chat_server() -> Option<(Client, tokio::sync::MutexGuard<'static, ()>)> {
    let serial = CHAT_SERVER.lock().await;
    let client = common::real_server(
        "HOROS_LLAMA_CHAT_URL",
        "http://127.0.0.1:18080",
        "HOROS_REQUIRE_LLAMA",
        HOW,
    )
    .await?;
    Some((client, serial))
}

async fn embed_server() -> Option<Client> {
    common::real_server(
        "HOROS_LLAMA_EMBED_URL",
        "http://127.0.0.1:18081",
        "HOROS_REQUIRE_LLAMA",
        HOW,
    )
    .await
}

fn ask(text: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest::new(
        "smollm2",
        vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user(text),
        ],
    )
    .max_tokens(max_tokens)
    .temperature(0.0)
}

#[tokio::test]
async fn llama_models_health_and_chat() {
    let Some((client, _serial)) = chat_server().await else {
        return;
    };
    client.health().await.unwrap();
    let models = client.models().await.unwrap();
    assert!(models.data.iter().any(|m| m.id == "smollm2"), "{models:?}");

    let answer = client
        .chat(&ask("Write one sentence about the sea.", 24))
        .await
        .unwrap();
    assert!(!answer.text().trim().is_empty());
    let usage = answer.usage.clone().unwrap();
    assert!(usage.prompt_tokens > 5);
    assert!(usage.completion_tokens > 0 && usage.completion_tokens <= 24);
    assert!(matches!(answer.finish_reason(), Some("stop" | "length")));
}

#[tokio::test]
async fn llama_streaming_chunks_and_usage() {
    let Some((client, _serial)) = chat_server().await else {
        return;
    };
    let summary = client
        .chat_stream(&ask("Count from 1 to 20.", 32))
        .await
        .unwrap()
        .collect_text()
        .await
        .unwrap();
    assert!(summary.chunks > 3, "{summary:?}");
    assert!(!summary.text.trim().is_empty());
    assert!(matches!(
        summary.finish_reason.as_deref(),
        Some("stop" | "length")
    ));
    let usage = summary.usage.unwrap();
    assert!(usage.completion_tokens > 0 && usage.completion_tokens <= 32);
}

#[tokio::test]
async fn llama_four_slots_run_concurrently_and_metrics_show_it() {
    let Some((client, _serial)) = chat_server().await else {
        return;
    };
    let requests = (0..4).map(|i| {
        let c = client.clone();
        let req = ask(&format!("Count from 1 to 100, request {i}."), 48)
            .extra_field("ignore_eos", json!(true));
        async move { c.chat(&req).await }
    });
    let (results, max_running) = common::max_running_during(&client, async {
        let handles: Vec<_> = requests.map(tokio::spawn).collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    })
    .await;
    for r in results {
        assert_eq!(r.unwrap().usage.unwrap().completion_tokens, 48);
    }
    assert!(
        max_running >= 2,
        "llamacpp:requests_processing never showed concurrent requests (max {max_running})"
    );
    let load = client.load().await.unwrap();
    assert_eq!(load.running, 0);
}

#[tokio::test]
async fn llama_dropping_a_stream_cancels_generation() {
    let Some((client, _serial)) = chat_server().await else {
        return;
    };
    let req = ask("Tell a very long story.", 2000).extra_field("ignore_eos", json!(true));
    let mut stream = client.chat_stream(&req).await.unwrap();
    for _ in 0..3 {
        stream.next_item().await.unwrap().unwrap();
    }
    assert!(client.load().await.unwrap().running >= 1);
    drop(stream);
    // 2000 tokens take many seconds at ~100 tokens/s: an early idle server means it was cancelled.
    let mut idle = false;
    for _ in 0..100 {
        if client.load().await.unwrap().running == 0 {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        idle,
        "the server kept generating after the stream was dropped"
    );
}

#[tokio::test]
async fn llama_structured_output_passes_through() {
    let Some((client, _serial)) = chat_server().await else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"]
    });
    let mut req = ask("Is the sea salty? Answer in JSON.", 32);
    req.response_format =
        Some(json!({"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}));
    let answer = client.chat(&req).await.unwrap();
    let parsed: serde_json::Value = serde_json::from_str(answer.text().trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", answer.text()));
    let a = parsed["answer"].as_str().unwrap();
    assert!(a == "yes" || a == "no", "{parsed}");
}

#[tokio::test]
async fn llama_request_errors_are_bad_requests() {
    let Some((client, _serial)) = chat_server().await else {
        return;
    };
    // far beyond a slot's context (4096 / 4 slots)
    let long = "word ".repeat(5000);
    let err = client.chat(&ask(&long, 8)).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert_eq!(err.class(), ErrorClass::BadRequest);
    assert!(!err.body().unwrap().is_empty());
}

#[tokio::test]
async fn llama_embeddings() {
    let Some(client) = embed_server().await else {
        return;
    };
    let resp = client
        .embeddings(&EmbeddingRequest::new(
            "minilm",
            vec![
                "The cat sits on the mat.",
                "A cat is sitting on a mat.",
                "The stock market fell sharply today.",
            ],
        ))
        .await
        .unwrap();
    let v = resp.vectors();
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|e| e.len() == 384));
    let close = common::cosine(v[0], v[1]);
    let far = common::cosine(v[0], v[2]);
    assert!(close > 0.7 && close > far + 0.3, "close {close} far {far}");
}
