//! Documents: one row per ingested file (its hash, title, exact path, page count, status and
//! why it failed), and the questions the stages ask of it.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{Result, StoreError, exec, now_s, path_to_bytes};

/// Where a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocStatus {
    /// Being ingested.
    Pending,
    /// Fully indexed.
    Done,
    /// Failed for good (see its error).
    Failed,
}

impl DocStatus {
    /// The name stored and shown: `pending`, `done` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            DocStatus::Pending => "pending",
            DocStatus::Done => "done",
            DocStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "done" => DocStatus::Done,
            "failed" => DocStatus::Failed,
            _ => DocStatus::Pending,
        }
    }
}

/// A document row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    /// Row id.
    pub id: i64,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// Title (from the file name).
    pub title: String,
    /// Path it was submitted from, for display (bytes that are not UTF-8 shown as U+FFFD; the
    /// exact path is [`Document::source_path`]).
    pub path: String,
    /// The exact path as the OS gave it (bytes on Unix); `None` for documents stored before
    /// version 2 of the schema, whose `path` is exact.
    #[serde(skip)]
    pub path_bytes: Option<Vec<u8>>,
    /// Page count, once known.
    pub pages: Option<u32>,
    /// Pages fully ingested so far (read, embedded and indexed).
    pub done_pages: u32,
    /// Status.
    pub status: DocStatus,
    /// Why it failed.
    pub error: Option<String>,
}

/// Inserts a document unless its SHA-256 is known; returns `(document, true)` when inserted.
/// `path` is stored exactly (as bytes) and for display. A new document's id is above every id
/// used before, deleted documents' included.
pub fn insert_document(
    conn: &Connection,
    sha256: &str,
    title: &str,
    path: impl AsRef<Path>,
) -> Result<(Document, bool)> {
    let path = path.as_ref();
    let inserted = exec(
        conn,
        "INSERT OR IGNORE INTO ip_documents (id, sha256, title, path, path_bytes, created_at)
         VALUES (1 + max(coalesce((SELECT max(id) FROM ip_documents), 0),
                         coalesce((SELECT max(id) FROM ip_deleted_documents), 0)),
                 ?1, ?2, ?3, ?4, ?5)",
        params![
            sha256,
            title,
            path.to_string_lossy(),
            path_to_bytes(path),
            now_s()
        ],
    )? == 1;
    let doc = document_by_sha(conn, sha256)?.ok_or_else(|| StoreError::NotFound(sha256.into()))?;
    Ok((doc, inserted))
}

fn row_to_doc(row: &rusqlite::Row<'_>) -> rusqlite::Result<Document> {
    Ok(Document {
        id: row.get(0)?,
        sha256: row.get(1)?,
        title: row.get(2)?,
        path: row.get(3)?,
        pages: row.get(4)?,
        status: DocStatus::parse(&row.get::<_, String>(5)?),
        error: row.get(6)?,
        path_bytes: row.get(7)?,
        done_pages: row.get(8)?,
    })
}

const DOC_COLS: &str = "id, sha256, title, path, pages, status, error, path_bytes, done_pages";

/// A document by SHA-256.
pub fn document_by_sha(conn: &Connection, sha256: &str) -> Result<Option<Document>> {
    Ok(conn
        .query_row(
            &format!("SELECT {DOC_COLS} FROM ip_documents WHERE sha256 = ?1"),
            [sha256],
            row_to_doc,
        )
        .optional()?)
}

/// A document by id.
pub fn document(conn: &Connection, id: i64) -> Result<Option<Document>> {
    Ok(conn
        .query_row(
            &format!("SELECT {DOC_COLS} FROM ip_documents WHERE id = ?1"),
            [id],
            row_to_doc,
        )
        .optional()?)
}

/// All documents, by id.
pub fn documents(conn: &Connection) -> Result<Vec<Document>> {
    let mut st =
        conn.prepare_cached(&format!("SELECT {DOC_COLS} FROM ip_documents ORDER BY id"))?;
    let rows = st
        .query_map([], row_to_doc)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Whether a document exists and is still being ingested: a job of any other document (failed,
/// done, deleted) has nothing left to do and is dropped.
pub fn is_pending(conn: &Connection, id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT status = 'pending' FROM ip_documents WHERE id = ?1")?
        .query_row([id], |r| r.get::<_, bool>(0))
        .optional()?
        .unwrap_or(false))
}

/// Whether any document is still being ingested.
pub fn has_pending_documents(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM ip_documents WHERE status = 'pending' LIMIT 1")?
        .query_row([], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Marks a document failed for good; the first reason recorded is kept.
pub fn fail_document(conn: &Connection, id: i64, error: &str) -> Result<()> {
    exec(
        conn,
        "UPDATE ip_documents SET status = 'failed', error = ?2, finished_at = ?3
         WHERE id = ?1 AND status != 'failed'",
        params![id, error, now_s()],
    )?;
    Ok(())
}

/// Records the page count.
pub fn set_page_count(conn: &Connection, id: i64, pages: u32) -> Result<()> {
    exec(
        conn,
        "UPDATE ip_documents SET pages = ?2 WHERE id = ?1 AND pages IS NOT ?2",
        params![id, pages],
    )?;
    Ok(())
}
