//! The store and the pipeline on both backends: every test runs on a SQLite file
//! (`sqlite::name`) and on a PostgreSQL schema of its own (`postgres::name`, skipped without
//! `HOROS_PG_URL`), through squeueha's conformance harness. The pipeline tests run two
//! pipelines on one database, as two machines sharing it would (one work directory, shared).
#![allow(clippy::unwrap_used)]

#[path = "../../squeueha/tests/common/mod.rs"]
mod common;
#[path = "common/mod.rs"]
mod helpers;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Backend, Db, off_runtime};
use helpers::{CountingReader, TestPage, mixed_pdf, prose, rasterised};
use ingest_pipeline::chunk::{ChunkConfig, chunk_text};
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::maxsim::MultiVector;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::store::{self, DocStatus, EmbedStep, PageImage, Reads, StoreError};
use ingest_pipeline::tiling::{Rect, Tile};
use ingest_pipeline::vision::{ReadBy, Reading};
use squeueha::{Config, Queue, QueueTx};

on_both_backends! {
    sync: [
        a_document_is_stored_searched_reported_and_completed_once,
        typed_text_never_fails_and_raw_syntax_is_refused_alike,
        a_deleted_document_leaves_no_row_and_its_id_is_never_given_again,
        a_delete_while_another_node_stores_a_page_leaves_no_row,
        two_handles_completing_one_page_from_threads_complete_it_once,
        the_centroid_index_follows_added_and_deleted_pages_and_a_restart,
        questions_asked_while_pages_come_and_go_see_every_commit,
        pages_stored_before_schema_7_are_counted_by_its_change_counter,
        a_search_reads_only_the_collections_it_is_given,
    ],
    async: [
        two_pipelines_on_one_database_ingest_each_page_once,
    ],
}

/// A queue on `b` with the store's tables.
fn open(b: Backend) -> (Db, Queue) {
    let db = Db::new(b);
    let q = db.open(Config::default());
    off_runtime(|| write(&q, store::migrate_in));
    (db, q)
}

/// Runs `f` in one transaction of `q`.
fn write<T>(q: &Queue, mut f: impl FnMut(&mut QueueTx<'_>) -> Result<T, StoreError>) -> T {
    q.transaction(|tx| f(tx)).unwrap()
}

fn page(doc_id: i64, page_no: u32, tiles: u32) -> PageImage<'static> {
    PageImage {
        doc_id,
        page_no,
        width: 10,
        height: 10,
        image_bytes: 5,
        image_path: "x.png",
        tiles,
    }
}

fn tile(index: u32, side: u32) -> Tile {
    let rect = Rect {
        x: 0,
        y: 0,
        w: side,
        h: side,
    };
    Tile {
        index,
        row: 0,
        col: index,
        rect,
        owned: rect,
    }
}

fn reading(text: &str) -> Reading {
    Reading {
        text: text.into(),
        ..Reading::default()
    }
}

