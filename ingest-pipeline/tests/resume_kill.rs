//! A pipeline process killed with SIGKILL mid-way: a new process resumes where it stopped
//! (pages already rendered are not rendered again, nothing is stored twice).
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use horos_testkit::wait_until;
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig, Submission};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::{Reading, TesseractReader, VisionError, VisionReader};

const CHILD_ENV: &str = "INGEST_PIPELINE_KILL_CHILD_DIR";

/// Tesseract slowed down so that the parent can kill the child mid-document.
struct Slow(TesseractReader);

impl VisionReader for Slow {
    fn name(&self) -> &str {
        "tesseract"
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.0.read(png).await
    }
}

fn config(dir: &std::path::Path) -> PipelineConfig {
    let mut cfg = PipelineConfig::new(dir);
    cfg.visibility = Duration::from_secs(3);
    cfg.retry_delay = Duration::from_millis(300);
    cfg.workers = [1, 1, 1, 1, 1];
    cfg
}

/// The child process's body (re-executed by `killed_pipeline_resumes`); a no-op otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_runs_pipeline() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let samples = std::env::var("INGEST_PIPELINE_KILL_PDF").unwrap();
    let pipeline = Pipeline::open(
        config(std::path::Path::new(&dir)),
        Slow(TesseractReader::default()),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let _running = pipeline.start();
    pipeline.submit(&samples).await.unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_pipeline_resumes() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let Some(samples) = common::samples() else {
        return;
    };
    if !common::tesseract_available() {
        return;
    }
    let pdf = samples.join("excerpt.pdf");
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_runs_pipeline", "--nocapture"])
        .env(CHILD_ENV, dir.path())
        .env("INGEST_PIPELINE_KILL_PDF", &pdf)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the child is mid-way: some pages rendered and read, not all.
    let db = config(dir.path()).db_path;
    let progress = |conn: &rusqlite::Connection| -> rusqlite::Result<(u32, u32)> {
        conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(read_done), 0) FROM ip_pages",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    };
    let read = wait_until("the child's progress", Duration::from_secs(300), || async {
        let conn = rusqlite::Connection::open(&db).ok()?;
        let (rendered, read) = progress(&conn).ok()?;
        (rendered >= 2 && read >= 1).then_some(read)
    })
    .await;
    assert!(read < 4, "child finished before the kill");
    sigkill(&mut child);

    let mut conn = rusqlite::Connection::open(&db).unwrap();
    let before: Vec<(u32, f64)> = {
        let mut st = conn
            .prepare("SELECT page_no, rendered_at FROM ip_pages ORDER BY page_no")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    println!("killed with {} pages rendered", before.len());
    let doc = store::documents(&mut conn).unwrap().remove(0);
    assert_eq!(doc.status, DocStatus::Pending);

    // A new process (here: this one) opens the same database and carries on.
    let pipeline = Pipeline::open(
        config(dir.path()),
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    // Submitting again while it is in progress does nothing new.
    assert!(matches!(
        pipeline.submit(&pdf).await.unwrap(),
        Submission::Known(_)
    ));
    let running = pipeline.start();
    let done = pipeline
        .wait_for(doc.id, Duration::from_secs(300))
        .await
        .unwrap();
    running.shutdown().await;
    assert_eq!(done.status, DocStatus::Done, "{done:?}");

    let after: Vec<(u32, f64)> = {
        let mut st = conn
            .prepare("SELECT page_no, rendered_at FROM ip_pages ORDER BY page_no")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(after.len(), 4);
    // Pages rendered before the kill were not rendered again.
    for (page, at) in &before {
        assert!(after.contains(&(*page, *at)), "page {page} re-rendered");
    }
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT COUNT(*) FROM ip_page_fts"), 4);
    assert_eq!(count("SELECT COUNT(*) FROM ip_page_vectors"), 4);
    assert_eq!(
        count("SELECT COUNT(*) FROM ip_chunks WHERE vector IS NULL"),
        0
    );
    assert_eq!(count("SELECT COUNT(*) FROM ip_pages WHERE done = 1"), 4);
    let hits = store::search_text(&mut conn, "nativeint AND fortran", 3).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].page_no, 3);
}

fn sigkill(child: &mut std::process::Child) {
    // SIGKILL (std's kill sends SIGKILL on Unix), then reap.
    child.kill().unwrap();
    child.wait().unwrap();
}
