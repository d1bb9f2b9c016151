//! One SQLite file shared by every crate, written by an older release, opened by this one.
//!
//! `tests/fixtures/shared-v1.db` was made by `make_fixture` (below, `#[ignore]`d) at commit
//! e5c1fa0, before the schemas were versioned (so its tables are every crate's version 1):
//! squeueha jobs in every state, dead letters, a fan-in parent with pending and done fragments, an
//! ingested document, the feeder's results table, the coordinator's async-job and settings tables
//! and the VRAM ledger. Regenerate it only when a new fixture (a new release's schemas) is wanted,
//! never to make a test pass:
//! `FIXTURE_OUT=/tmp/x.db cargo test -p ingest-pipeline --test upgrade -- --ignored make_fixture`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
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
            ..Reading::default()
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
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let gray = image::GrayImage::from_fn(200, 260, |x, y| {
        image::Luma([((x * 7 + y * 3) % 256) as u8])
    });
    let pdf = dir.join("scan.pdf");
    std::fs::write(&pdf, crate::common::image_only_pdf(&gray, 200.0, 260.0)).unwrap();
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
            tx.connection()?.execute(
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
    let settings = horos_coordinator::settings::Settings::load(
        Some(horos_coordinator::settings::open_store(db).unwrap()),
        true,
    )
    .unwrap();
    let mut patch = serde_json::Map::new();
    patch.insert("allowCloudFallback".into(), serde_json::Value::Bool(false));
    settings.update(&patch).unwrap();
    let queue = Queue::open(db).unwrap();
    let payload = horos_coordinator::JobPayload {
        kind: horos_coordinator::JobKind::Chat,
        request: serde_json::json!({"model": "m", "messages": []})
            .as_object()
            .unwrap()
            .clone(),
        priority: None,
        key: None,
    };
    let coord_job = queue
        .enqueue(
            &format!("{}chat", horos_coordinator::JOB_QUEUE_PREFIX),
            NewJob::json(&payload).unwrap(),
        )
        .unwrap();
    queue
        .transaction(|tx| -> squeueha::Result<()> {
            tx.connection()?.execute(
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

/// A private copy of the fixture (tests change it).
fn copy_fixture(dir: &Path) -> PathBuf {
    let db = dir.join("shared.db");
    std::fs::copy(fixture(), &db).unwrap();
    db
}

fn open_pipeline(
    dir: &Path,
    db: &Path,
) -> Result<
    Pipeline<Fixed, HashingEmbedder, PixelPatchFallback>,
    ingest_pipeline::pipeline::PipelineError,
> {
    let mut cfg = PipelineConfig::new(dir);
    cfg.db_path = db.to_owned();
    Pipeline::open(
        cfg,
        Fixed,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
}

fn versions(db: &Path) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT namespace, version FROM squeueha_schema ORDER BY namespace")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_by_the_previous_release_opens_intact_and_usable() {
    use squeueha::{Enqueued, JobState, NewJob};

    let dir = tempfile::tempdir().unwrap();
    let db = copy_fixture(dir.path());
    let pipeline = open_pipeline(dir.path(), &db).unwrap();

    // The ingested document, searchable.
    let mut conn = pipeline.connection().unwrap();
    let docs = ingest_pipeline::store::documents(&mut conn).unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].status, DocStatus::Done);
    assert_eq!(docs[0].pages, Some(1));
    // Stored before exact paths were: its text path is the path.
    assert_eq!(docs[0].path_bytes, None);
    // Stored before collections were (schema 9): in the default one, which a key that names
    // none reads, and found there.
    assert_eq!(docs[0].collection.as_str(), "default");
    let default_only = horos_server_control::Collections::default_only();
    let found =
        ingest_pipeline::store::search_text_in(&mut conn, "durable AND queues", 3, &default_only)
            .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(docs[0].source_path(), PathBuf::from(&docs[0].path));
    let hits = ingest_pipeline::store::search_text(&mut conn, "durable AND queues", 3).unwrap();
    assert_eq!((hits[0].doc_id, hits[0].page_no), (docs[0].id, 1));
    assert_eq!(
        ingest_pipeline::store::page_text(&mut conn, docs[0].id, 1)
            .unwrap()
            .as_deref(),
        Some(PAGE_TEXT)
    );
    // Its visual row (f32, before the compact encodings of v3) is still read and searchable.
    let stored = ingest_pipeline::store::page_vectors(&mut conn, docs[0].id, 1)
        .unwrap()
        .unwrap();
    assert_eq!((stored.dim, stored.len()), (128, 1024));
    let index =
        ingest_pipeline::store::load_int8_index(&mut conn, "patch-grid", 128, None).unwrap();
    let found = index.search(&stored, 1, 1).unwrap();
    assert_eq!(found[0].key, (docs[0].id, 1));
    // Counted by the visual change counter the upgrade added (schema 7).
    let ready = ingest_pipeline::store::VisualIndexCache::new()
        .prepare(&mut conn, "patch-grid")
        .unwrap();
    assert_eq!((ready[0].dim, ready[0].pages), (128, 1), "{ready:?}");
    // Its full-text row was mapped by the upgrade: deleting the document removes it.
    assert!(pipeline.delete(docs[0].id).await.unwrap().is_some());
    let rows = ingest_pipeline::store::rows_of_document(&mut conn, docs[0].id).unwrap();
    assert!(rows.iter().all(|(_, n)| *n == 0), "{rows:?}");
    assert!(
        ingest_pipeline::store::search_text(&mut conn, "durable", 3)
            .unwrap()
            .is_empty()
    );
    drop(conn);

    // Jobs in every state, still usable.
    let queue = pipeline.queue().clone();
    let s = queue.stats("fixture").unwrap();
    assert_eq!(
        (s.ready, s.in_flight, s.delayed, s.done, s.dead),
        (3, 1, 1, 1, 2),
        "{s:?}"
    );
    // Its dedup keys were kept. The fixture is older than the default 24 h window, which
    // would let the key enqueue again: ask with a permanent window, which sees every key kept.
    let permanent = squeueha::Queue::open_with(
        &db,
        squeueha::Config {
            dedup_window: squeueha::DedupWindow::Permanent,
            ..squeueha::Config::default()
        },
    )
    .unwrap();
    assert!(matches!(
        permanent
            .enqueue("fixture", NewJob::new(b"x".to_vec()).dedup_key("ready-0"))
            .unwrap(),
        Enqueued::Duplicate(_)
    ));
    drop(permanent);
    let ready = queue
        .poll_batch("fixture", 10, Duration::from_secs(30))
        .unwrap();
    let mut payloads: Vec<_> = ready.iter().map(|j| j.payload.clone()).collect();
    payloads.sort();
    assert_eq!(payloads, [b"ready-0", b"ready-1", b"ready-2"]);
    let report = queue
        .ack_batch(&ready.iter().map(|j| j.lease).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(report.acked, 3);
    // A job claimed by the old release is in flight, its lease still running.
    let in_flight = queue
        .poll_batch("fixture", 1, Duration::from_secs(30))
        .unwrap();
    assert!(in_flight.is_empty());
    // Dead letters: listed and requeued.
    let dead = queue.dead_letters("fixture", 10).unwrap();
    let mut reasons: Vec<_> = dead
        .iter()
        .map(|d| d.last_error.clone().unwrap_or_default())
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["boom", "poison"]);
    let again = queue.requeue_dead(dead[0].id).unwrap();
    assert_eq!(queue.get(again).unwrap().unwrap().state, JobState::Ready);
    let job = queue
        .poll_batch("fixture", 1, Duration::from_secs(30))
        .unwrap();
    assert_eq!(job[0].id, again);
    queue.release(job[0].lease, Duration::ZERO).unwrap();
    let job = queue
        .poll_batch("fixture", 1, Duration::from_secs(30))
        .unwrap();
    queue.ack(job[0].lease).unwrap();
    // Leadership survives.
    assert_eq!(
        queue.leader("fixture-leader").unwrap().unwrap().holder,
        "node-a"
    );

    // The fan-in parent: one fragment done, two pending; finishing them enqueues the next stage.
    let fan = fanin::FanIn::open(queue.clone(), fanin::FanInConfig::default()).unwrap();
    let parents = fan.parents(fanin::ParentState::Pending, 10).unwrap();
    let parent = parents
        .iter()
        .find(|p| p.label == "fixture-parent")
        .unwrap();
    assert_eq!((parent.done, parent.total), (1, 3));
    let frags = queue
        .poll_batch("fixture.frag", 10, Duration::from_secs(30))
        .unwrap();
    assert_eq!(frags.len(), 2);
    let mut last = None;
    for f in &frags {
        last = Some(
            fan.complete(f, fanin::FragmentResult::Bytes(b"late".to_vec()))
                .unwrap(),
        );
    }
    assert_eq!(
        last,
        Some(fanin::Recorded::ParentFinished(
            fanin::ParentState::Completed
        ))
    );
    assert_eq!(fan.results(parent.parent).unwrap().len(), 3);
    assert_eq!(queue.stats("fixture.next").unwrap().ready, 1);

    // The feeder's stored answer.
    let sink = horos_feeder::TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 1);

    // The VRAM ledger's lease.
    let ledger = horos_gpu_alloc::ledger::VramLedger::open(&db).unwrap();
    assert_eq!(ledger.leases().unwrap().len(), 1);
    assert_eq!(ledger.free_mb(0).unwrap(), 16_000);
    drop(ledger);

    // The coordinator's settings (stored `false` beats the configured `true`) and its queued job.
    let settings = horos_coordinator::settings::Settings::load(
        Some(horos_coordinator::settings::open_store(&db).unwrap()),
        true,
    )
    .unwrap();
    assert!(!settings.allow_cloud_fallback());
    assert_eq!(
        queue
            .stats(&format!("{}chat", horos_coordinator::JOB_QUEUE_PREFIX))
            .unwrap()
            .ready,
        1
    );
    drop(fan);
    drop(queue);
    drop(pipeline);

    // Every namespace now has its version row.
    let want: Vec<(String, i64)> = [
        "fanin",
        "horos_coordinator",
        "horos_feeder",
        "horos_gpu_alloc",
        "ingest_pipeline",
        "squeueha",
    ]
    .iter()
    // The coordinator's tables gained the job index (2), usage (3), jobs' owners (4) and the
    // measured swap costs (5) since that release, the
    // store its documents' exact paths and deleted ids (2), compact visual vectors (3), each
    // page's reader (4), PostgreSQL's full text as FTS5's (5, nothing to do on SQLite), the
    // index of chunks without a vector (6), the visual change counter (7), the failure of a
    // page that failed alone (8) and each document's collection (9).
    .map(|n| {
        let v = match *n {
            "horos_coordinator" => 5,
            "ingest_pipeline" => 9,
            // The feeder's results, then the deep health check's row (2).
            "horos_feeder" => 2,
            _ => 1,
        };
        (n.to_string(), v)
    })
    .collect();
    assert_eq!(versions(&db), want);
    let conn = rusqlite::Connection::open(&db).unwrap();
    for table in ["coord_jobs", "coord_usage"] {
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "{table} created by the upgrade");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_a_newer_namespace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_fixture(dir.path());
    drop(open_pipeline(dir.path(), &db).unwrap());
    let bump = |ns: &str, v: i64| {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "INSERT OR REPLACE INTO squeueha_schema (namespace, version, applied_at)
             VALUES (?1, ?2, 0)",
            rusqlite::params![ns, v],
        )
        .unwrap();
    };
    let too_new = |e: &squeueha::Error, ns: &str| matches!(e, squeueha::Error::SchemaTooNew { namespace, found: 2, supported: 1 } if namespace == ns);

    bump("ingest_pipeline", 10);
    let err = open_pipeline(dir.path(), &db).err().unwrap();
    assert!(
        matches!(
            &err,
            ingest_pipeline::pipeline::PipelineError::Store(
                ingest_pipeline::store::StoreError::Database(e)
            ) if matches!(e, squeueha::Error::SchemaTooNew { namespace, found: 10, supported: 9 } if namespace == "ingest_pipeline")
        ),
        "{err:?}"
    );
    bump("ingest_pipeline", 9);

    bump("horos_feeder", 3);
    let queue = squeueha::Queue::open(&db).unwrap();
    let err = horos_feeder::TableSink::new(queue.clone()).unwrap_err();
    assert!(
        matches!(&err, horos_feeder::Error::Queue(squeueha::Error::SchemaTooNew { namespace, found: 3, supported: 2 }) if namespace == "horos_feeder"),
        "{err:?}"
    );
    drop(queue);

    bump("horos_coordinator", 6);
    assert!(horos_coordinator::settings::open_store(&db).is_err());

    bump("squeueha", 2);
    let err = squeueha::Queue::open(&db).unwrap_err();
    assert!(too_new(&err, "squeueha"), "{err:?}");
}
