//! A tour of the client against an in-process fake server (no inference server needed):
//! `cargo run -p horos-vllm-client --example quickstart`. Point `Client::new` at a real server
//! (vLLM, llama-server) instead to use it for real.

use std::time::Duration;

use horos_fakeai::{FakeConfig, FakeServer, Fault};
use horos_vllm_client::{
    ChatMessage, ChatRequest, Client, ClientConfig, ContentPart, EmbeddingRequest, ErrorClass,
};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = FakeServer::start(FakeConfig::default()).await?;
    let client = Client::with_config(
        ClientConfig::new(server.url())
            .total_timeout(Duration::from_secs(30))
            .max_concurrency(8),
    )?;

    // chat, with a vLLM extra passed through as is
    let req = ChatRequest::new("fake-model", vec![ChatMessage::user("Hello there")])
        .max_tokens(32)
        .extra_field("structured_outputs", json!({"choice": ["yes", "no"]}));
    let answer = client.chat(&req).await?;
    println!("chat: {:?} ({:?})", answer.text(), answer.finish_reason());

    // streaming
    let mut stream = client
        .chat_stream(&ChatRequest::new(
            "fake-model",
            vec![ChatMessage::user("one two three")],
        ))
        .await?;
    while let Some(chunk) = stream.next_item().await {
        let chunk = chunk?;
        if let Some(text) = chunk.content() {
            println!("delta: {text:?}");
        }
        if let Some(usage) = &chunk.usage {
            println!("usage: {} completion tokens", usage.completion_tokens);
        }
    }

    // an image as a data URL
    let png = b"\x89PNG\r\n\x1a\n...";
    let req = ChatRequest::new(
        "fake-model",
        vec![ChatMessage::user_parts(vec![
            ContentPart::text("What is in this picture?"),
            ContentPart::image_bytes(png, None),
        ])],
    );
    println!("vision: {:?}", client.chat(&req).await?.text());

    // embeddings, models, load
    let emb = client
        .embeddings(&EmbeddingRequest::new("fake-model", vec!["a", "b"]))
        .await?;
    println!(
        "embeddings: {} vectors of {}",
        emb.data.len(),
        emb.data[0].embedding.len()
    );
    println!(
        "models: {:?}",
        client
            .models()
            .await?
            .data
            .iter()
            .map(|m| &m.id)
            .collect::<Vec<_>>()
    );
    let load = client.load().await?;
    println!("load: {} running, {} waiting", load.running, load.waiting);

    // error classification
    server.set_fault(Fault::Status(503), Some(1));
    let err = client.chat(&req).await.err().ok_or("expected an error")?;
    assert_eq!(err.class(), ErrorClass::Retryable);
    println!("503 -> {:?}: {err}", err.class());
    server.set_fault(Fault::Status(422), Some(1));
    let err = client.chat(&req).await.err().ok_or("expected an error")?;
    println!("422 -> {:?}", err.class());
    server.set_fault(Fault::DropMidStream(1), Some(1));
    let err = client.chat(&req).await.err().ok_or("expected an error")?;
    println!("connection cut -> {:?}", err.class());
    Ok(())
}
