//! The whole pipeline on the CPU: real PDFs from Debian packages, Tesseract, a hashing text
//! embedder and the patch-grid visual embedder. (The MiniLM/llama-server run is in `e2e_llama.rs`.)
#![allow(clippy::unwrap_used)]

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fanin::ParentState;
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::hybrid::Scope;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig, Stage, Submission};
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::text_layer::TextLayerMode;
use ingest_pipeline::vision::{Reading, TesseractReader, VisionError, VisionReader};

fn config(dir: &std::path::Path) -> PipelineConfig {
    let mut cfg = PipelineConfig::new(dir);
    cfg.retry_delay = Duration::from_millis(300);
    cfg.visibility = Duration::from_secs(30);
    // These tests exercise reading (OCR, tiles, retries) on born-digital samples, whose text
    // layer would spare the reader every page (tests/text_layer.rs covers that).
    cfg.render.text_layer = TextLayerMode::Ignore;
    cfg
}

fn page_png(pdf: &std::path::Path, page: u32, dpi: f32) -> Vec<u8> {
    let cfg = RenderConfig {
        dpi,
        ..RenderConfig::default()
    };
    let mut out = None;
    render_pages(std::fs::read(pdf).unwrap(), &cfg, page, |p| {
        out = Some(encode_png(&p.image).unwrap());
        ControlFlow::Break(())
    })
    .unwrap();
    out.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingests_real_pdf_searches_three_ways_and_skips_known_documents() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::open(
        config(dir.path()),
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let pdf = samples.join("excerpt.pdf");
    let sub = pipeline.submit(&pdf).await.unwrap();
    assert!(matches!(sub, Submission::Queued(_)));
    let doc = pipeline
        .wait_for(sub.document().id, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(doc.pages, Some(4));

    let report = pipeline.report(doc.id).unwrap();
    assert_eq!(report.pages, 4);
    assert_eq!(report.tiles, 0);
    for stage in Stage::ALL {
        let s = report
            .stages
            .iter()
            .find(|s| s.stage == stage.queue())
            .unwrap();
        let want = if stage == Stage::PdfToImages { 1 } else { 4 };
        assert_eq!(s.jobs, want, "{stage:?}");
    }
    let ocr = report
        .stages
        .iter()
        .find(|s| s.stage == "image_to_ocr")
        .unwrap();
    assert!(ocr.inference_seconds > 0.0 && ocr.inference_seconds <= ocr.seconds);
    assert!(report.estimated_cost > 0.0);
    println!("report: {}", serde_json::to_string_pretty(&report).unwrap());

    let mut conn = pipeline.connection().unwrap();
    // Full-text: the attribute table is on page 3 of the excerpt.
    let hits = store::search_text(&mut conn, "nativeint AND fortran", 3).unwrap();
    assert_eq!(hits[0].page_no, 3, "{hits:?}");
    let text = store::page_text(&mut conn, doc.id, 3).unwrap().unwrap();
    assert!(
        text.contains("null_terminated") && text.contains("pointer_default"),
        "{text}"
    );
    // Vector search (lexical hashing embedder here; MiniLM in e2e_llama.rs).
    let q = HashingEmbedder::default().embed_one(
        "union declarations: each case of an union must be labeled; the discriminant of the union \
         is provided separately via a switch_is annotation",
    );
    let hits = store::search_vectors(&mut conn, &q, 3).unwrap();
    assert_eq!(hits[0].page_no, 4, "{hits:?}");
    // The pipeline's index in memory took every chunk as `embed_text` stored it, and answers
    // as the full scan.
    let chunks: i64 = conn
        .query_row(
            "SELECT count(*) FROM ip_chunks WHERE vector IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pipeline.text_index().len() as i64, chunks);
    let mut reads = pipeline.reads();
    let same = pipeline.text_index().search(&mut reads, &q, 3).unwrap();
    let page = |h: &store::PageHit| (h.doc_id, h.page_no);
    assert_eq!(
        same.iter().map(page).collect::<Vec<_>>(),
        hits.iter().map(page).collect::<Vec<_>>()
    );
    for (a, b) in same.iter().zip(&hits) {
        assert!((a.score - b.score).abs() < 1e-5, "{same:?} {hits:?}");
    }
    // MaxSim: page 2 rendered again at another resolution finds page 2.
    let query = PixelPatchFallback::default()
        .query_from_png(&page_png(&pdf, 2, 110.0))
        .unwrap();
    let index = store::load_visual_index(&mut conn, 128).unwrap();
    assert_eq!(index.len(), 4);
    let found = index.search(&query, 4, 2).unwrap();
    assert_eq!(found[0].key, (doc.id, 2), "{found:?}");
    // The same through the pipeline's entry points: an image as the question, and "pages like
    // this one" (a stored page's image); a page never rendered is named.
    let hits = pipeline
        .search_image(page_png(&pdf, 2, 110.0), 4, Scope::default())
        .await
        .unwrap();
    assert_eq!((hits[0].doc_id, hits[0].page_no), (doc.id, 2), "{hits:?}");
    let like = pipeline
        .search_like(doc.id, 3, 4, Scope::default())
        .await
        .unwrap();
    assert_eq!((like[0].doc_id, like[0].page_no), (doc.id, 3), "{like:?}");
    assert_eq!(like.len(), 4);
    let within = pipeline
        .search_like(doc.id, 3, 4, Some(doc.id + 1).into())
        .await
        .unwrap();
    assert!(within.is_empty(), "{within:?}");
    let e = pipeline
        .search_like(doc.id, 9, 4, Scope::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ingest_pipeline::visual_search::VisualSearchError::NoPage { page: 9, .. }
        ),
        "{e:?}"
    );

    // Idempotent: the same bytes again do no work.
    let before: Vec<_> = Stage::ALL
        .iter()
        .map(|s| pipeline.queue().stats(s.queue()).unwrap())
        .collect();
    let again = pipeline.submit(&pdf).await.unwrap();
    assert!(
        matches!(again, Submission::Known(ref d) if d.id == doc.id && d.status == DocStatus::Done)
    );
    let copy = dir.path().join("copy-of-excerpt.pdf");
    std::fs::copy(&pdf, &copy).unwrap();
    assert!(matches!(
        pipeline.submit(&copy).await.unwrap(),
        Submission::Known(_)
    ));
    let after: Vec<_> = Stage::ALL
        .iter()
        .map(|s| pipeline.queue().stats(s.queue()).unwrap())
        .collect();
    assert_eq!(before, after);
    assert_eq!(store::documents(&mut conn).unwrap().len(), 1);
    running.shutdown().await;
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_inputs_end_in_dead_letters_and_others_complete() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::open(
        config(dir.path()),
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let bad = [
        ("truncated.pdf", "truncated PDF"),
        ("encrypted.pdf", "encrypted PDF"),
        ("huge-page.pdf", "20000 x 20000 points"),
        ("not-a-pdf.pdf", "not a PDF"),
        ("empty.pdf", "empty file"),
    ];
    let mut ids = Vec::new();
    for (name, _) in bad {
        ids.push(
            pipeline
                .submit(samples.join(name))
                .await
                .unwrap()
                .document()
                .id,
        );
    }
    let good = pipeline
        .submit(samples.join("excerpt.pdf"))
        .await
        .unwrap()
        .document()
        .id;
    for ((name, reason), id) in bad.iter().zip(&ids) {
        let doc = pipeline
            .wait_for(*id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(doc.status, DocStatus::Failed, "{name}");
        let err = doc.error.unwrap();
        assert!(err.contains(reason) && err.contains(name), "{name}: {err}");
    }
    let doc = pipeline
        .wait_for(good, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(doc.status, DocStatus::Done);
    let dead = pipeline.dead_letters().unwrap();
    assert_eq!(dead.len(), bad.len());
    for (name, reason) in bad {
        let d = dead
            .iter()
            .find(|d| d.last_error.as_deref().unwrap_or("").contains(name))
            .unwrap();
        assert_eq!(d.queue, "pdf_to_images");
        // Malformed documents are dead at once, not retried.
        assert_eq!(d.attempts, 1);
        assert!(d.last_error.as_deref().unwrap().contains(reason));
    }
    // A 20000 x 20000-point page at 150 dpi would need 6.9 GB; memory stayed bounded.
    let peak = peak_rss_kib();
    assert!(peak < 1_500_000, "peak RSS {peak} KiB");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_pages_are_tiled_and_joined_without_overlap_duplicates() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.render.dpi = 150.0;
    cfg.tiles.threshold_bytes = 0; // tile every page: 3 x 5 tiles of 512 px at 150 dpi
    let pipeline = Pipeline::open(
        cfg,
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let pdf = samples.join("excerpt.pdf");
    let id = pipeline.submit(&pdf).await.unwrap().document().id;
    let doc = pipeline
        .wait_for(id, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let report = pipeline.report(id).unwrap();
    assert_eq!(report.tiles, 4 * 15);
    let ocr = report
        .stages
        .iter()
        .find(|s| s.stage == "image_to_ocr")
        .unwrap();
    assert_eq!(ocr.jobs, 60);
    // Each page was a fan-in parent of 15 tiles, completed once.
    let parents = pipeline
        .fan_in()
        .parents(ParentState::Completed, 100)
        .unwrap();
    assert_eq!(parents.len(), 4);
    assert!(parents.iter().all(|p| p.total == 15 && p.done == 15));
    running.shutdown().await;

    // Compare with Tesseract on the whole page: the joined tiles hold nearly the same words,
    // and the overlap's words are not doubled.
    let mut conn = pipeline.connection().unwrap();
    let tiled = store::page_text(&mut conn, id, 3).unwrap().unwrap();
    let whole = TesseractReader::default()
        .read_blocking(&page_png(&pdf, 3, 150.0))
        .unwrap()
        .text;
    let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let (tw, ww) = (words(&tiled), words(&whole));
    let found = ww.iter().filter(|w| tw.contains(w)).count();
    let recall = found as f64 / ww.len() as f64;
    let ratio = tw.len() as f64 / ww.len() as f64;
    println!(
        "tiled words {} whole words {} recall {recall:.3}",
        tw.len(),
        ww.len()
    );
    assert!(recall > 0.85, "recall {recall}\n{tiled}");
    assert!(ratio < 1.1 && ratio > 0.85, "ratio {ratio}\n{tiled}");
    // Each table row label appears once in the tiled text as in the page.
    for w in ["bigarray", "null_terminated", "pointer_default"] {
        assert_eq!(tiled.matches(w).count(), whole.matches(w).count(), "{w}");
    }
}

/// Wraps Tesseract, failing the first `fail_first` calls (retryable), to exercise retries.
struct Flaky {
    inner: TesseractReader,
    calls: Arc<AtomicUsize>,
    fail_first: usize,
}

impl VisionReader for Flaky {
    fn name(&self) -> &str {
        "flaky-tesseract"
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            return Err(VisionError::Model {
                message: "503 model loading".into(),
                retryable: true,
            });
        }
        self.inner.read(png).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_jobs_are_retried_after_the_delay_then_dead_lettered() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    // Retried: the first 2 reads fail, the document still completes.
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let reader = Flaky {
        inner: TesseractReader::default(),
        calls: calls.clone(),
        fail_first: 2,
    };
    let mut cfg = config(dir.path());
    cfg.retry_delay = Duration::from_millis(500);
    let pipeline = Pipeline::open(
        cfg,
        reader,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let doc = crate::common::submit_and_wait(&pipeline, samples.join("excerpt.pdf")).await;
    assert_eq!(doc.status, DocStatus::Done);
    assert_eq!(calls.load(Ordering::SeqCst), 4 + 2);
    assert!(pipeline.dead_letters().unwrap().is_empty());
    running.shutdown().await;

    // Always failing: after max_attempts the job is a dead letter with its reason.
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let reader = Flaky {
        inner: TesseractReader::default(),
        calls: calls.clone(),
        fail_first: usize::MAX,
    };
    let mut cfg = config(dir.path());
    cfg.retry_delay = Duration::from_millis(200);
    cfg.max_attempts = 2;
    let pipeline = Pipeline::open(
        cfg,
        reader,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
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
    assert!(doc.error.unwrap().contains("503 model loading"));
    // The failed document's remaining jobs are dropped: the queues drain.
    for _ in 0..300 {
        let pending: u64 = Stage::ALL
            .iter()
            .map(|s| pipeline.queue().stats(s.queue()).unwrap().pending())
            .sum();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dead = pipeline.dead_letters().unwrap();
    assert!(!dead.is_empty());
    assert!(
        dead.iter()
            .all(|d| d.queue == "image_to_ocr" && d.attempts == 2),
        "{dead:?}"
    );
    // Two tries per dead job; after the document failed, only reads already in flight finish
    // (they are dropped, not retried), so never more than two tries for each of the 4 pages.
    let calls = calls.load(Ordering::SeqCst);
    assert!(
        calls >= 2 * dead.len() && calls <= 2 * 4,
        "{calls} reads, {} dead",
        dead.len()
    );
    let stats = pipeline.queue().stats("embed_text").unwrap();
    assert_eq!(stats.pending(), 0);
    running.shutdown().await;

    // A tile failing for good fails its page's fan-in parent (fail fast) and the document.
    let dir = tempfile::tempdir().unwrap();
    let reader = Flaky {
        inner: TesseractReader::default(),
        calls: Arc::new(AtomicUsize::new(0)),
        fail_first: usize::MAX,
    };
    let mut cfg = config(dir.path());
    cfg.max_attempts = 1;
    cfg.tiles.threshold_bytes = 0;
    cfg.render.dpi = 100.0;
    let pipeline = Pipeline::open(
        cfg,
        reader,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
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
    assert!(doc.error.unwrap().contains("503 model loading"));
    let mut failed = Vec::new();
    for _ in 0..100 {
        failed = pipeline.fan_in().parents(ParentState::Failed, 10).unwrap();
        if !failed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!failed.is_empty());
    assert!(
        pipeline
            .fan_in()
            .parents(ParentState::Completed, 10)
            .unwrap()
            .is_empty()
    );
    running.shutdown().await;

    // A missing OCR engine is not retried: dead at once with a clear reason.
    let dir = tempfile::tempdir().unwrap();
    let reader = TesseractReader::default().with_program("/nonexistent/tesseract");
    let pipeline = Pipeline::open(
        config(dir.path()),
        reader,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
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
    assert!(doc.error.unwrap().contains("tesseract not found"));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stage_concurrency_changes_while_running() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.workers = [2, 0, 4, 2, 2]; // no OCR worker at first
    let pipeline = Pipeline::open(
        cfg,
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let id = pipeline
        .submit(samples.join("excerpt.pdf"))
        .await
        .unwrap()
        .document()
        .id;
    // Rendering proceeds; reading waits.
    let mut ready = 0;
    for _ in 0..600 {
        ready = pipeline.queue().stats("image_to_ocr").unwrap().ready;
        if ready == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready, 4);
    assert_eq!(pipeline.active_workers(Stage::ImageToOcr), 0);
    assert_eq!(pipeline.active_workers(Stage::OcrToDatabase), 4);
    pipeline.set_workers(Stage::ImageToOcr, 3);
    let doc = pipeline
        .wait_for(id, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(doc.status, DocStatus::Done);
    assert_eq!(pipeline.active_workers(Stage::ImageToOcr), 3);
    pipeline.set_workers(Stage::ImageToOcr, 1);
    for _ in 0..50 {
        if pipeline.active_workers(Stage::ImageToOcr) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pipeline.active_workers(Stage::ImageToOcr), 1);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_file_is_refused_before_reading() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.render.max_file_bytes = 100_000; // the manual is 192,532 bytes
    let pipeline = Pipeline::open(
        cfg,
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let id = pipeline
        .submit(samples.join("manual.pdf"))
        .await
        .unwrap()
        .document()
        .id;
    let doc = pipeline
        .wait_for(id, Duration::from_secs(60))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Failed);
    assert!(
        doc.error
            .unwrap()
            .contains("exceeds the limit of 100000 bytes")
    );
    let dead = pipeline.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 1);
}
