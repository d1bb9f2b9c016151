//! The vision model down (nothing listening, or 5xx): a scanned page is read by the fallback
//! reader at once and records it; a request the model refuses (400) is not a reason to fall
//! back.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{TestPage, mixed_pdf, prose, rasterised};
use horos_fakeai::{FakeConfig, FakeServer, Fault};
use ingest_pipeline::fallback::FallbackReader;
use ingest_pipeline::openai::OpenAiVisionReader;
use ingest_pipeline::pipeline::PipelineConfig;
use ingest_pipeline::store::{self, DocStatus, Document};
use ingest_pipeline::vision::ReadBy;

/// Ingests a one-page scan with the vision model at `url`, falling back to a counting reader.
async fn ingest_scan(url: &str) -> (tempfile::TempDir, Document, Vec<store::PageSummary>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scan.pdf");
    std::fs::write(
        &file,
        mixed_pdf(&[TestPage::Image(rasterised(&prose(1, 10), 150.0))]),
    )
    .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let reader = FallbackReader::new(
        OpenAiVisionReader::new(url, "vision-model").unwrap(),
        // The fallback: counts its calls, reads a fixed text, as Tesseract.
        crate::common::CountingReader {
            calls: calls.clone(),
            text: "read by the fallback",
            delay: std::time::Duration::ZERO,
        },
    );
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.retry_delay = Duration::from_millis(200);
    let (pipeline, doc) = crate::common::ingest_with(cfg, reader, &file).await;
    let pages = store::document_pages(&mut pipeline.reads(), doc.id).unwrap();
    let n = calls.load(Ordering::SeqCst);
    (dir, doc, pages, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_falls_back_and_the_page_records_it() {
    // A port nothing listens on any more.
    let port = horos_testkit::free_port();
    let (_dir, doc, pages, calls) = ingest_scan(&format!("http://127.0.0.1:{port}")).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(calls, 1);
    assert_eq!(pages[0].read_by, Some(ReadBy::Tesseract));
    assert_eq!(pages[0].reader.as_deref(), Some("tesseract"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_5xx_falls_back() {
    let server = FakeServer::start(FakeConfig {
        fault: Fault::Status(503),
        fault_count: None,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let (_dir, doc, pages, calls) = ingest_scan(&server.url()).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(calls, 1);
    assert_eq!(pages[0].read_by, Some(ReadBy::Tesseract));
    let chats = server
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count();
    assert!(chats >= 1, "the model was asked first");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_model_refuses_does_not_fall_back() {
    let server = FakeServer::start(FakeConfig {
        fault: Fault::Status(400),
        fault_count: None,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let (_dir, doc, _pages, calls) = ingest_scan(&server.url()).await;
    assert_eq!(doc.status, DocStatus::Failed, "{doc:?}");
    assert_eq!(calls, 0);
    server.stop();
}
