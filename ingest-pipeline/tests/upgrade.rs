//! One SQLite file shared by every crate, written by an older release, opened by this one.
//!
//! `tests/fixtures/shared-v1.db` was made by `make_fixture` (below, `#[ignore]`d) with the
//! release whose schemas are every crate's version 1: squeueha jobs in every state, dead letters,
//! a fan-in parent with pending and done fragments, an ingested document, the feeder's results
//! table, the coordinator's async-job and settings tables and the VRAM ledger. Regenerate it only
//! when a new fixture (a new release's schemas) is wanted, never to make a test pass:
//! `FIXTURE_OUT=/tmp/x.db cargo test -p ingest-pipeline --test upgrade -- --ignored make_fixture`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ingest_pipeline::embed::{HashingEmbedder, PatchEmbedder};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::store::DocStatus;
use ingest_pipeline::vision::{Reading, VisionError, VisionReader};

/// The committed fixture.
fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shared-v1.db")
}

/// The text every page "reads" as.
const PAGE_TEXT: &str = "fixture page about durable queues and fan-in";

/// A reader that needs no OCR engine.
struct Fixed;

impl VisionReader for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }

    async fn read(&self, _png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        Ok(Reading {
            text: PAGE_TEXT.into(),
            words: None,
            tables: vec![serde_json::json!({"header": ["a"], "rows": [["1"]]})],
            figures: Vec::new(),
            inference_seconds: 0.01,
        })
    }
}

