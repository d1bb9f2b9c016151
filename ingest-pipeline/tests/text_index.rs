//! The text-vector index kept in memory (`store::TextVectorIndex`) against its store, on a
//! SQLite file and on PostgreSQL (skipped without `HOROS_PG_URL`): pages written and deleted
//! while questions run are found at once and never returned once deleted, and a pipeline opened
//! again on the same store builds the index to the same answers.
#![allow(clippy::unwrap_used)]

#[path = "../../squeueha/tests/common/mod.rs"]
mod common;
#[path = "common/mod.rs"]
mod helpers;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{Backend, Db, off_runtime};
use helpers::CountingReader;
use ingest_pipeline::chunk::{ChunkConfig, chunk_text};
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::store::{self, PageImage, Reads, StoreError, TextVectorIndex};
use ingest_pipeline::vision::Reading;
use squeueha::{Config, Queue, QueueTx};

on_both_backends! {
    sync: [
        a_new_page_is_found_at_once_and_a_deleted_one_never_returned_while_questions_run,
        a_pipeline_opened_again_on_the_store_gives_the_same_answers,
    ],
    async: [],
}

const DIM: usize = 8;

fn open(b: Backend) -> (Db, Queue) {
    let db = Db::new(b);
    let q = db.open(Config::default());
    off_runtime(|| write(&q, store::migrate_in));
    (db, q)
}

fn write<T>(q: &Queue, mut f: impl FnMut(&mut QueueTx<'_>) -> Result<T, StoreError>) -> T {
    q.transaction(|tx| f(tx)).unwrap()
}

/// The vector of document number `i`: a direction of its own in the first plane, so that it
/// alone has cosine 1 to the question made of it.
fn vector(i: usize) -> Vec<f32> {
    let mut v = vec![0.05; DIM];
    let angle = i as f32 * 0.047;
    v[0] = angle.cos();
    v[1] = angle.sin();
    v
}

/// A document of one page with one chunk: its text stored in one transaction, its vector in a
/// later one, as the stages do.
fn add_document(q: &Queue, i: usize) -> i64 {
    let (doc, chunk) = write(q, |tx| text_in(tx, i));
    write(q, |tx| {
        store::store_chunk_vectors(tx, &[chunk], &[vector(i)], "m")
    });
    doc
}

/// Document number `i` with its page's text and its chunk's vector, in the caller's
/// transaction.
fn document_in(tx: &mut QueueTx<'_>, i: usize) -> Result<i64, StoreError> {
    let (doc, chunk) = text_in(tx, i)?;
    store::store_chunk_vectors(tx, &[chunk], &[vector(i)], "m")?;
    Ok(doc)
}

/// Document number `i` with its page's text (one chunk), in the caller's transaction: the
/// document's id and its chunk's.
fn text_in(tx: &mut QueueTx<'_>, i: usize) -> Result<(i64, i64), StoreError> {
    {
        let (doc, _) = store::insert_document(tx, &format!("sha-{i}"), "t", "/x.pdf")?;
        store::set_page_count(tx, doc.id, 1)?;
        store::insert_page(
            tx,
            &PageImage {
                doc_id: doc.id,
                page_no: 1,
                width: 1,
                height: 1,
                image_bytes: 1,
                image_path: "x.png",
                tiles: 1,
            },
        )?;
        let text = format!("walrus number {i}");
        let chunks = chunk_text(&text, &ChunkConfig::default());
        let reading = Reading {
            text,
            ..Reading::default()
        };
        store::store_page_text(tx, doc.id, 1, &reading, "t", &chunks)?;
        let ids = store::page_chunks(tx, doc.id, 1)?;
        Ok((doc.id, ids[0].0))
    }
}

fn a_new_page_is_found_at_once_and_a_deleted_one_never_returned_while_questions_run(b: Backend) {
    let (_db, q) = open(b);
    let index = TextVectorIndex::new();
    index.sync(&mut Reads(q.clone())).unwrap();
    // Deleted documents, recorded once their deletion committed.
    let deleted = Arc::new(Mutex::new(HashSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Questions asked all along from another thread: none returns a page deleted before it
    // was asked.
    let asker = {
        let (index, q, deleted, stop) = (index.clone(), q.clone(), deleted.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut asked = 0;
            let mut r = Reads(q);
            while !stop.load(Ordering::SeqCst) || asked == 0 {
                let gone: HashSet<i64> = deleted.lock().unwrap().clone();
                for hit in index.search(&mut r, &vector(asked % 40), 20).unwrap() {
                    assert!(
                        !gone.contains(&hit.doc_id),
                        "deleted {} returned",
                        hit.doc_id
                    );
                }
                asked += 1;
            }
            asked
        })
    };
    let mut r = Reads(q.clone());
    let mut docs = Vec::new();
    for i in 0..40 {
        let doc = add_document(&q, i);
        docs.push(doc);
        let hits = index.search(&mut r, &vector(i), 3).unwrap();
        assert_eq!(hits[0].doc_id, doc, "the new page first at once: {hits:?}");
        assert!((hits[0].score - 1.0).abs() < 1e-4, "{hits:?}");
        if i >= 2 && i % 3 != 0 {
            // Deleted behind the index's back (as another node would).
            let old = docs[i - 2];
            write(&q, |tx| store::delete_document(tx, old));
            deleted.lock().unwrap().insert(old);
            let hits = index.search(&mut r, &vector(i - 2), 40).unwrap();
            assert!(hits.iter().all(|h| h.doc_id != old), "{old}: {hits:?}");
        }
    }
    stop.store(true, Ordering::SeqCst);
    let asked = asker.join().unwrap();
    assert!(asked > 0);
    // Every answer ranks as the full scan of the store (pages at equal cosines in either order).
    let live: Vec<(usize, i64)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (i, *d))
        .filter(|(_, d)| !deleted.lock().unwrap().contains(d))
        .collect();
    for i in 0..40 {
        let got = index.search(&mut r, &vector(i), 5).unwrap();
        let want = store::search_vectors(&mut r, &vector(i), 5).unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g.score - w.score).abs() < 1e-5, "{got:?} {want:?}");
            let (n, _) = live.iter().find(|(_, d)| *d == g.doc_id).unwrap();
            assert!((cosine(&vector(i), &vector(*n)) - g.score).abs() < 1e-5);
        }
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    f64::from(ingest_pipeline::embed::cosine(a, b))
}

