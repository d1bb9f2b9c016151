//! Deleting a document with everything derived from it.

use std::path::PathBuf;

use squeueha::params;

use super::{Db, Document, Result, document, exec, is_postgres, now_s, one};

/// A deleted document and what it left outside the database.
#[derive(Debug, Clone, PartialEq)]
pub struct Deleted {
    /// The document as it was.
    pub document: Document,
    /// Its page images (the caller removes the files once the deletion has committed).
    pub image_paths: Vec<PathBuf>,
    /// The fan-in parents of its tiled pages (the caller deletes them in the same transaction,
    /// `fanin::FanIn::delete_parent_in`); pages tiled before schema 2 did not record theirs.
    pub fan_in_parents: Vec<i64>,
}

/// The tables whose rows derive from a document, all keyed by `doc_id` (on SQLite the
/// full-text rows are found through `ip_page_fts_rows`, which PostgreSQL has no need of).
const DERIVED: [&str; 7] = [
    "ip_pages",
    "ip_tiles",
    "ip_tables",
    "ip_chunks",
    "ip_page_vectors",
    "ip_page_codes",
    "ip_stage_stats",
];

/// Deletes a document and every row derived from it: pages, tiles' readings, full-text rows,
/// tables, chunks and their vectors, visual vectors, stage times. Its id is recorded in
/// `ip_deleted_documents`, so no later document is given it (a job of this one still queued
/// then finds no document and is dropped). `None` when there is no such document.
///
/// Run it in the caller's transaction: the rows go together or not at all.
pub fn delete_document(db: &mut dyn Db, id: i64) -> Result<Option<Deleted>> {
    if is_postgres(db) {
        // Another node's stage may be writing one of its pages: its page rows first (waiting
        // for those writers to commit, so their rows are seen and deleted below; later ones find
        // the page gone), then the document's (waiting for a render that is recording a page).
        db.query(
            "SELECT 1 FROM ip_pages WHERE doc_id = ?1 ORDER BY page_no FOR UPDATE",
            params![id],
        )?;
        db.query(
            "SELECT 1 FROM ip_documents WHERE id = ?1 FOR UPDATE",
            params![id],
        )?;
    }
    let Some(doc) = document(db, id)? else {
        return Ok(None);
    };
    let fan_in_parents = db
        .query(
            "SELECT fan_in_parent FROM ip_pages WHERE doc_id = ?1 AND fan_in_parent IS NOT NULL",
            params![id],
        )?
        .iter()
        .map(|r| r.get::<i64>(0))
        .collect::<squeueha::Result<Vec<_>>>()?;
    let image_paths = db
        .query(
            "SELECT image_path FROM ip_pages WHERE doc_id = ?1",
            params![id],
        )?
        .iter()
        .map(|r| r.get::<String>(0).map(PathBuf::from))
        .collect::<squeueha::Result<Vec<_>>>()?;
    if is_postgres(db) {
        exec(db, "DELETE FROM ip_page_fts WHERE doc_id = ?1", params![id])?;
    } else {
        exec(
            db,
            "DELETE FROM ip_page_fts WHERE rowid IN
                 (SELECT fts_rowid FROM ip_page_fts_rows WHERE doc_id = ?1)",
            params![id],
        )?;
        exec(
            db,
            "DELETE FROM ip_page_fts_rows WHERE doc_id = ?1",
            params![id],
        )?;
    }
    for table in DERIVED {
        exec(
            db,
            &format!("DELETE FROM {table} WHERE doc_id = ?1"),
            params![id],
        )?;
    }
    exec(db, "DELETE FROM ip_documents WHERE id = ?1", params![id])?;
    exec(
        db,
        "INSERT INTO ip_deleted_documents (id, sha256, title, deleted_at)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (id) DO UPDATE SET sha256 = excluded.sha256, title = excluded.title,
             deleted_at = excluded.deleted_at",
        params![id, doc.sha256.as_str(), doc.title.as_str(), now_s()],
    )?;
    Ok(Some(Deleted {
        document: doc,
        image_paths,
        fan_in_parents,
    }))
}

/// Rows left anywhere in the store for document `id` (0 once it is deleted), by table. For
/// checks: on SQLite it reads the whole full-text table.
pub fn rows_of_document(db: &mut dyn Db, id: i64) -> Result<Vec<(&'static str, i64)>> {
    let mut out = Vec::with_capacity(DERIVED.len() + 3);
    let mut tables = vec!["ip_page_fts"];
    if !is_postgres(db) {
        tables.push("ip_page_fts_rows");
    }
    tables.extend(DERIVED);
    for table in tables {
        let n: i64 = one(
            db,
            &format!("SELECT count(*) FROM {table} WHERE doc_id = ?1"),
            params![id],
        )?
        .get(0)?;
        out.push((table, n));
    }
    let n: i64 = one(
        db,
        "SELECT count(*) FROM ip_documents WHERE id = ?1",
        params![id],
    )?
    .get(0)?;
    out.push(("ip_documents", n));
    Ok(out)
}
