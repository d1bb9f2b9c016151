//! Every document ends done or failed with its reason, whatever its name, its bytes or its
//! workers' fate; a failed one can be ingested again, and any one deleted with everything
//! derived from it. PDFs are made here (blank pages), read by a reader that needs no OCR engine.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fanin::ParentState;
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig, PipelineError, Stage, Submission};
use ingest_pipeline::store::{self, DocStatus, Document};
use ingest_pipeline::vision::{Reading, VisionError, VisionReader};

/// What every page reads as.
const PAGE_TEXT: &str = "durable pipelines reconcile their dead letters";

/// A reader that needs no OCR engine; while `broken` is set it fails for good (not retried).
#[derive(Clone, Default)]
struct Reader {
    broken: Arc<AtomicBool>,
}

impl VisionReader for Reader {
    fn name(&self) -> &str {
        "fixed"
    }

    async fn read(&self, _png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(VisionError::Model {
                message: "400 bad image".into(),
                retryable: false,
            });
        }
        Ok(Reading {
            text: PAGE_TEXT.into(),
            ..Reading::default()
        })
    }
}

type TestPipeline = Pipeline<Reader, HashingEmbedder, PixelPatchFallback>;

fn config(dir: &Path) -> PipelineConfig {
    let mut cfg = PipelineConfig::new(dir);
    cfg.render.dpi = 20.0;
    cfg.retry_delay = Duration::from_millis(200);
    cfg.visibility = Duration::from_secs(30);
    cfg.sweep_interval = Duration::from_millis(100);
    cfg
}