fn a_document_is_stored_searched_reported_and_completed_once(b: Backend) {
    let (_db, q) = open(b);
    let texts = ["the quick brown fox", "a table of marshalling types"];
    let doc = write(&q, |tx| {
        let (doc, new) = store::insert_document(tx, "abc", "Manual", "/x/manual.pdf")?;
        assert!(new);
        let (again, new) = store::insert_document(tx, "abc", "Manual", "/x/manual.pdf")?;
        assert!(!new);
        assert_eq!(again.id, doc.id);
        store::set_page_count(tx, doc.id, 2)?;
        for (i, text) in texts.iter().enumerate() {
            let p = i as u32 + 1;
            assert!(store::insert_page(tx, &page(doc.id, p, 1))?);
            assert!(!store::insert_page(tx, &page(doc.id, p, 1))?);
            assert!(store::record_page_reading(tx, doc.id, p, &reading(text))?);
            assert!(!store::record_page_reading(tx, doc.id, p, &reading(text))?);
            let chunks = chunk_text(text, &ChunkConfig::default());
            let mut stored = reading(text);
            stored.read_by = Some(ReadBy::Tesseract);
            stored.rotation = 90;
            if p == 2 {
                stored.tables = vec![serde_json::json!({"header": ["IDL", "ML"]})];
                stored.figures = vec!["a chart of walruses".into()];
            }
            assert!(store::store_page_text(
                tx, doc.id, p, &stored, "t", &chunks
            )?);
            assert!(!store::store_page_text(
                tx, doc.id, p, &stored, "t", &chunks
            )?);
            let ids: Vec<i64> = store::page_chunks(tx, doc.id, p)?
                .iter()
                .map(|c| c.0)
                .collect();
            let v = if p == 1 { [1.0, 0.0] } else { [0.0, 1.0] };
            store::store_chunk_vectors(tx, &ids, &[v.to_vec()], "m")?;
            let mv = MultiVector {
                dim: 2,
                data: v.to_vec(),
            };
            store::store_page_vectors(tx, doc.id, p, &mv, "m")?;
            // Replaced, not added.
            store::store_page_vectors(tx, doc.id, p, &mv, "m")?;
        }
        store::add_stage_time(tx, doc.id, "image_to_ocr", 2.0, 1.5)?;
        store::add_stage_time(tx, doc.id, "image_to_ocr", 2.0, 1.5)?;
        store::add_stage_time(tx, doc.id, "embed_text", 1.0, 0.5)?;
        Ok(doc)
    });
    let done = write(&q, |tx| {
        let mut ends = vec![store::finish_rendering(tx, doc.id)?];
        for (p, step) in [
            (1, EmbedStep::Text),
            (1, EmbedStep::Visual),
            (2, EmbedStep::Visual),
            (2, EmbedStep::Text),
            (2, EmbedStep::Text),
        ] {
            ends.push(store::finish_step(tx, doc.id, p, step)?);
        }
        Ok(ends)
    });
    assert_eq!(done, [false, false, false, false, true, false]);

    let mut r = Reads(q.clone());
    let d = store::document(&mut r, doc.id).unwrap().unwrap();
    assert_eq!(
        (d.status, d.pages, d.done_pages),
        (DocStatus::Done, Some(2), 2)
    );
    assert_eq!(d.source_path(), std::path::Path::new("/x/manual.pdf"));
    assert!(!store::has_pending_documents(&mut r).unwrap());
    // Full text: one page, its snippet marked; the figure's words are indexed too.
    let hits = store::search_text(&mut r, "marshalling", 5).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].page_no, 2);
    assert!(hits[0].snippet.contains("[marshalling]"), "{hits:?}");
    assert!(hits[0].score > 0.0);
    assert_eq!(
        store::search_user_text(&mut r, "walrus*", 5).unwrap()[0].page_no,
        2
    );
    assert_eq!(
        store::search_user_text(&mut r, "\"brown fox\"", 5).unwrap()[0].page_no,
        1
    );
    assert!(
        store::search_user_text(&mut r, "\"fox brown\"", 5)
            .unwrap()
            .is_empty()
    );
    // FTS5's precedence on both: AND binds tighter than OR.
    let either = store::search_text(&mut r, "\"brown\" \"fox\" OR \"marshalling\"", 5).unwrap();
    assert_eq!(either.len(), 2, "{either:?}");
    // Every word on no page: the pages holding any.
    let any = store::search_user_text(&mut r, "fox marshalling", 5).unwrap();
    assert_eq!(any.len(), 2, "{any:?}");
    assert_eq!(
        store::search_vectors(&mut r, &[0.1, 0.9], 5).unwrap()[0].page_no,
        2
    );
    let q_vec = MultiVector {
        dim: 2,
        data: vec![0.9, 0.1],
    };
    let hits = store::search_visual(&mut r, "m", &q_vec, 1, None, 1).unwrap();
    assert_eq!((hits[0].doc_id, hits[0].page_no), (doc.id, 1));
    let mine = store::search_visual(&mut r, "m", &q_vec, 1, Some(&[doc.id, 999]), 1).unwrap();
    assert_eq!(mine, hits);
    assert!(
        store::search_visual(&mut r, "m", &q_vec, 1, Some(&[999]), 1)
            .unwrap()
            .is_empty()
    );
    assert_eq!(store::load_visual_index(&mut r, 2).unwrap().len(), 2);
    let cache = store::VisualIndexCache::new();
    let first = cache.index(&mut r, "m", 2).unwrap();
    assert!(Arc::ptr_eq(&first, &cache.index(&mut r, "m", 2).unwrap()));
    assert_eq!(store::visual_models(&mut r).unwrap(), [("m".into(), 2, 2)]);
    assert_eq!(store::page_tables(&mut r, doc.id, 2).unwrap().len(), 1);
    let pages = store::document_pages(&mut r, doc.id).unwrap();
    assert_eq!(pages.len(), 2);
    assert_eq!(
        (pages[0].read_by, pages[0].rotation, pages[0].chars),
        (Some(ReadBy::Tesseract), 90, texts[0].len())
    );
    let md = store::document_markdown(&mut r, doc.id).unwrap().unwrap();
    assert!(md.to_markdown().contains("| IDL | ML |"), "{md:?}");
    assert!(md.to_markdown().contains("*Figure: a chart of walruses*"));
    let rep = store::report(&mut r, doc.id, &store::CostModel::default()).unwrap();
    assert_eq!((rep.pages, rep.chunks, rep.tables), (2, 2, 1));
    let stages: Vec<(&str, u64)> = rep.stages.iter().map(|s| (&*s.stage, s.jobs)).collect();
    assert_eq!(stages, [("image_to_ocr", 2), ("embed_text", 1)]);
    assert!((rep.inference_seconds - 3.5).abs() < 1e-9);
    // A NUL a reader gave is dropped, on both backends.
    write(&q, |tx| {
        store::insert_page(tx, &page(doc.id, 3, 1))?;
        let nul = reading("nul\0byte zebra");
        store::store_page_text(
            tx,
            doc.id,
            3,
            &nul,
            "t",
            &chunk_text("nul\0byte", &ChunkConfig::default()),
        )
    });
    assert_eq!(
        store::page_text(&mut r, doc.id, 3).unwrap().unwrap(),
        "nulbyte zebra"
    );
    assert_eq!(
        store::search_user_text(&mut r, "zebra", 5).unwrap()[0].page_no,
        3
    );
    // The reads cannot write.
    assert!(store::fail_document(&mut r, doc.id, "x").is_err());
}

