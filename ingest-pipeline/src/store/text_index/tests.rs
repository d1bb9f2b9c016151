#![allow(clippy::unwrap_used)]
use super::*;
use crate::store::{
    delete_document, insert_document, migrate, search_vectors, store_chunk_vectors,
};

fn store() -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
    migrate(&conn).unwrap();
    (dir, conn)
}

/// A document with one chunk per vector (page `i + 1`), embedded unless `embed` is false; its
/// id and chunk ids.
fn document(
    conn: &mut rusqlite::Connection,
    name: &str,
    vectors: &[Vec<f32>],
    embed: bool,
) -> (i64, Vec<i64>) {
    let (doc, _) = insert_document(conn, name, name, "/x.pdf").unwrap();
    let mut ids = Vec::new();
    for (i, _) in vectors.iter().enumerate() {
        rusqlite::Connection::execute(
            conn,
            "INSERT INTO ip_chunks (doc_id, page_no, chunk_index, token_start, token_end, text)
             VALUES (?1, ?2, 0, 0, 1, ?3)",
            rusqlite::params![doc.id, i as i64 + 1, format!("{name} page {}", i + 1)],
        )
        .unwrap();
        ids.push(conn.last_insert_rowid());
    }
    if embed {
        store_chunk_vectors(conn, &ids, vectors, "m").unwrap();
    }
    (doc.id, ids)
}

fn pages(hits: &[PageHit]) -> Vec<(i64, u32)> {
    hits.iter().map(|h| (h.doc_id, h.page_no)).collect()
}

#[test]
fn answers_equal_the_full_scan_of_the_store() {
    let (_dir, mut conn) = store();
    let vs: Vec<Vec<f32>> = (0..40)
        .map(|i| vec![(i as f32 * 0.3).sin(), (i as f32 * 0.7).cos(), 0.5])
        .collect();
    document(&mut conn, "a", &vs, true);
    // A chunk of another dimension is left out, as by the full scan.
    document(&mut conn, "b", &[vec![1.0, 0.0]], true);
    let index = TextVectorIndex::new();
    let q = [0.2, 0.9, 0.1];
    // Not built yet: the full scan of the store itself.
    assert_eq!(
        index.search(&mut conn, &q, 10).unwrap(),
        search_vectors(&mut conn, &q, 10).unwrap()
    );
    assert!(index.is_empty() && !index.is_built());
    index.sync(&mut conn).unwrap();
    let got = index.search(&mut conn, &q, 10).unwrap();
    let want = search_vectors(&mut conn, &q, 10).unwrap();
    assert_eq!(pages(&got), pages(&want));
    for (g, w) in got.iter().zip(&want) {
        assert!((g.score - w.score).abs() < 1e-5, "{g:?} {w:?}");
        assert_eq!(g.snippet, w.snippet);
    }
    assert_eq!(index.len(), 41);
}

#[test]
fn a_new_page_is_found_at_once_and_a_deleted_one_never_returned() {
    let (_dir, mut conn) = store();
    let index = TextVectorIndex::new();
    index.sync(&mut conn).unwrap();
    let (a, _) = document(&mut conn, "a", &[vec![1.0, 0.0], vec![0.7, 0.7]], true);
    assert_eq!(
        pages(&index.search(&mut conn, &[1.0, 0.0], 1).unwrap()),
        [(a, 1)]
    );
    // Chunks stored first and embedded later (as the stages do), after the index looked.
    let (b, b_ids) = document(&mut conn, "b", &[vec![0.0, 1.0]], false);
    assert_eq!(
        pages(&index.search(&mut conn, &[0.0, 1.0], 1).unwrap()),
        [(a, 2)]
    );
    store_chunk_vectors(&mut conn, &b_ids, &[vec![0.0, 1.0]], "m").unwrap();
    assert_eq!(
        pages(&index.search(&mut conn, &[0.0, 1.0], 1).unwrap()),
        [(b, 1)]
    );
    // Deleted behind the index's back (another process): never returned.
    delete_document(&mut conn, a).unwrap();
    let hits = index.search(&mut conn, &[1.0, 0.0], 5).unwrap();
    assert_eq!(pages(&hits), [(b, 1)]);
    assert_eq!(index.len(), 1, "the stale rows were dropped");
    // The highest ids deleted and reused by SQLite for a new document's chunks.
    delete_document(&mut conn, b).unwrap();
    let (c, c_ids) = document(&mut conn, "c", &[vec![0.6, 0.8]], true);
    assert!(c_ids[0] <= b_ids[0], "SQLite reused the id");
    assert_eq!(
        pages(&index.search(&mut conn, &[0.0, 1.0], 5).unwrap()),
        [(c, 1)]
    );
    // Forgotten by this pipeline's own deletion at once.
    index.forget_document(c);
    assert!(index.is_empty());
}

#[test]
fn a_new_index_on_the_same_store_gives_the_same_answers() {
    let (_dir, mut conn) = store();
    let vs: Vec<Vec<f32>> = (0..300)
        .map(|i| {
            (0..8)
                .map(|d| ((i * 7 + d * 3) as f32 * 0.13).sin())
                .collect()
        })
        .collect();
    document(&mut conn, "a", &vs, true);
    let settings = IndexSettings {
        ivf_min: 100,
        probes: 4,
        scan_min: 0,
        threads: 2,
    };
    let first = TextVectorIndex::with_settings(settings);
    let q: Vec<f32> = (0..8).map(|d| d as f32 - 3.5).collect();
    first.sync(&mut conn).unwrap();
    let before = first.search(&mut conn, &q, 10).unwrap();
    assert!(first.lists()[0].1 > 1, "{:?}", first.lists());
    let again = TextVectorIndex::with_settings(settings);
    again.sync(&mut conn).unwrap();
    assert_eq!(again.search(&mut conn, &q, 10).unwrap(), before);
}
