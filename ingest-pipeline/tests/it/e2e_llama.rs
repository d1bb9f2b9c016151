//! End to end on the CPU: a real 26-page manual (camlidl-doc) through the whole pipeline with
//! Tesseract and MiniLM embeddings served by llama-server (`scripts/start_llama.sh`, read from
//! `HOROS_LLAMA_EMBED_URL`, default http://127.0.0.1:18081). Skips when the server is
//! unreachable, unless `HOROS_REQUIRE_LLAMA=1`.
#![allow(clippy::unwrap_used)]

use std::ops::ControlFlow;
use std::time::Duration;

use ingest_pipeline::embed::{PixelPatchFallback, TextEmbedder};
use ingest_pipeline::openai::OpenAiEmbedder;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::TesseractReader;

async fn embed_server() -> Option<OpenAiEmbedder> {
    let url =
        std::env::var("HOROS_LLAMA_EMBED_URL").unwrap_or_else(|_| "http://127.0.0.1:18081".into());
    let embedder = OpenAiEmbedder::new(&url, "minilm").unwrap();
    match embedder.embed(vec!["ping".into()]).await {
        Ok(v) if v.len() == 1 && !v[0].is_empty() => Some(embedder),
        other => {
            horos_testkit::skip_or_fail(
                "HOROS_REQUIRE_LLAMA",
                &format!(
                    "embedding server at {url} unusable: {:?} (run scripts/start_llama.sh)",
                    other.err()
                ),
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_manual_with_tesseract_and_minilm() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    let Some(embedder) = embed_server().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.retry_delay = Duration::from_secs(1);
    // MiniLM's context is 256 word pieces (llama-server truncates longer inputs): smaller chunks.
    cfg.chunks.size = 128;
    cfg.chunks.overlap = 30;
    let pipeline = Pipeline::open(
        cfg,
        TesseractReader::default(),
        embedder.clone(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let pdf = samples.join("manual.pdf");
    let id = pipeline.submit(&pdf).await.unwrap().document().id;
    let doc = pipeline
        .wait_for(id, Duration::from_secs(900))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(doc.pages, Some(26));
    let report = pipeline.report(id).unwrap();
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.pages, 26);
    let embed = report
        .stages
        .iter()
        .find(|s| s.stage == "embed_text")
        .unwrap();
    assert_eq!(embed.jobs, 26);
    assert!(embed.inference_seconds > 0.0);

    let mut conn = pipeline.connection().unwrap();
    // Full-text search: the attribute table is on page 5.
    let hits =
        store::search_text(&mut conn, "nativeint AND fortran AND null_terminated", 3).unwrap();
    assert_eq!(hits[0].page_no, 5, "{hits:?}");

    // Vector search with MiniLM: questions answered by one page each.
    let cases = [
        (
            "advice for writing an IDL file for an existing C library that has no IDL interface",
            23,
        ),
        (
            "error handling with HRESULT return codes in COM interfaces",
            18,
        ),
        (
            "reference counting and Release of COM interfaces by finalized objects",
            26,
        ),
    ];
    for (question, page) in cases {
        let q = embedder
            .embed(vec![question.into()])
            .await
            .unwrap()
            .remove(0);
        assert_eq!(q.len(), 384);
        let hits = store::search_vectors(&mut conn, &q, 5).unwrap();
        println!(
            "{question}: {:?}",
            hits.iter()
                .map(|h| (h.page_no, h.score))
                .collect::<Vec<_>>()
        );
        assert_eq!(hits[0].page_no, page, "{question}");
    }

    // MaxSim: page 9 rendered again at 110 dpi finds page 9 among the 26.
    let render = RenderConfig {
        dpi: 110.0,
        ..RenderConfig::default()
    };
    let mut png = None;
    render_pages(std::fs::read(&pdf).unwrap(), &render, 9, |p| {
        png = Some(encode_png(&p.image).unwrap());
        ControlFlow::Break(())
    })
    .unwrap();
    let query = PixelPatchFallback::default()
        .query_from_png(&png.unwrap())
        .unwrap();
    let index = store::load_visual_index(&mut conn, 128).unwrap();
    assert_eq!(index.len(), 26);
    let found = index.search(&query, 3, 2).unwrap();
    assert_eq!(found[0].key, (id, 9), "{found:?}");
}