fn typed_text_never_fails_and_raw_syntax_is_refused_alike(b: Backend) {
    let (_db, q) = open(b);
    write(&q, |tx| {
        let (doc, _) = store::insert_document(tx, "abc", "t", "/x.pdf")?;
        for (i, t) in [
            "operators AND OR NOT near the text column",
            "C++ templates and the standard library",
            "marshalling types in a table",
            "release 3.14 of example.com, see report_2024.pdf or ask ops@mail.org (state-of-the-art)",
            "une crème brûlée au café, naïve Škoda in Hà Nội, «bonjour» l’hôtel mot—mot",
        ]
        .iter()
        .enumerate()
        {
            let p = i as u32 + 1;
            store::insert_page(tx, &page(doc.id, p, 1))?;
            store::store_page_text(tx, doc.id, p, &reading(t), "t", &[])?;
        }
        Ok(())
    });
    let mut r = Reads(q.clone());
    for raw in [
        "C++",
        "\"unbalanced",
        "AND OR NOT",
        "*",
        "NEAR(",
        "col:term",
    ] {
        assert!(store::search_text(&mut r, raw, 5).is_err(), "{raw}");
    }
    let mut pages = |text: &str| -> Vec<u32> {
        store::search_user_text(&mut r, text, 10)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .iter()
            .map(|h| h.page_no)
            .collect()
    };
    assert_eq!(pages("C++"), [2]);
    assert_eq!(pages("\"marshalling"), [3]);
    assert_eq!(pages("AND OR NOT"), [1]);
    assert_eq!(pages("text:column"), [1]);
    assert_eq!(pages("NEAR("), [1]);
    assert_eq!(pages("marsh*"), [3]);
    // Words between punctuation are words on both backends (PostgreSQL's own parser would keep
    // `3.14` or `example.com` whole, and a search for them or for their parts would miss).
    for text in [
        "3.14",
        "14",
        "example.com",
        "example",
        "report_2024.pdf",
        "2024",
        "ops@mail.org",
        "mail",
        "state-of-the-art",
        "art",
        "\"of the\"",
    ] {
        assert_eq!(pages(text), [4], "{text}");
    }
    assert!(pages("\"3.15\"").is_empty());
    // Latin letters are found with or without their diacritics on both backends.
    for text in [
        "cafe",
        "café",
        "CAFÉ",
        "\"creme brulee\"",
        "\"crème brûlée\"",
        "naive",
        "skoda",
        "Ha Noi",
        "Nội",
        "caf*",
        "brû*",
        "bonjour",
        "hotel",
        "\"mot mot\"",
    ] {
        assert_eq!(pages(text), [5], "{text}");
    }
    assert!(pages("\"brûlée crème\"").is_empty());
    assert!(pages("*").is_empty());
    assert!(pages("").is_empty());
    assert!(pages(" ?! () ^ - + ").is_empty());
    assert_eq!(pages("tem\u{0}plates\u{7}library\x1b[0m"), [2]);
    assert_eq!(pages("'; DROP ip_pages; -- \\ templates"), [2]);
    assert_eq!(pages(&"library ".repeat(100_000)), [2]);
    assert!(pages(&"x".repeat(1_000_000)).is_empty());
    // The snippet marks what was found, in the page's own text.
    let mut snippet = |text: &str| -> String {
        store::search_user_text(&mut r, text, 1).unwrap()[0]
            .snippet
            .clone()
    };
    assert!(snippet("3.14").contains("[3.14]"), "{}", snippet("3.14"));
    assert!(snippet("cafe").contains("[café]"), "{}", snippet("cafe"));
    assert!(snippet("Noi").contains("Hà [Nội]"), "{}", snippet("Noi"));
}

