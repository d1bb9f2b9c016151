//! The real pooling protocol end to end: real vLLM on CPU serving a tiny ColPali model
//! (`ColPaliForRetrieval` with random weights, made by `scripts/make_tiny_colpali.py`, served as
//! `tiny-colpali` with `--runner pooling` by `scripts/start_vllm_visual.sh`) on
//! `HOROS_VLLM_VISUAL_URL` (default http://127.0.0.1:18084). Page images and a question become
//! 128-value multi-vectors through `/pooling`, are stored compactly and searched by MaxSim; with
//! random weights the ranking means nothing, so the test checks it is the exact MaxSim of the
//! model's own vectors; a real PDF's rendered pages go through the pipeline's `embed_visual`
//! stage to the same server. Skipped when the server is absent, unless `HOROS_REQUIRE_VLLM=1`.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use ingest_pipeline::embed::{HashingEmbedder, VisualEmbedder};
use ingest_pipeline::maxsim::maxsim;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::pooling::PoolingEmbedder;
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::TesseractReader;
use ingest_pipeline::visual_search::{VisualQuery, search_by_text};
use rusqlite::Connection;

const MODEL: &str = "tiny-colpali";

async fn server() -> Option<String> {
    let url = std::env::var("HOROS_VLLM_VISUAL_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:18084".to_owned());
    let client = horos_vllm_client::Client::new(url.clone()).ok()?;
    if client.health().await.is_ok() {
        return Some(url);
    }
    horos_testkit::skip_or_fail(
        "HOROS_REQUIRE_VLLM",
        &format!("no vLLM serving {MODEL} at {url}: start it with scripts/start_vllm_visual.sh"),
    );
    None
}

fn png(seed: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(64, 64, |x, y| {
        let v = ((x * (seed + 3) + y * (seed * 5 + 1)) % 256) as u8;
        image::Rgb([v, v.wrapping_mul(3), 255 - v])
    });
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_vllm_colpali_pages_and_a_question_through_pooling_storage_and_maxsim() {
    let Some(url) = server().await else {
        return;
    };
    let embedder = PoolingEmbedder::new(&url, MODEL).unwrap();
    let mut pages = Vec::new();
    for seed in 0..3 {
        let mv = embedder.embed_image(Arc::new(png(seed))).await.unwrap();
        // 4 image tokens (28 × 28 pixels, 14-pixel patches) and the prompt's tokens.
        assert_eq!(mv.dim, 128);
        assert!(mv.len() >= 4, "{} vectors", mv.len());
        for v in mv.data.chunks_exact(128) {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-3, "ColPali normalises: {norm}");
        }
        pages.push(mv);
    }
    // Deterministic: the same image, the same vectors.
    let again = embedder.embed_image(Arc::new(png(0))).await.unwrap();
    assert_eq!(again.len(), pages[0].len());
    let drift: f32 = again
        .data
        .iter()
        .zip(&pages[0].data)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(drift < 1e-4, "{drift}");
    assert_ne!(pages[0].data, pages[1].data);

    let question = "which table lists the marshalling types";
    let q = embedder.embed_query(question.into()).await.unwrap();
    assert_eq!(q.dim, 128);
    assert!(!q.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let mut conn = Connection::open(&db).unwrap();
    store::migrate(&conn).unwrap();
    let (doc, _) = store::insert_document(&mut conn, "x", "x", "/x.pdf").unwrap();
    for (i, mv) in pages.iter().enumerate() {
        store::store_page_vectors(&mut conn, doc.id, i as u32 + 1, mv, MODEL).unwrap();
    }
    let hits = search_by_text(
        Connection::open(&db).unwrap(),
        &embedder,
        VisualQuery {
            text: question.into(),
            k: 3,
            docs: None,
            threads: 2,
            ..VisualQuery::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(hits.len(), 3);
    // The ranking is exact MaxSim of the model's own f32 vectors (scores from half floats).
    let mut scratch = Vec::new();
    let mut want: Vec<(u32, f32)> = pages
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u32 + 1, maxsim(&q.data, &p.data, 128, &mut scratch)))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (hit, (_, score)) in hits.iter().zip(&want) {
        assert!(
            (hit.score as f32 - score).abs() < 2e-3 * q.len() as f32,
            "{hit:?} vs {score}"
        );
    }
    // The best page is exact MaxSim's best unless the two are within the half floats' error.
    if want[0].1 - want[1].1 > 0.01 {
        assert_eq!(hits[0].page_no, want[0].0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pipeline_embeds_rendered_pages_with_real_vllm_and_a_question_finds_them() {
    let Some(url) = server().await else {
        return;
    };
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::open(
        PipelineConfig::new(dir.path()),
        TesseractReader::default(),
        HashingEmbedder::default(),
        PoolingEmbedder::new(&url, MODEL).unwrap(),
    )
    .unwrap();
    let running = pipeline.start();
    let doc = crate::common::submit_and_wait(&pipeline, samples.join("excerpt.pdf")).await;
    let id = doc.id;
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let mut conn = pipeline.connection().unwrap();
    assert_eq!(
        store::visual_models(&mut conn).unwrap(),
        [(MODEL.to_owned(), 128, 4)]
    );
    let hits = search_by_text(
        conn,
        pipeline.visual(),
        VisualQuery {
            text: "which attribute table".into(),
            k: 10,
            docs: Some(vec![id]),
            threads: 2,
            ..VisualQuery::default()
        },
    )
    .await
    .unwrap();
    let mut pages: Vec<u32> = hits.iter().map(|h| h.page_no).collect();
    pages.sort();
    assert_eq!(pages, [1, 2, 3, 4]);
    assert!(hits.iter().all(|h| h.score.is_finite()));
}
