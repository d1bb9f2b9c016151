//! Deleting a document with everything derived from it.

use std::path::PathBuf;

use rusqlite::{Connection, params};

use super::{Document, Result, document, exec, now_s};

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

/// The tables whose rows derive from a document, all keyed by `doc_id` (the full-text rows are
/// found through `ip_page_fts_rows`).
const DERIVED: [&str; 8] = [
    "ip_pages",
    "ip_tiles",
    "ip_page_fts_rows",
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
pub fn delete_document(conn: &Connection, id: i64) -> Result<Option<Deleted>> {
    let Some(doc) = document(conn, id)? else {
        return Ok(None);
    };
    let fan_in_parents = {
        let mut st = conn.prepare_cached(
            "SELECT fan_in_parent FROM ip_pages WHERE doc_id = ?1 AND fan_in_parent IS NOT NULL",
        )?;
        st.query_map([id], |r| r.get::<_, i64>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let image_paths = {
        let mut st = conn.prepare_cached("SELECT image_path FROM ip_pages WHERE doc_id = ?1")?;
        st.query_map([id], |r| r.get::<_, String>(0))?
            .map(|p| p.map(PathBuf::from))
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    exec(
        conn,
        "DELETE FROM ip_page_fts WHERE rowid IN
             (SELECT fts_rowid FROM ip_page_fts_rows WHERE doc_id = ?1)",
        [id],
    )?;
    for table in DERIVED {
        exec(
            conn,
            &format!("DELETE FROM {table} WHERE doc_id = ?1"),
            [id],
        )?;
    }
    exec(conn, "DELETE FROM ip_documents WHERE id = ?1", [id])?;
    exec(
        conn,
        "INSERT OR REPLACE INTO ip_deleted_documents (id, sha256, title, deleted_at)
         VALUES (?1, ?2, ?3, ?4)",
        params![id, doc.sha256, doc.title, now_s()],
    )?;
    Ok(Some(Deleted {
        document: doc,
        image_paths,
        fan_in_parents,
    }))
}

/// Rows left anywhere in the store for document `id` (0 once it is deleted), by table. For
/// checks: it reads the whole full-text table.
pub fn rows_of_document(conn: &Connection, id: i64) -> Result<Vec<(&'static str, i64)>> {
    let mut out = Vec::with_capacity(DERIVED.len() + 2);
    let n: i64 = conn.query_row(
        "SELECT count(*) FROM ip_page_fts WHERE doc_id = ?1",
        [id],
        |r| r.get(0),
    )?;
    out.push(("ip_page_fts", n));
    for table in DERIVED {
        let n: i64 = conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE doc_id = ?1"),
            [id],
            |r| r.get(0),
        )?;
        out.push((table, n));
    }
    let n: i64 = conn.query_row(
        "SELECT count(*) FROM ip_documents WHERE id = ?1",
        [id],
        |r| r.get(0),
    )?;
    out.push(("ip_documents", n));
    Ok(out)
}