/// A PostgreSQL store an earlier release made (schema 4, whose full-text column kept `3.14`
/// whole and `café` accented) finds its pages by their words between punctuation and without
/// their diacritics once this build migrates it.
#[test]
fn pages_indexed_before_schema_5_are_found_by_their_punctuated_words_after_it() {
    use squeueha::{Migration, Migrations};
    const SAME: &str = "SELECT 1";
    const fn step(version: i64, sql: &'static str) -> Migration {
        Migration { version, sql }
    }
    // Schema 4 as the earlier release wrote it (its PostgreSQL steps 2 to 4 were empty).
    const SQLITE_4: [Migration; 4] = [step(1, SAME), step(2, SAME), step(3, SAME), step(4, SAME)];
    const POSTGRES_4: [Migration; 4] = [
        step(1, store::POSTGRES_SCHEMA),
        step(2, SAME),
        step(3, SAME),
        step(4, SAME),
    ];
    const EARLIER: Migrations =
        Migrations::new("ingest_pipeline", &SQLITE_4).with_postgres(&POSTGRES_4);
    let Some(b) = Backend::postgres("pages_indexed_before_schema_5") else {
        return;
    };
    let db = Db::new(b);
    let q = db.open(Config::default());
    off_runtime(|| {
        write(&q, |tx| {
            EARLIER.apply_in_tx(tx)?;
            // The document's row as schema 4 held it (no collection yet).
            let rows = tx.query(
                "INSERT INTO ip_documents (sha256, title, path, created_at)
                 VALUES ('old', 't', '/old.pdf', 0) RETURNING id",
                squeueha::params![],
            )?;
            let id: i64 = rows[0].get(0)?;
            store::insert_page(tx, &page(id, 1, 1))?;
            store::store_page_text(
                tx,
                id,
                1,
                &reading("release 3.14 of example.com, café"),
                "t",
                &[],
            )
        })
    });
    let mut r = Reads(q.clone());
    let pages =
        |r: &mut Reads, text: &str| -> usize { store::search_user_text(r, text, 5).unwrap().len() };
    assert_eq!(pages(&mut r, "release"), 1);
    assert_eq!(pages(&mut r, "3.14"), 0, "schema 4 kept `3.14` whole");
    assert_eq!(pages(&mut r, "café"), 1);
    assert_eq!(pages(&mut r, "cafe"), 0, "schema 4 kept the accents");
    off_runtime(|| write(&q, store::migrate_in));
    for text in ["3.14", "example.com", "com", "release", "cafe", "café"] {
        assert_eq!(pages(&mut r, text), 1, "{text}");
    }
}

fn a_deleted_document_leaves_no_row_and_its_id_is_never_given_again(b: Backend) {
    let (_db, q) = open(b);
    let (first, second) = write(&q, |tx| {
        let (a, _) = store::insert_document(tx, "a", "a", "/a.pdf")?;
        let (b, _) = store::insert_document(tx, "b", "b", "/b.pdf")?;
        for doc in [a.id, b.id] {
            store::set_page_count(tx, doc, 1)?;
            store::insert_page(tx, &page(doc, 1, 2))?;
            store::set_page_fan_in(tx, doc, 1, 77)?;
            for index in 0..2 {
                let tile = tile(index, 5);
                store::record_tile_reading(tx, doc, 1, &tile, &reading("walrus"))?;
            }
            let chunks = chunk_text("walrus tusks", &ChunkConfig::default());
            store::store_page_text(tx, doc, 1, &reading("walrus tusks"), "t", &chunks)?;
            let mv = MultiVector {
                dim: 2,
                data: vec![1.0, 0.0],
            };
            store::store_page_vectors(tx, doc, 1, &mv, "m")?;
            store::add_stage_time(tx, doc, "s", 1.0, 1.0)?;
        }
        Ok((a.id, b.id))
    });
    let deleted = write(&q, |tx| store::delete_document(tx, second)).unwrap();
    assert_eq!(deleted.fan_in_parents, [77]);
    assert_eq!(deleted.image_paths, [std::path::PathBuf::from("x.png")]);
    let mut r = Reads(q.clone());
    let rows = store::rows_of_document(&mut r, second).unwrap();
    assert!(rows.len() >= 9, "{rows:?}");
    assert!(rows.iter().all(|(_, n)| *n == 0), "{rows:?}");
    // The other document keeps everything; search finds only it.
    assert!(
        store::rows_of_document(&mut r, first)
            .unwrap()
            .iter()
            .any(|(_, n)| *n > 0)
    );
    let hits = store::search_user_text(&mut r, "walrus", 5).unwrap();
    assert_eq!(hits.iter().map(|h| h.doc_id).collect::<Vec<_>>(), [first]);
    assert!(write(&q, |tx| store::delete_document(tx, second)).is_none());
    // A new document, even with the deleted one's bytes, gets a new id.
    let (third, new) = write(&q, |tx| store::insert_document(tx, "b", "b", "/b.pdf"));
    assert!(new);
    assert!(third.id > second, "{} after {second}", third.id);
}

/// A page of 12 vectors of 16 values around 3 of 24 "concepts" (`seed` picks them).
fn concept_page(seed: u64) -> MultiVector {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    let concepts: Vec<usize> = (0..3).map(|i| ((seed as usize) * 7 + i * 5) % 24).collect();
    let mut data = Vec::new();
    for v in 0..12 {
        let c = concepts[v % 3];
        let mut row: Vec<f32> = (0..16)
            .map(|d| if d == c % 16 { 1.0 } else { 0.0 } + if d == (c + 8) % 16 { (c / 16) as f32 } else { 0.0 } + 0.05 * next())
            .collect();
        let n = row.iter().map(|a| a * a).sum::<f32>().sqrt();
        row.iter_mut().for_each(|a| *a /= n);
        data.extend(row);
    }
    MultiVector { dim: 16, data }
}

