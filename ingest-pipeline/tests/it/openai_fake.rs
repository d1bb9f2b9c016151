//! The OpenAI-compatible backends (vision reader and embeddings) through the pipeline, against
//! `horos-fakeai` (a real HTTP server on 127.0.0.1 with scripted answers and faults): tables and
//! figures of the model's answer are stored, a 503 is retried, a 400 is a dead letter at once.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use horos_fakeai::{FakeConfig, FakeServer, Fault, Reply};
use ingest_pipeline::embed::PixelPatchFallback;
use ingest_pipeline::openai::{OpenAiEmbedder, OpenAiVisionReader};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::text_layer::TextLayerMode;

const ANSWER: &str = "```json\n{\"text\": \"Attribute Context where it can appear\", \
\"tables\": [{\"header\": [\"Attribute\", \"Context\"], \"rows\": [[\"bigarray\", \"array type\"]]}], \
\"figures\": [\"a flowchart of the stub generator\"]}\n```";

async fn pipeline(
    dir: &std::path::Path,
    url: &str,
) -> Pipeline<OpenAiVisionReader, OpenAiEmbedder, PixelPatchFallback> {
    let mut cfg = PipelineConfig::new(dir);
    cfg.retry_delay = Duration::from_millis(300);
    // The excerpt is born-digital: its text layer would spare the model every page.
    cfg.render.text_layer = TextLayerMode::Ignore;
    Pipeline::open(
        cfg,
        OpenAiVisionReader::new(url, "fake-model").unwrap(),
        OpenAiEmbedder::new(url, "fake-model").unwrap(),
        PixelPatchFallback::default(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vision_model_answers_are_stored_and_503_retried() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    let server = FakeServer::start(FakeConfig {
        reply: Reply::Fixed(ANSWER.into()),
        fault: Fault::Status(503),
        fault_count: Some(1),
        embedding_dim: 16,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = pipeline(dir.path(), &server.url()).await;
    let running = pipeline.start();
    let doc = crate::common::submit_and_wait(&pipeline, samples.join("excerpt.pdf")).await;
    let id = doc.id;
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");

    let mut conn = pipeline.connection().unwrap();
    for page in 1..=4 {
        let tables = store::page_tables(&mut conn, id, page).unwrap();
        assert_eq!(
            tables,
            vec![
                serde_json::json!({"header": ["Attribute", "Context"], "rows": [["bigarray", "array type"]]})
            ]
        );
    }
    assert_eq!(
        store::search_text(&mut conn, "flowchart", 10)
            .unwrap()
            .len(),
        4
    );
    let report = pipeline.report(id).unwrap();
    assert_eq!(report.tables, 4);
    let ocr = report
        .stages
        .iter()
        .find(|s| s.stage == "image_to_ocr")
        .unwrap();
    assert_eq!(ocr.jobs, 4);
    assert!(ocr.inference_seconds > 0.0);

    let requests = server.requests();
    let chats: Vec<_> = requests
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .collect();
    // 4 pages + the one answered 503 and retried.
    assert_eq!(chats.len(), 5);
    assert!(
        chats
            .iter()
            .all(|r| r.body.contains("data:image/png;base64,")
                && r.body.contains("Answer with one JSON object"))
    );
    let embeds = requests
        .iter()
        .filter(|r| r.path == "/v1/embeddings")
        .count();
    assert_eq!(embeds, 4);
    let hits = store::search_vectors(&mut conn, &[1.0; 16], 10).unwrap();
    assert_eq!(hits.len(), 4);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_request_is_a_dead_letter_at_once() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    let server = FakeServer::start(FakeConfig {
        fault: Fault::Status(400),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = pipeline(dir.path(), &server.url()).await;
    let running = pipeline.start();
    let id = pipeline
        .submit(samples.join("excerpt.pdf"))
        .await
        .unwrap()
        .document()
        .id;
    let doc = pipeline
        .wait_for(id, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(doc.status, DocStatus::Failed);
    assert!(doc.error.as_deref().unwrap().contains("400"), "{doc:?}");
    let dead = pipeline.dead_letters().unwrap();
    assert!(!dead.is_empty());
    assert!(
        dead.iter()
            .all(|d| d.queue == "image_to_ocr" && d.attempts == 1),
        "{dead:?}"
    );
    running.shutdown().await;
    server.stop();
}