type TestPipeline = Pipeline<CountingReader, HashingEmbedder, PixelPatchFallback>;

fn open_pipeline(db: &Db, dir: &std::path::Path) -> TestPipeline {
    let cfg = PipelineConfig::new(dir);
    let reader = CountingReader {
        calls: Arc::default(),
        text: "unused",
        delay: std::time::Duration::ZERO,
    };
    Pipeline::open_on(
        db.open(cfg.queue.clone()),
        cfg,
        reader,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap()
}

fn a_pipeline_opened_again_on_the_store_gives_the_same_answers(b: Backend) {
    let (db, q) = open(b);
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<i64> = (0..30).map(|i| add_document(&q, i)).collect();
    let first = open_pipeline(&db, dir.path());
    // A one-shot command's pipeline never builds it: its questions scan the store.
    let mut r = first.reads();
    assert_eq!(
        first.text_index().search(&mut r, &vector(5), 5).unwrap(),
        store::search_vectors(&mut r, &vector(5), 5).unwrap()
    );
    assert!(first.text_index().is_empty());
    // A long-lived one builds it at start-up.
    assert_eq!(first.build_text_index().unwrap().rows, 30);
    // The pipeline's own deletion leaves the index at once (no question asked since).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert!(rt.block_on(first.delete(docs[3])).unwrap().is_some());
    assert_eq!(first.text_index().len(), 29);
    let ask = |p: &TestPipeline| -> Vec<Vec<(i64, u32, String)>> {
        let mut r = p.reads();
        (0..30)
            .map(|i| {
                p.text_index()
                    .search(&mut r, &vector(i), 5)
                    .unwrap()
                    .into_iter()
                    .map(|h| (h.doc_id, h.page_no, format!("{:.5}", h.score)))
                    .collect()
            })
            .collect()
    };
    let before = ask(&first);
    assert!(before.iter().flatten().all(|h| h.0 != docs[3]));
    let again = open_pipeline(&db, dir.path());
    again.build_text_index().unwrap();
    assert_eq!(again.text_index().len(), 29);
    assert_eq!(ask(&again), before);
}

/// PostgreSQL with two writers: a chunk whose transaction commits after a later chunk's was
/// read (ids committed out of their order) is found at the next question, not at a restart.
#[test]
fn a_chunk_committed_after_a_higher_id_was_read_is_found_at_the_next_question() {
    let Some(b) = Backend::postgres("text_index_out_of_order") else {
        return;
    };
    let (_db, q) = open(b);
    let index = TextVectorIndex::new();
    let mut r = Reads(q.clone());
    index.sync(&mut r).unwrap();
    let (inserted, commit) = (
        Arc::new(std::sync::Barrier::new(2)),
        Arc::new(std::sync::Barrier::new(2)),
    );
    // A writer that takes its chunk's id first and commits last.
    let slow = {
        let (q, inserted, commit) = (q.clone(), Arc::clone(&inserted), Arc::clone(&commit));
        std::thread::spawn(move || {
            write(&q, |tx| {
                let doc = document_in(tx, 1)?;
                inserted.wait();
                commit.wait();
                Ok(doc)
            })
        })
    };
    inserted.wait();
    let fast = add_document(&q, 2);
    let hits = index.search(&mut r, &vector(2), 1).unwrap();
    assert_eq!(hits[0].doc_id, fast, "{hits:?}");
    commit.wait();
    let late = slow.join().unwrap();
    let hits = index.search(&mut r, &vector(1), 1).unwrap();
    assert_eq!(
        hits[0].doc_id, late,
        "the late commit found at once: {hits:?}"
    );
    assert!((hits[0].score - 1.0).abs() < 1e-4, "{hits:?}");
}