/// Visual search above `scan_max_pages` (0 here: always) goes through the centroid index: a page
/// stored is found by its own vectors at once, a deleted document's pages are never returned,
/// and a new cache on the same store (a restarted process) gives the same answers.
fn the_centroid_index_follows_added_and_deleted_pages_and_a_restart(b: Backend) {
    let (_db, q) = open(b);
    let settings = store::VisualIndexSettings {
        scan_max_pages: 0,
        ..Default::default()
    };
    let docs: Vec<i64> = write(&q, |tx| {
        let mut docs = Vec::new();
        for d in 0..6u64 {
            let (doc, _) = store::insert_document(tx, &format!("d{d}"), "t", "/d.pdf")?;
            for p in 1..=4u32 {
                // A page row first: PostgreSQL's store gives no vectors to a page it lacks.
                store::insert_page(tx, &page(doc.id, p, 1))?;
                let mv = concept_page(d * 4 + u64::from(p));
                store::store_page_vectors(tx, doc.id, p, &mv, "col")?;
            }
            docs.push(doc.id);
        }
        Ok(docs)
    });
    let mut r = Reads(q.clone());
    let cache = store::VisualIndexCache::with_settings(settings);
    let best = |r: &mut Reads, cache: &store::VisualIndexCache, seed: u64| {
        store::search_visual_cached(r, cache, "col", &concept_page(seed), 3, None, 2).unwrap()
    };
    // Every page finds itself first (its own vectors: exact MaxSim after the rerank).
    for d in 0..6u64 {
        for p in 1..=4u64 {
            let hits = best(&mut r, &cache, d * 4 + p);
            assert_eq!(
                (hits[0].doc_id, hits[0].page_no),
                (docs[d as usize], p as u32),
                "{hits:?}"
            );
        }
    }
    // A new document is found at once.
    let added = write(&q, |tx| {
        let (doc, _) = store::insert_document(tx, "new", "t", "/n.pdf")?;
        store::insert_page(tx, &page(doc.id, 1, 1))?;
        store::store_page_vectors(tx, doc.id, 1, &concept_page(99), "col")?;
        Ok(doc.id)
    });
    let hits = best(&mut r, &cache, 99);
    assert_eq!((hits[0].doc_id, hits[0].page_no), (added, 1), "{hits:?}");
    // A deleted one is never returned.
    write(&q, |tx| store::delete_document(tx, docs[2]));
    for seed in [9, 10, 11, 12, 99] {
        let hits = best(&mut r, &cache, seed);
        assert!(hits.iter().all(|h| h.doc_id != docs[2]), "{hits:?}");
    }
    // A restarted process (a new cache) answers the same.
    let fresh = store::VisualIndexCache::with_settings(settings);
    for seed in [1, 5, 13, 24, 99] {
        assert_eq!(best(&mut r, &cache, seed), best(&mut r, &fresh, seed));
    }
}

/// Pages added and deleted by one thread while another asks questions through the centroid
/// index: a question asked after a document's commit finds its page first, and one asked after a
/// delete's commit never returns its pages.
fn questions_asked_while_pages_come_and_go_see_every_commit(b: Backend) {
    let (_db, q) = open(b);
    let settings = store::VisualIndexSettings {
        scan_max_pages: 0,
        ..Default::default()
    };
    let add = |q: &Queue, seed: u64| {
        write(q, |tx| {
            let (doc, _) = store::insert_document(tx, &format!("s{seed}"), "t", "/d.pdf")?;
            store::insert_page(tx, &page(doc.id, 1, 1))?;
            store::store_page_vectors(tx, doc.id, 1, &concept_page(seed), "col")?;
            Ok(doc.id)
        })
    };
    // A collection to start from.
    let first: Vec<(i64, u64)> = (1..=12).map(|seed| (add(&q, seed), seed)).collect();
    // Published after each commit: the newest document and its seed, the deleted ones.
    let newest = std::sync::Mutex::new(*first.last().unwrap());
    let deleted = std::sync::Mutex::new(HashSet::<i64>::new());
    let done = std::sync::atomic::AtomicBool::new(false);
    let asked = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut live = first.clone();
            for seed in 13..=40u64 {
                let doc = add(&q, seed);
                live.push((doc, seed));
                *newest.lock().unwrap() = (doc, seed);
                if seed % 2 == 0 {
                    let (gone, _) = live.remove(0);
                    write(&q, |tx| store::delete_document(tx, gone));
                    deleted.lock().unwrap().insert(gone);
                }
                // At least one question after each commit.
                let before = asked.load(Ordering::SeqCst);
                let until = std::time::Instant::now() + Duration::from_secs(5);
                while asked.load(Ordering::SeqCst) < before + 2 && std::time::Instant::now() < until
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let cache = store::VisualIndexCache::with_settings(settings);
            let mut r = Reads(q.clone());
            while !done.load(Ordering::SeqCst) {
                let gone = deleted.lock().unwrap().clone();
                let (doc, seed) = *newest.lock().unwrap();
                let hits = store::search_visual_cached(
                    &mut r,
                    &cache,
                    "col",
                    &concept_page(seed),
                    5,
                    None,
                    2,
                )
                .unwrap();
                assert!(
                    hits.iter().all(|h| !gone.contains(&h.doc_id)),
                    "{hits:?} {gone:?}"
                );
                // Unless deleted since (only older documents are), the newest is found first.
                if !deleted.lock().unwrap().contains(&doc) {
                    assert_eq!(hits[0].doc_id, doc, "{hits:?}");
                }
                asked.fetch_add(1, Ordering::SeqCst);
            }
        });
    });
    assert!(
        asked.load(Ordering::SeqCst) > 5,
        "{} questions",
        asked.load(Ordering::SeqCst)
    );
}

