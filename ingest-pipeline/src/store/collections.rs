//! Who may read a document: each belongs to one collection (version 9 of the schema), and a
//! search answers a caller only from documents in the [`Collections`] it may read.
//!
//! Two steps, on every search path (full text, text vectors, visual MaxSim, their fusion, an
//! image or a page as the question, an answer's passages):
//! - **before**, so that the best pages of the caller's collections are found however many
//!   other pages rank above them: [`readable_documents`] resolves the collections to the
//!   documents in them (full text filters them in its SQL, [`text_collection_filter`]; the text
//!   vectors and the visual scan read only those documents' rows);
//! - **after**, as the last step before anything is answered: [`keep_readable`] looks up each
//!   hit's document in the store and drops the others, so that a document added meanwhile, or a
//!   ranking that read more than it was asked, can never answer a caller outside its
//!   collections.

use std::collections::HashSet;

use horos_server_control::Collections;
use squeueha::Value;

use super::page_hit::PageHit;
use super::{Db, Result, one};

/// Version 9 (the same on PostgreSQL): each document's collection, `'default'` for the
/// documents stored before, and the documents of a collection found by their index.
pub const SCHEMA_V9: &str = r#"
ALTER TABLE ip_documents ADD COLUMN collection TEXT NOT NULL DEFAULT 'default';
CREATE INDEX IF NOT EXISTS ip_documents_collection ON ip_documents (collection, id);
"#;

/// The documents a search may read, resolved against the store when the question is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readable {
    /// Every document (the caller reads every collection, or every stored document is in the
    /// collections it reads): nothing to leave out beforehand.
    Every,
    /// These documents only.
    Documents(HashSet<i64>),
}

impl Readable {
    /// Whether document `doc` may be read.
    pub fn allows(&self, doc: i64) -> bool {
        match self {
            Readable::Every => true,
            Readable::Documents(docs) => docs.contains(&doc),
        }
    }

    /// The documents a search within `document` (when given) may read: `None` for every
    /// document, else a list (empty: none), sorted.
    pub fn within(&self, document: Option<i64>) -> Option<Vec<i64>> {
        match (self, document) {
            (Readable::Every, None) => None,
            (readable, Some(d)) => Some(if readable.allows(d) { vec![d] } else { vec![] }),
            (Readable::Documents(docs), None) => {
                let mut docs: Vec<i64> = docs.iter().copied().collect();
                docs.sort_unstable();
                Some(docs)
            }
        }
    }
}

/// `?first, ?first+1, ...` for `n` parameters.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names of `collections` as statement parameters (`None` for every collection).
fn names(collections: &Collections) -> Option<Vec<Value>> {
    match collections {
        Collections::All => None,
        Collections::Only(names) => Some(names.iter().map(|c| Value::from(c.as_str())).collect()),
    }
}

/// The documents of `collections`, or [`Readable::Every`] when no stored document is outside
/// them. An empty list of collections reads no document.
pub fn readable_documents(db: &mut dyn Db, collections: &Collections) -> Result<Readable> {
    let Some(p) = names(collections) else {
        return Ok(Readable::Every);
    };
    if p.is_empty() {
        return Ok(Readable::Documents(HashSet::new()));
    }
    let list = placeholders(1, p.len());
    let outside: i64 = one(
        db,
        &format!(
            "SELECT count(*) FROM (SELECT 1 FROM ip_documents WHERE collection NOT IN ({list}) \
             LIMIT 1) AS outside"
        ),
        &p,
    )?
    .get(0)?;
    if outside == 0 {
        return Ok(Readable::Every);
    }
    let docs = db
        .query(
            &format!("SELECT id FROM ip_documents WHERE collection IN ({list})"),
            &p,
        )?
        .iter()
        .map(|r| r.get::<i64>(0))
        .collect::<squeueha::Result<HashSet<i64>>>()?;
    Ok(Readable::Documents(docs))
}

/// Ids in one statement at most.
const IDS_PER_QUERY: usize = 500;

/// Of `docs`, those that exist and belong to `collections` (every one given, without a look,
/// for [`Collections::All`]).
pub fn documents_within(
    db: &mut dyn Db,
    docs: &[i64],
    collections: &Collections,
) -> Result<HashSet<i64>> {
    let Some(p) = names(collections) else {
        return Ok(docs.iter().copied().collect());
    };
    let mut found = HashSet::new();
    if p.is_empty() {
        return Ok(found);
    }
    let mut ids = docs.to_vec();
    ids.sort_unstable();
    ids.dedup();
    for chunk in ids.chunks(IDS_PER_QUERY) {
        // Integers only: nothing a user wrote goes into the statement's text.
        let list: Vec<String> = chunk.iter().map(i64::to_string).collect();
        let sql = format!(
            "SELECT id FROM ip_documents WHERE id IN ({}) AND collection IN ({})",
            list.join(","),
            placeholders(1, p.len())
        );
        for r in db.query(&sql, &p)? {
            found.insert(r.get::<i64>(0)?);
        }
    }
    Ok(found)
}