fn open(cfg: PipelineConfig, reader: Reader) -> TestPipeline {
    Pipeline::open(
        cfg,
        reader,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

async fn ingest(pipeline: &TestPipeline, path: &Path) -> Document {
    let id = pipeline.submit(path).await.unwrap().document().id;
    pipeline
        .wait_for(id, Duration::from_secs(120))
        .await
        .unwrap()
}

fn all_zero(rows: &[(&str, i64)]) -> bool {
    rows.iter().all(|(_, n)| *n == 0)
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_name_is_not_utf8_is_read_from_its_exact_path() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"scan-\xff\xfe-\xc3(.pdf");
    let path = dir.path().join(name);
    std::fs::write(&path, crate::common::pages_pdf(2)).unwrap();
    // The lossy form of the name is another file, which does not exist.
    assert!(!Path::new(&*path.to_string_lossy()).exists());
    let pipeline = open(config(dir.path()), Reader::default());
    let running = pipeline.start();
    let doc = ingest(&pipeline, &path).await;
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(doc.pages, Some(2));
    assert_eq!(doc.source_path(), path);
    assert!(doc.path.contains('\u{FFFD}'), "{}", doc.path);
    // The same bytes under their name again: known, not a second document.
    assert!(matches!(
        pipeline.submit(&path).await.unwrap(),
        Submission::Known(d) if d.id == doc.id
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_dead_by_lease_expiry_on_its_last_attempt_fails_its_document() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_attempts = 1;
    let pipeline = open(cfg, Reader::default());
    let pdf = write(dir.path(), "a.pdf", &crate::common::pages_pdf(1));
    let id = pipeline.submit(&pdf).await.unwrap().document().id;
    // A worker claims the rendering and dies: its lease expires on the job's only attempt.
    let claimed = pipeline
        .queue()
        .poll_batch(Stage::PdfToImages.queue(), 1, Duration::from_millis(1))
        .unwrap();
    assert_eq!(claimed.len(), 1);
    drop(claimed);
    let running = pipeline.start();
    let doc = pipeline
        .wait_for(id, Duration::from_secs(60))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Failed, "{doc:?}");
    let err = doc.error.unwrap();
    assert!(
        err.contains("pdf_to_images") && err.contains("lease expired on attempt 1 of 1"),
        "{err}"
    );
    let dead = pipeline.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    // Nothing left to reconcile: a second sweep changes nothing.
    assert_eq!(pipeline.reconcile_dead_letters().await.unwrap(), 0);

    // Again with the workers started again, after sweeps that read the first dead letter: a
    // later death is found too. The rendering stage starts with no worker, so that only this
    // test's claim can take the job (a running worker's claim in flight would hold it).
    pipeline.set_workers(Stage::PdfToImages, 0);
    let running = pipeline.start();
    let pdf = write(dir.path(), "b.pdf", &crate::common::pages_pdf(2));
    let id = pipeline.submit(&pdf).await.unwrap().document().id;
    let claimed = pipeline
        .queue()
        .poll_batch(Stage::PdfToImages.queue(), 1, Duration::from_millis(1))
        .unwrap();
    assert_eq!(claimed.len(), 1);
    drop(claimed);
    pipeline.set_workers(Stage::PdfToImages, 2);
    let doc = pipeline
        .wait_for(id, Duration::from_secs(60))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Failed, "{doc:?}");
    assert!(doc.error.unwrap().contains("lease expired"));
    assert_eq!(pipeline.dead_letters().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_of_a_document_still_pending_is_requeued_and_the_document_completes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_attempts = 1;
    let pipeline = open(cfg, Reader::default());
    let pdf = write(dir.path(), "a.pdf", &crate::common::pages_pdf(2));
    let id = pipeline.submit(&pdf).await.unwrap().document().id;
    // Its rendering claimed by a worker that dies, on its only attempt; the next claim finds
    // the lease expired and buries the job. No worker (so no sweep) runs yet: still pending.
    let q = pipeline.queue();
    let render = Stage::PdfToImages.queue();
    assert_eq!(
        q.poll_batch(render, 1, Duration::from_millis(1))
            .unwrap()
            .len(),
        1
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        q.poll_batch(render, 1, Duration::from_secs(30))
            .unwrap()
            .is_empty()
    );
    let dead = pipeline.dead_letters().unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let mut conn = pipeline.connection().unwrap();
    assert_eq!(
        store::document(&mut conn, id).unwrap().unwrap().status,
        DocStatus::Pending
    );
    let new_job = pipeline.requeue_dead(dead[0].id).await.unwrap();
    assert_ne!(new_job, dead[0].id);
    assert!(pipeline.dead_letters().unwrap().is_empty());
    let running = pipeline.start();
    let doc = pipeline
        .wait_for(id, Duration::from_secs(60))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(doc.pages, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tile_dead_by_lease_expiry_fails_its_document() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_attempts = 1;
    cfg.render.dpi = 150.0;
    cfg.tiles.threshold_bytes = 0; // every page a fan-in of tiles
    cfg.workers[1] = 0; // no reader yet
    let pipeline = open(cfg, Reader::default());
    let running = pipeline.start();
    let id = pipeline
        .submit(write(dir.path(), "a.pdf", &crate::common::pages_pdf(1)))
        .await
        .unwrap()
        .document()
        .id;
    let mut claimed = Vec::new();
    for _ in 0..600 {
        claimed = pipeline
            .queue()
            .poll_batch(Stage::ImageToOcr.queue(), 1, Duration::from_millis(1))
            .unwrap();
        if !claimed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(claimed.len(), 1, "no tile job was enqueued");
    // The tile's worker dies: the page's fan-in never completes.
    drop(claimed);
    pipeline.set_workers(Stage::ImageToOcr, 2);
    let doc = pipeline
        .wait_for(id, Duration::from_secs(60))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Failed, "{doc:?}");
    let err = doc.error.unwrap();
    assert!(
        err.contains("image_to_ocr") && err.contains("lease expired"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_document_is_ingested_again_from_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let reader = Reader::default();
    reader.broken.store(true, Ordering::SeqCst);
    let pipeline = open(config(dir.path()), reader.clone());
    let running = pipeline.start();
    let pdf = write(dir.path(), "report.pdf", &crate::common::pages_pdf(2));
    let failed = ingest(&pipeline, &pdf).await;
    assert_eq!(failed.status, DocStatus::Failed);
    assert!(failed.error.as_deref().unwrap().contains("400 bad image"));
    // Submitting the same bytes again only says they are known.
    assert!(matches!(
        pipeline.submit(&pdf).await.unwrap(),
        Submission::Known(d) if d.status == DocStatus::Failed
    ));
    // Requeueing its dead job is refused: the job would be dropped, the document stay failed.
    let dead = pipeline.dead_letters().unwrap();
    assert!(!dead.is_empty());
    let job = dead[0].id;
    assert!(matches!(
        pipeline.requeue_dead(job).await,
        Err(PipelineError::DocumentEnded { job: j, doc, status: Some(DocStatus::Failed) })
            if j == job && doc == failed.id
    ));
    assert_eq!(pipeline.dead_letters().unwrap().len(), dead.len());

    // Its file gone: refused, nothing changed.
    let moved = dir.path().join("moved.pdf");
    std::fs::rename(&pdf, &moved).unwrap();
    assert!(matches!(
        pipeline.retry(failed.id).await,
        Err(PipelineError::Io(_))
    ));
    let mut conn = pipeline.connection().unwrap();
    let still = store::document(&mut conn, failed.id).unwrap().unwrap();
    assert_eq!(still.status, DocStatus::Failed);
    std::fs::rename(&moved, &pdf).unwrap();

    reader.broken.store(false, Ordering::SeqCst);
    let again = pipeline.retry(failed.id).await.unwrap();
    let Submission::Queued(new) = again else {
        panic!("{again:?}")
    };
    assert!(new.id > failed.id);
    assert_eq!(new.sha256, failed.sha256);
    let done = pipeline
        .wait_for(new.id, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(done.status, DocStatus::Done, "{done:?}");
    assert_eq!(done.pages, Some(2));
    assert!(store::document(&mut conn, failed.id).unwrap().is_none());
    assert!(all_zero(
        &store::rows_of_document(&mut conn, failed.id).unwrap()
    ));
    assert_eq!(store::documents(&mut conn).unwrap().len(), 1);

    // The old document's dead job now belongs to a deleted document; an unknown id is said so.
    let e = pipeline.requeue_dead(job).await.unwrap_err();
    assert!(
        matches!(e, PipelineError::DocumentEnded { status: None, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("deleted"), "{e}");
    assert!(matches!(
        pipeline.requeue_dead(987_654).await,
        Err(PipelineError::NoDeadJob(987_654))
    ));

    // Only a failed document is retried.
    assert!(matches!(
        pipeline.retry(done.id).await,
        Err(PipelineError::NotFailed {
            status: DocStatus::Done,
            ..
        })
    ));
    assert!(matches!(
        pipeline.retry(failed.id).await,
        Err(PipelineError::UnknownDocument(id)) if id == failed.id
    ));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_with_more_pages_than_max_pages_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.render.max_pages = 2;
    let pipeline = open(cfg, Reader::default());
    let running = pipeline.start();
    let long = ingest(
        &pipeline,
        &write(dir.path(), "long.pdf", &crate::common::pages_pdf(3)),
    )
    .await;
    let short = ingest(
        &pipeline,
        &write(dir.path(), "short.pdf", &crate::common::pages_pdf(2)),
    )
    .await;
    running.shutdown().await;
    assert_eq!(long.status, DocStatus::Failed);
    let err = long.error.unwrap();
    assert!(err.contains("3 pages > max_pages = 2"), "{err}");
    // Refused before any page was rendered.
    let mut conn = pipeline.connection().unwrap();
    assert_eq!(store::last_rendered_page(&mut conn, long.id).unwrap(), 0);
    assert_eq!(short.status, DocStatus::Done);
}

/// Encryption with the standard handler and a user password: its `/O` and `/U` entries do not
/// match the empty password, so the document cannot be opened.
fn encrypted_pdf() -> Vec<u8> {
    let h32 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let enc = format!("<< /Filter /Standard /V 2 /R 3 /Length 128 /O <{h32}> /U <{h32}> /P -4 >>");
    crate::common::blank_pdf(
        &[(298.0, 420.0)],
        &[&enc],
        "/Encrypt 4 0 R /ID [<00112233445566778899aabbccddeeff> <00112233445566778899aabbccddeeff>]",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pdfs_each_fail_with_their_reason_and_a_good_one_completes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.render.max_file_bytes = 100_000;
    let pipeline = open(cfg, Reader::default());
    let running = pipeline.start();
    let good_bytes = crate::common::pages_pdf(2);
    let mut garbage = b"%PDF-1.7\n".to_vec();
    garbage.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    garbage.extend_from_slice(b"\n%%EOF\n");
    // A valid PDF made large by a comment: refused by its size before it is read.
    let mut large = b"%PDF-1.4\n%".to_vec();
    large.extend(std::iter::repeat_n(b'x', 200_000));
    large.extend_from_slice(&good_bytes[9..]);
    let bad: [(&str, Vec<u8>, &str); 7] = [
        ("large.pdf", large, "exceeds the limit of 100000 bytes"),
        ("malformed.pdf", garbage, "malformed PDF"),
        (
            "truncated.pdf",
            good_bytes[..good_bytes.len() / 2].to_vec(),
            "truncated PDF",
        ),
        ("encrypted.pdf", encrypted_pdf(), "encrypted PDF"),
        ("empty.pdf", Vec::new(), "empty file"),
        (
            "huge-page.pdf",
            crate::common::blank_pdf(&[(298.0, 420.0), (200_000.0, 200_000.0)], &[], ""),
            "page 2 is 200000 x 200000 points",
        ),
        (
            "licence.pdf",
            b"Permission is hereby granted".to_vec(),
            "not a PDF",
        ),
    ];
    // All submitted before any ends, so they run together.
    let mut ids = Vec::new();
    for (name, bytes, _) in &bad {
        let path = write(dir.path(), name, bytes);
        ids.push(pipeline.submit(&path).await.unwrap().document().id);
    }
    let good = pipeline
        .submit(write(dir.path(), "good.pdf", &good_bytes))
        .await
        .unwrap()
        .document()
        .id;
    for ((name, _, reason), id) in bad.iter().zip(&ids) {
        let doc = pipeline
            .wait_for(*id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(doc.status, DocStatus::Failed, "{name}");
        let err = doc.error.unwrap();
        assert!(err.contains(reason) && err.contains(name), "{name}: {err}");
    }
    let doc = pipeline
        .wait_for(good, Duration::from_secs(120))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(doc.pages, Some(2));
    // Each is a dead letter at once (the document's own fault, not retried).
    let dead = pipeline.dead_letters().unwrap();
    assert_eq!(dead.len(), bad.len(), "{dead:?}");
    assert!(dead.iter().all(|d| d.attempts == 1), "{dead:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_document_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.tiles.threshold_bytes = 0; // tiles too: every page a fan-in of tile files
    cfg.render.dpi = 150.0;
    let work_dir = cfg.work_dir.clone();
    let pipeline = open(cfg, Reader::default());
    let running = pipeline.start();
    let a_path = write(dir.path(), "a.pdf", &crate::common::pages_pdf(2));
    let a = ingest(&pipeline, &a_path).await;
    let b = ingest(
        &pipeline,
        &write(dir.path(), "b.pdf", &crate::common::pages_pdf(1)),
    )
    .await;
    assert_eq!((a.status, b.status), (DocStatus::Done, DocStatus::Done));
    let mut conn = pipeline.connection().unwrap();
    let before = store::rows_of_document(&mut conn, a.id).unwrap();
    for table in [
        "ip_pages",
        "ip_tiles",
        "ip_page_fts",
        "ip_chunks",
        "ip_page_vectors",
        "ip_page_codes",
    ] {
        assert!(
            before.iter().any(|(t, n)| *t == table && *n > 0),
            "{table}: {before:?}"
        );
    }
    let a_files: Vec<PathBuf> = (1..=2)
        .map(|p| {
            PathBuf::from(
                store::page_info(&mut conn, a.id, p)
                    .unwrap()
                    .unwrap()
                    .image_path,
            )
        })
        .collect();
    assert!(a_files.iter().all(|f| f.exists()));
    let a_dir = a_files[0].parent().unwrap().to_owned();
    let tiles_in_dir = std::fs::read_dir(&a_dir).unwrap().count();
    assert!(tiles_in_dir > 2, "{tiles_in_dir} files");
    let b_file = store::page_info(&mut conn, b.id, 1)
        .unwrap()
        .unwrap()
        .image_path;

    let labels = || -> Vec<String> {
        let mut l: Vec<String> = pipeline
            .fan_in()
            .parents(ParentState::Completed, 100)
            .unwrap()
            .into_iter()
            .map(|p| p.label)
            .collect();
        l.sort();
        l
    };
    // Each page was a fan-in of its tiles, their readings kept as the parent's results.
    let (a1, a2, b1) = (
        format!("page {}:1", a.id),
        format!("page {}:2", a.id),
        format!("page {}:1", b.id),
    );
    assert_eq!(labels(), [a1, a2, b1.clone()]);

    let deleted = pipeline.delete(a.id).await.unwrap().unwrap();
    assert_eq!(deleted.id, a.id);
    assert_eq!(labels(), [b1]);
    let after = store::rows_of_document(&mut conn, a.id).unwrap();
    assert!(all_zero(&after), "{after:?}");
    assert!(!a_dir.exists());
    assert!(a_dir.starts_with(&work_dir));
    // The other document is untouched and is all full-text search finds.
    assert!(Path::new(&b_file).exists());
    let hits = store::search_user_text(&mut conn, "reconcile", 10).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].doc_id, b.id);
    assert!(pipeline.delete(a.id).await.unwrap().is_none());
    // The same bytes again are a new document, with an id never used before.
    let again = pipeline.submit(&a_path).await.unwrap();
    assert!(
        matches!(again, Submission::Queued(ref d) if d.id > b.id),
        "{again:?}"
    );
    running.shutdown().await;
}

/// A reader that holds every read until the test opens its gate.
#[derive(Clone)]
struct Gated {
    gate: Arc<tokio::sync::Semaphore>,
    started: Arc<std::sync::atomic::AtomicUsize>,
}

impl VisionReader for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    async fn read(&self, _png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let _open = self.gate.acquire().await;
        Ok(Reading {
            text: PAGE_TEXT.into(),
            ..Reading::default()
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_deleted_while_its_pages_are_read_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let reader = Gated {
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
        started: Arc::default(),
    };
    let pipeline = Pipeline::open(
        config(dir.path()),
        reader.clone(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let id = pipeline
        .submit(write(dir.path(), "a.pdf", &crate::common::pages_pdf(3)))
        .await
        .unwrap()
        .document()
        .id;
    let mut conn = pipeline.connection().unwrap();
    for _ in 0..600 {
        if reader.started.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        reader.started.load(Ordering::SeqCst) > 0,
        "no page was read"
    );
    assert!(pipeline.delete(id).await.unwrap().is_some());
    // The reads in progress finish after the deletion; every job left is dropped.
    reader.gate.add_permits(1_000);
    let mut pending = u64::MAX;
    for _ in 0..600 {
        pending = Stage::ALL
            .iter()
            .map(|s| pipeline.queue().stats(s.queue()).unwrap().pending())
            .sum();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.shutdown().await;
    assert_eq!(pending, 0);
    let rows = store::rows_of_document(&mut conn, id).unwrap();
    assert!(all_zero(&rows), "{rows:?}");
    let work_dir = pipeline.config().work_dir.clone();
    let left: Vec<_> = std::fs::read_dir(&work_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    // Nothing was dead-lettered: a deleted document's jobs are dropped, not failed.
    assert!(pipeline.dead_letters().unwrap().is_empty());
}