/// One node stores a page's text and vectors in a transaction that is still open when another
/// node deletes the document: the delete waits for it and takes its rows too (none is left to be
/// found by search), and a write after the delete finds no page.
fn a_delete_while_another_node_stores_a_page_leaves_no_row(b: Backend) {
    let (db, q) = open(b);
    let doc = write(&q, |tx| {
        let (doc, _) = store::insert_document(tx, "d", "d", "/d.pdf")?;
        store::insert_page(tx, &page(doc.id, 1, 1))?;
        store::insert_page(tx, &page(doc.id, 2, 1))?;
        Ok(doc.id)
    });
    let other = db.open(Config::default());
    let mv = MultiVector {
        dim: 2,
        data: vec![1.0, 0.0],
    };
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            write(&q, |tx| {
                let chunks = chunk_text("narwhal tusks", &ChunkConfig::default());
                store::store_page_text(tx, doc, 1, &reading("narwhal tusks"), "t", &chunks)?;
                store::store_page_vectors(tx, doc, 1, &mv, "m")?;
                std::thread::sleep(Duration::from_millis(400));
                Ok(())
            })
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(write(&other, |tx| store::delete_document(tx, doc)).is_some());
        writer.join().unwrap();
    });
    // A stage's write after the delete: nothing recorded.
    write(&q, |tx| {
        assert!(!store::store_page_text(
            tx,
            doc,
            2,
            &reading("narwhal"),
            "t",
            &[]
        )?);
        store::store_page_vectors(tx, doc, 2, &mv, "m")?;
        assert!(!store::record_tile_reading(
            tx,
            doc,
            2,
            &tile(0, 1),
            &reading("narwhal")
        )?);
        Ok(())
    });
    let mut r = Reads(q.clone());
    let rows = store::rows_of_document(&mut r, doc).unwrap();
    if b == Backend::Postgres {
        assert!(rows.iter().all(|(_, n)| *n == 0), "{rows:?}");
    } else {
        // SQLite's one writer ran the stage's writes before or after the delete, never
        // beside it; vectors of a page not recorded are kept there, as before.
        let left: i64 = rows
            .iter()
            .filter(|(t, _)| *t != "ip_page_vectors" && *t != "ip_page_codes")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(left, 0, "{rows:?}");
    }
    assert!(
        store::search_user_text(&mut r, "narwhal", 5)
            .unwrap()
            .is_empty()
    );
}