/// `hits` without those of documents outside `collections`, looked up in the store now: the
/// last step of every search before it answers a caller.
pub fn keep_readable(
    db: &mut dyn Db,
    hits: Vec<PageHit>,
    collections: &Collections,
) -> Result<Vec<PageHit>> {
    if collections.is_all() {
        return Ok(hits);
    }
    let docs: Vec<i64> = hits.iter().map(|h| h.doc_id).collect();
    let readable = documents_within(db, &docs, collections)?;
    Ok(hits
        .into_iter()
        .filter(|h| readable.contains(&h.doc_id))
        .collect())
}

/// A full-text statement's condition on `doc_id` for `collections`, its parameters numbered
/// from `first`: `None` for every collection; for none at all, a condition no row meets.
pub(super) fn text_collection_filter(
    collections: &Collections,
    first: usize,
) -> Option<(String, Vec<Value>)> {
    let p = names(collections)?;
    if p.is_empty() {
        return Some(("1 = 0".to_owned(), p));
    }
    let sql = format!(
        "doc_id IN (SELECT id FROM ip_documents WHERE collection IN ({}))",
        placeholders(first, p.len())
    );
    Some((sql, p))
}

/// The document of a page, when it exists and belongs to `collections`: how a look-alike search
/// knows whether the page it starts from may be read (one outside them is as one that does not
/// exist).
pub fn document_readable(db: &mut dyn Db, doc: i64, collections: &Collections) -> Result<bool> {
    if collections.is_all() {
        return Ok(true);
    }
    Ok(documents_within(db, &[doc], collections)?.contains(&doc))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use horos_server_control::Collection;

    use super::*;
    use crate::chunk::Chunk;
    use crate::maxsim::MultiVector;
    use crate::store::{
        PageImage, TextVectorIndex, insert_document, insert_document_in, insert_page, migrate,
        page_chunks, search_text_in, search_user_text_in, search_vectors_in, search_visual,
        store_chunk_vectors, store_page_text, store_page_vectors,
    };
    use crate::vision::Reading;

    fn only(names: &[&str]) -> Collections {
        Collections::Only(names.iter().map(|n| Collection::new(*n).unwrap()).collect())
    }

    /// Stores page `page_no` of `doc` with `text` (one chunk, whose vector is `vector`) and a
    /// visual row of one vector.
    fn page(conn: &mut rusqlite::Connection, doc: i64, page_no: u32, text: &str, vector: [f32; 4]) {
        insert_page(
            conn,
            &PageImage {
                doc_id: doc,
                page_no,
                width: 1,
                height: 1,
                image_bytes: 1,
                image_path: "x",
                tiles: 1,
            },
        )
        .unwrap();
        let reading = Reading {
            text: text.to_owned(),
            ..Reading::default()
        };
        let chunk = Chunk {
            index: 0,
            token_start: 0,
            token_end: 1,
            text: text.to_owned(),
        };
        store_page_text(conn, doc, page_no, &reading, "test", &[chunk]).unwrap();
        let ids: Vec<i64> = page_chunks(conn, doc, page_no)
            .unwrap()
            .iter()
            .map(|c| c.0)
            .collect();
        store_chunk_vectors(conn, &ids, &[vector.to_vec()], "e").unwrap();
        let mv = MultiVector::from_rows(&[vector.to_vec()]).unwrap();
        store_page_vectors(conn, doc, page_no, &mv, "v").unwrap();
    }

    /// Alice's one page in `alpha`, and 30 pages of bob's in `beta` that rank above it for
    /// every search (more words of the question, vectors closer to it).
    fn two_tenants() -> (tempfile::TempDir, rusqlite::Connection, i64, i64) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let alpha = Collection::new("alpha").unwrap();
        let beta = Collection::new("beta").unwrap();
        let (a, new) = insert_document_in(&mut conn, "a", "a", "/a.pdf", &alpha).unwrap();
        assert!(new);
        let (b, _) = insert_document_in(&mut conn, "b", "b", "/b.pdf", &beta).unwrap();
        assert_eq!(
            (a.collection.as_str(), b.collection.as_str()),
            ("alpha", "beta")
        );
        let hers = "quarterly revenue of the small bakery by the old harbour, with its long \
                    list of cakes, breads and pastries sold over the winter months";
        page(&mut conn, a.id, 1, hers, [0.6, 0.8, 0.0, 0.0]);
        for p in 1..=30 {
            page(
                &mut conn,
                b.id,
                p,
                "quarterly revenue merger secret",
                [1.0, 0.0, 0.0, 0.0],
            );
        }
        (dir, conn, a.id, b.id)
    }

    #[test]
    fn a_collections_documents_are_resolved_and_checked_against_the_store() {
        let (_dir, mut conn, a, b) = two_tenants();
        assert_eq!(
            readable_documents(&mut conn, &Collections::All).unwrap(),
            Readable::Every
        );
        assert_eq!(
            readable_documents(&mut conn, &only(&["alpha"])).unwrap(),
            Readable::Documents(HashSet::from([a]))
        );
        // Every stored document is in them: nothing to leave out beforehand.
        assert_eq!(
            readable_documents(&mut conn, &only(&["alpha", "beta"])).unwrap(),
            Readable::Every
        );
        for none in [only(&[]), only(&["gamma"])] {
            assert_eq!(
                readable_documents(&mut conn, &none).unwrap(),
                Readable::Documents(HashSet::new())
            );
        }
        assert_eq!(
            documents_within(&mut conn, &[a, b, 999], &only(&["beta"])).unwrap(),
            HashSet::from([b])
        );
        assert!(document_readable(&mut conn, b, &only(&["beta"])).unwrap());
        assert!(!document_readable(&mut conn, b, &only(&["alpha"])).unwrap());
        assert!(!document_readable(&mut conn, 999, &only(&["alpha"])).unwrap());
        let hit = |doc_id| PageHit {
            doc_id,
            page_no: 1,
            score: 1.0,
            snippet: String::new(),
        };
        let kept = keep_readable(&mut conn, vec![hit(b), hit(a), hit(999)], &only(&["alpha"]));
        assert_eq!(kept.unwrap(), [hit(a)]);
        // The same bytes again, to another collection: the one document, where it was.
        let (again, new) =
            insert_document_in(&mut conn, "b", "b", "/b.pdf", &Collection::default()).unwrap();
        assert_eq!(
            (again.id, new, again.collection.as_str()),
            (b, false, "beta")
        );
        let (plain, _) = insert_document(&mut conn, "c", "c", "/c.pdf").unwrap();
        assert_eq!(plain.collection.as_str(), "default");
    }

    #[test]
    fn each_search_of_the_store_answers_only_from_the_collections_it_is_given() {
        let (_dir, mut conn, a, b) = two_tenants();
        let alpha = only(&["alpha"]);
        let beta = only(&["beta"]);
        // Full text: a word only bob's pages hold finds nothing in alpha, his pages in beta.
        assert!(
            search_user_text_in(&mut conn, "merger", 10, &alpha)
                .unwrap()
                .is_empty()
        );
        let found = search_user_text_in(&mut conn, "merger", 10, &beta).unwrap();
        assert_eq!(found.len(), 10);
        assert!(found.iter().all(|h| h.doc_id == b), "{found:?}");
        // Bob's 30 pages rank above alice's page for her words; the best 5 in alpha are hers.
        let all = search_user_text_in(&mut conn, "quarterly revenue", 5, &Collections::All);
        let all = all.unwrap();
        assert!(all.iter().all(|h| h.doc_id == b), "{all:?}");
        let hers = search_user_text_in(&mut conn, "quarterly revenue", 5, &alpha).unwrap();
        assert_eq!(
            hers.iter()
                .map(|h| (h.doc_id, h.page_no))
                .collect::<Vec<_>>(),
            [(a, 1)]
        );
        assert!(
            search_text_in(&mut conn, "merger", 5, &only(&[]))
                .unwrap()
                .is_empty()
        );

        // Text vectors, by the full scan and by the index in memory: bob's closer chunks
        // neither answer nor crowd hers out.
        let question = [1.0, 0.1, 0.0, 0.0];
        let readable = readable_documents(&mut conn, &alpha).unwrap();
        let scan = search_vectors_in(&mut conn, &question, 3, &readable).unwrap();
        assert_eq!(scan.iter().map(|h| h.doc_id).collect::<Vec<_>>(), [a]);
        let index = TextVectorIndex::new();
        index.sync(&mut conn).unwrap();
        assert_eq!(index.len(), 31);
        let indexed = index.search_in(&mut conn, &question, 3, &readable).unwrap();
        assert_eq!(indexed.iter().map(|h| h.doc_id).collect::<Vec<_>>(), [a]);
        let unscoped = index.search(&mut conn, &question, 3).unwrap();
        assert!(unscoped.iter().all(|h| h.doc_id == b), "{unscoped:?}");
        let nothing = readable_documents(&mut conn, &only(&["gamma"])).unwrap();
        assert!(
            index
                .search_in(&mut conn, &question, 3, &nothing)
                .unwrap()
                .is_empty()
        );

        // Visual MaxSim over the documents resolved: hers only.
        let q = MultiVector::from_rows(&[question.to_vec()]).unwrap();
        let docs = readable.within(None);
        let visual = search_visual(&mut conn, "v", &q, 3, docs.as_deref(), 1).unwrap();
        assert_eq!(visual.iter().map(|h| h.doc_id).collect::<Vec<_>>(), [a]);
        // Within bob's document, asked by alice: no document to read.
        assert_eq!(readable.within(Some(b)), Some(vec![]));
        assert_eq!(Readable::Every.within(Some(b)), Some(vec![b]));
    }

    #[test]
    fn the_full_text_filter_reads_a_collection_by_its_index() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT id FROM ip_documents WHERE collection IN ('a', 'b')",
            )
            .unwrap()
            .query_map([], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(plan[0].contains("ip_documents_collection"), "{plan:?}");
    }
}