/// Ten years: leases and delays of the fixture still hold when a test opens it.
const LONG: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Writes the fixture with this release's public APIs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the upgrade fixture; run by hand"]
async fn make_fixture() {
    let out = std::env::var("FIXTURE_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| fixture());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    write_fixture(dir.path(), &db).await;
    // One self-contained, compact file.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    conn.execute_batch("VACUUM").unwrap();
    drop(conn);
    std::fs::copy(&db, &out).unwrap();
    println!("fixture written to {}", out.display());
}

async fn write_fixture(dir: &Path, db: &Path) {
    use squeueha::{NewJob, Queue};

    // An ingested document (one image-only page), through the whole pipeline.
    let mut cfg = PipelineConfig::new(dir);
    cfg.db_path = db.to_owned();
    let pipeline = Pipeline::open(
        cfg,
        Fixed,
        HashingEmbedder::default(),
        PatchEmbedder::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let gray = image::GrayImage::from_fn(200, 260, |x, y| {
        image::Luma([((x * 7 + y * 3) % 256) as u8])
    });
    let pdf = dir.join("scan.pdf");
    std::fs::write(&pdf, common::image_only_pdf(&gray, 200.0, 260.0)).unwrap();
    let sub = pipeline.submit(&pdf).await.unwrap();
    let doc = pipeline
        .wait_for(sub.document().id, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    running.shutdown().await;
    drop(pipeline);

    // squeueha jobs in every state, and dead letters.
    let retained = squeueha::Config {
        retain_done: Some(LONG),
        ..squeueha::Config::default()
    };
    let queue = Queue::open_with(db, retained).unwrap();
    let q = "fixture";
    queue
        .enqueue(q, NewJob::new(b"in-flight".to_vec()).priority(9))
        .unwrap();
    let claimed = queue.poll_batch(q, 1, LONG).unwrap();
    assert_eq!(claimed.len(), 1);
    queue
        .enqueue(q, NewJob::new(b"done".to_vec()).priority(8))
        .unwrap();
    let done = queue.poll_batch(q, 1, LONG).unwrap();
    queue.ack(done[0].lease).unwrap();
    queue
        .enqueue(q, NewJob::new(b"delayed".to_vec()).delay(LONG))
        .unwrap();
    queue
        .enqueue(q, NewJob::new(b"dies".to_vec()).priority(7).max_attempts(1))
        .unwrap();
    let dies = queue.poll_batch(q, 1, LONG).unwrap();
    queue.nack(dies[0].lease, "boom", None).unwrap();
    queue
        .enqueue(q, NewJob::new(b"buried".to_vec()).priority(6))
        .unwrap();
    let buried = queue.poll_batch(q, 1, LONG).unwrap();
    queue.bury(buried[0].lease, "poison").unwrap();
    for i in 0..3 {
        queue
            .enqueue(
                q,
                NewJob::new(format!("ready-{i}").into_bytes()).dedup_key(format!("ready-{i}")),
            )
            .unwrap();
    }
    // A leader election.
    queue.try_lead("fixture-leader", "node-a", LONG).unwrap();

    // A fan-in parent: one fragment done, two pending.
    let fan = fanin::FanIn::open(queue.clone(), fanin::FanInConfig::default()).unwrap();
    let parent = fan
        .create_parent(
            fanin::ParentSpec::new("fixture-parent", "fixture.frag")
                .jobs((0..3).map(|i| NewJob::new(format!("frag-{i}").into_bytes())))
                .then(
                    "fixture.next",
                    serde_json::json!({"after": "fixture-parent"}),
                ),
        )
        .unwrap();
    let frag = queue
        .poll_batch("fixture.frag", 1, Duration::from_secs(30))
        .unwrap();
    fan.complete(&frag[0], fanin::FragmentResult::Bytes(b"result-0".to_vec()))
        .unwrap();
    assert_eq!(fan.progress(parent).unwrap().done, 1);

    // The feeder's results table, with one stored answer.
    horos_feeder::TableSink::new(queue.clone()).unwrap();
    queue
        .transaction(|tx| -> squeueha::Result<()> {
            tx.connection().execute(
                "INSERT INTO horos_feeder_results (job_id, queue, text, response, completed_at)
                 VALUES (?1, 'fixture.feed', 'an answer', '{}', 1)",
                [done[0].id],
            )?;
            Ok(())
        })
        .unwrap();
    drop(fan);
    drop(queue);

    // The coordinator's tables (async jobs, settings): a coordinator started on the file.
    let coord_cfg = horos_coordinator::CoordinatorConfig {
        state_path: Some(db.to_owned()),
        ..horos_coordinator::CoordinatorConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let coordinator = horos_coordinator::Coordinator::start(
        coord_cfg,
        Arc::new(horos_coordinator::StaticUpstream::new()),
        listener,
    )
    .await
    .unwrap();
    coordinator.shutdown(Duration::from_secs(1)).await;
    let settings = horos_coordinator::settings::Settings::load(Some(db.to_owned()), true).unwrap();
    let mut patch = serde_json::Map::new();
    patch.insert("allowCloudFallback".into(), serde_json::Value::Bool(false));
    settings.update(&patch).unwrap();
    let queue = Queue::open(db).unwrap();
    let payload = horos_coordinator::JobPayload {
        kind: "chat".into(),
        request: serde_json::json!({"model": "m", "messages": []})
            .as_object()
            .unwrap()
            .clone(),
        priority: None,
    };
    let coord_job = queue
        .enqueue(
            &format!("{}chat", horos_coordinator::JOB_QUEUE_PREFIX),
            NewJob::json(&payload).unwrap(),
        )
        .unwrap();
    queue
        .transaction(|tx| -> squeueha::Result<()> {
            tx.connection().execute(
                "INSERT INTO coord_job_results (id, kind, state, status, body, finished_ms)
                 VALUES (?1, 'chat', 'done', 200, X'7B7D', 1)",
                [coord_job.id() + 1_000_000],
            )?;
            Ok(())
        })
        .unwrap();
    drop(queue);

    // The VRAM ledger, with one long lease.
    let ledger = horos_gpu_alloc::ledger::VramLedger::open(db).unwrap();
    ledger.set_capacity(0, 24_000).unwrap();
    ledger
        .acquire(&horos_gpu_alloc::ledger::LeaseRequest {
            owner: "fixture".into(),
            pid: None,
            parts: vec![(0, 8_000)],
            ttl: LONG,
        })
        .unwrap();
}