fn two_handles_completing_one_page_from_threads_complete_it_once(b: Backend) {
    let (db, q) = open(b);
    const TILES: u32 = 16;
    let doc = write(&q, |tx| {
        let (doc, _) = store::insert_document(tx, "t", "t", "/t.pdf")?;
        store::insert_page(tx, &page(doc.id, 1, TILES))?;
        Ok(doc.id)
    });
    // Two handles, as two machines have: each records half of the tiles, one tile per
    // transaction, from two threads each.
    let handles = [q.clone(), db.open(Config::default())];
    let completions = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let q = &handles[(t % 2) as usize];
            let completions = &completions;
            s.spawn(move || {
                for index in (t..TILES).step_by(4) {
                    let tile = tile(index, 1);
                    let done = write(q, |tx| {
                        store::record_tile_reading(tx, doc, 1, &tile, &reading("w"))
                    });
                    if done {
                        completions.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(completions.load(Ordering::SeqCst), 1);
    let (_, tiles) = off_runtime(|| store::page_readings(&mut Reads(q.clone()), doc, 1)).unwrap();
    assert_eq!(tiles.len(), TILES as usize);
}

type TestPipeline = Pipeline<CountingReader, HashingEmbedder, PixelPatchFallback>;

async fn two_pipelines_on_one_database_ingest_each_page_once(b: Backend) {
    let db = Db::new(b);
    let shared = tempfile::tempdir().unwrap();
    let mut cfg = PipelineConfig::new(shared.path());
    // Scanned pages are cut into tiles: their readings meet from both pipelines.
    cfg.tiles.threshold_bytes = 20_000;
    let calls = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let mut nodes: Vec<TestPipeline> = Vec::new();
    for c in &calls {
        let q = db.open(cfg.queue.clone());
        let cfg = cfg.clone();
        // Slow enough that both pipelines take part.
        let reader = CountingReader {
            calls: c.clone(),
            text: "scanned walrus page",
            delay: Duration::from_millis(20),
        };
        let p = tokio::task::spawn_blocking(move || {
            Pipeline::open_on(
                q,
                cfg,
                reader,
                HashingEmbedder::default(),
                PixelPatchFallback::default(),
            )
        })
        .await
        .unwrap()
        .unwrap();
        nodes.push(p);
    }
    let running: Vec<_> = nodes.iter().map(|p| p.start()).collect();
    let mut ids = Vec::new();
    for i in 0..4usize {
        let mut last = prose(i, 20);
        last.push(format!("quartz crystals number {i}"));
        let pdf = mixed_pdf(&[
            TestPage::Text(prose(10 + i, 20)),
            TestPage::Image(rasterised(&prose(20 + i, 12), 150.0)),
            TestPage::Text(last),
        ]);
        let file = shared.path().join(format!("doc-{i}.pdf"));
        std::fs::write(&file, pdf).unwrap();
        // Submitted to either pipeline.
        let sub = nodes[i % 2].submit(&file).await.unwrap();
        ids.push(sub.document().id);
    }
    for (i, id) in ids.iter().enumerate() {
        let doc = nodes[(i + 1) % 2]
            .wait_for(*id, Duration::from_secs(300))
            .await
            .unwrap();
        assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
        assert_eq!((doc.pages, doc.done_pages), (Some(3), 3), "{doc:?}");
    }
    for r in running {
        r.shutdown().await;
    }
    let per_node: Vec<usize> = calls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    let checks = {
        let (p0, p1) = (nodes[0].clone(), nodes[1].clone());
        let ids = ids.clone();
        tokio::task::spawn_blocking(move || {
            let mut r = p1.reads();
            let mut tiles = 0;
            for id in &ids {
                let rep = p0.report(*id).unwrap();
                tiles += rep.tiles as usize;
                assert_eq!(rep.pages, 3);
                // Each page stored and indexed once.
                let indexed =
                    r.0.query(
                        "SELECT count(*) FROM ip_page_fts WHERE doc_id = ?1",
                        squeueha::params![*id],
                    )
                    .unwrap()[0]
                        .get::<i64>(0)
                        .unwrap();
                assert_eq!(indexed, 3, "document {id}");
                let pages = store::document_pages(&mut r, *id).unwrap();
                let by: Vec<_> = pages.iter().map(|p| p.read_by).collect();
                assert_eq!(
                    by,
                    [
                        Some(ReadBy::TextLayer),
                        Some(ReadBy::Tesseract),
                        Some(ReadBy::TextLayer)
                    ]
                );
                assert!(pages[1].tiles > 1, "{pages:?}");
            }
            // Found from either pipeline, each the page that holds the words.
            let mut found = HashSet::new();
            for (i, id) in ids.iter().enumerate() {
                let mut reads = if i % 2 == 0 { p0.reads() } else { p1.reads() };
                let hits =
                    store::search_user_text(&mut reads, &format!("quartz crystals number {i}"), 1)
                        .unwrap();
                assert_eq!((hits[0].doc_id, hits[0].page_no), (*id, 3), "{hits:?}");
                found.insert(hits[0].doc_id);
            }
            assert_eq!(found.len(), ids.len());
            assert_eq!(
                store::load_visual_index(&mut r, PixelPatchFallback::default().dim())
                    .unwrap()
                    .len(),
                12
            );
            // No job left and none dead.
            for s in ingest_pipeline::pipeline::Stage::ALL {
                let st = p0.queue().stats(s.queue()).unwrap();
                assert_eq!(
                    (st.ready, st.in_flight, st.dead),
                    (0, 0, 0),
                    "{s:?}: {st:?}"
                );
            }
            tiles
        })
        .await
        .unwrap()
    };
    // Every tile read once, by one pipeline or the other.
    assert_eq!(per_node.iter().sum::<usize>(), checks, "{per_node:?}");
    // A document deleted through one pipeline is gone for both, its rows and its page images.
    let doc_dir = cfg.work_dir.join(format!("doc-{}", ids[0]));
    assert!(doc_dir.exists());
    let deleted = nodes[1].delete(ids[0]).await.unwrap().unwrap();
    assert_eq!(deleted.id, ids[0]);
    assert!(!doc_dir.exists());
    let other = nodes[0].clone();
    let rows = tokio::task::spawn_blocking(move || {
        store::rows_of_document(&mut other.reads(), deleted.id).unwrap()
    })
    .await
    .unwrap();
    assert!(rows.iter().all(|(_, n)| *n == 0), "{rows:?}");
}

/// A store written by the release before schema 7 (no change counter): migrated, its pages are
/// counted, and the counter follows pages added and deleted after it.
fn pages_stored_before_schema_7_are_counted_by_its_change_counter(b: Backend) {
    use squeueha::{Migration, Migrations};
    const fn step(version: i64, sql: &'static str) -> Migration {
        Migration { version, sql }
    }
    const SAME: &str = "SELECT 1";
    const SQLITE_6: [Migration; 6] = [
        step(1, store::SCHEMA),
        step(2, store::SCHEMA_V2),
        step(3, store::SCHEMA_V3),
        step(4, store::SCHEMA_V4),
        step(5, store::SCHEMA_V5),
        step(6, store::SCHEMA_V6),
    ];
    const POSTGRES_6: [Migration; 6] = [
        step(1, store::POSTGRES_SCHEMA),
        step(2, SAME),
        step(3, SAME),
        step(4, SAME),
        step(5, store::POSTGRES_V5),
        step(6, store::SCHEMA_V6),
    ];
    const EARLIER: Migrations =
        Migrations::new("ingest_pipeline", &SQLITE_6).with_postgres(&POSTGRES_6);
    let db = Db::new(b);
    let q = db.open(Config::default());
    // A document's row as schema 6 held it (no collection yet), or as this build writes it.
    let store_doc = |tx: &mut QueueTx<'_>, name: &str, seed: u64, earlier: bool| {
        let id = if earlier {
            tx.execute(
                "INSERT INTO ip_documents (sha256, title, path, created_at) VALUES (?1, 't', '/d.pdf', 0)",
                squeueha::params![name],
            )?;
            let rows = tx.query(
                "SELECT id FROM ip_documents WHERE sha256 = ?1",
                squeueha::params![name],
            )?;
            rows[0].get::<i64>(0)?
        } else {
            store::insert_document(tx, name, "t", "/d.pdf")?.0.id
        };
        for p in 1..=3u32 {
            store::insert_page(tx, &page(id, p, 1))?;
            store::store_page_vectors(tx, id, p, &concept_page(seed + u64::from(p)), "col")?;
        }
        Ok(id)
    };
    let old: Vec<i64> = off_runtime(|| {
        write(&q, |tx| {
            EARLIER.apply_in_tx(tx)?;
            Ok(vec![
                store_doc(tx, "a", 0, true)?,
                store_doc(tx, "b", 10, true)?,
            ])
        })
    });
    off_runtime(|| write(&q, store::migrate_in));
    let mut r = Reads(q.clone());
    let cache = store::VisualIndexCache::with_settings(store::VisualIndexSettings {
        scan_max_pages: 0,
        ..Default::default()
    });
    let pages = |r: &mut Reads| cache.prepare(r, "col").unwrap()[0].pages;
    assert_eq!(pages(&mut r), 6, "the pages stored before the migration");
    let hits =
        store::search_visual_cached(&mut r, &cache, "col", &concept_page(12), 1, None, 1).unwrap();
    assert_eq!((hits[0].doc_id, hits[0].page_no), (old[1], 2), "{hits:?}");
    let added = write(&q, |tx| store_doc(tx, "c", 20, false));
    assert_eq!(pages(&mut r), 9);
    write(&q, |tx| store::delete_document(tx, old[0]));
    assert_eq!(pages(&mut r), 6);
    let hits =
        store::search_visual_cached(&mut r, &cache, "col", &concept_page(21), 1, None, 1).unwrap();
    assert_eq!((hits[0].doc_id, hits[0].page_no), (added, 1), "{hits:?}");
}

/// Documents belong to someone (issue 46): full text filtered in its statement (FTS5, and
/// PostgreSQL's `tsvector`), a collection's documents resolved and the hits checked, alike on
/// both backends.
fn a_search_reads_only_the_collections_it_is_given(b: Backend) {
    use horos_server_control::{Collection, Collections};
    let (_db, q) = open(b);
    let only = |n: &str| Collections::Only(vec![Collection::new(n).unwrap()]);
    let (a, b_doc) = write(&q, |tx| {
        let mut ids = Vec::new();
        for (sha, collection, text) in [
            ("a", "alpha", "bakery invoices for the winter"),
            (
                "b",
                "beta",
                "merger plans of the zebra company, bakery invoices",
            ),
        ] {
            let c = Collection::new(collection).unwrap();
            let (doc, _) = store::insert_document_in(tx, sha, "t", "/x.pdf", &c)?;
            assert_eq!(doc.collection, c);
            store::insert_page(tx, &page(doc.id, 1, 1))?;
            store::store_page_text(tx, doc.id, 1, &reading(text), "t", &[])?;
            ids.push(doc.id);
        }
        Ok((ids[0], ids[1]))
    });
    let mut r = Reads(q.clone());
    let docs = |hits: Vec<store::PageHit>| hits.iter().map(|h| h.doc_id).collect::<Vec<_>>();
    let text = |r: &mut Reads, words: &str, c: &Collections| {
        docs(store::search_user_text_in(r, words, 5, c).unwrap())
    };
    assert!(text(&mut r, "zebra merger", &only("alpha")).is_empty());
    assert_eq!(text(&mut r, "zebra merger", &only("beta")), [b_doc]);
    assert_eq!(text(&mut r, "bakery invoices", &only("alpha")), [a]);
    assert_eq!(text(&mut r, "bakery invoices", &Collections::All).len(), 2);
    assert!(text(&mut r, "bakery", &Collections::Only(Vec::new())).is_empty());
    assert_eq!(
        store::readable_documents(&mut r, &only("beta")).unwrap(),
        store::Readable::Documents(HashSet::from([b_doc]))
    );
    assert_eq!(
        store::documents_within(&mut r, &[a, b_doc, 999], &only("alpha")).unwrap(),
        HashSet::from([a])
    );
    assert_eq!(
        store::document(&mut r, b_doc).unwrap().unwrap().collection,
        Collection::new("beta").unwrap()
    );
}
