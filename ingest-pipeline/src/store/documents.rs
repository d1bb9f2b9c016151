//! Documents: one row per ingested file (its hash, title, exact path, collection, page count,
//! status and why it failed), and the questions the stages ask of it.

use std::path::Path;

use horos_server_control::Collection;
use serde::{Deserialize, Serialize};
use squeueha::{Row, params};

use super::{Db, Result, StoreError, exec, is_postgres, now_s, path_to_bytes, row};

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
    /// The collection it belongs to (who may read it; `"default"` for a document ingested
    /// without one, and for those stored before version 9 of the schema).
    pub collection: Collection,
}

/// Inserts a document in the `"default"` collection unless its SHA-256 is known
/// ([`insert_document_in`]).
pub fn insert_document(
    db: &mut dyn Db,
    sha256: &str,
    title: &str,
    path: impl AsRef<Path>,
) -> Result<(Document, bool)> {
    insert_document_in(db, sha256, title, path, &Collection::default())
}

/// Inserts a document in `collection` unless its SHA-256 is known; returns `(document, true)`
/// when inserted. A known document is returned as it is, in the collection it was first
/// submitted to (the same bytes are one document, which belongs to one collection). `path` is
/// stored exactly (as bytes) and for display. A new document's id is above every id used
/// before, deleted documents' included.
pub fn insert_document_in(
    db: &mut dyn Db,
    sha256: &str,
    title: &str,
    path: impl AsRef<Path>,
    collection: &Collection,
) -> Result<(Document, bool)> {
    let path = path.as_ref();
    // PostgreSQL's ids come from a sequence, which never gives one twice; SQLite's row ids
    // would reuse a deleted document's, so its new id is above every id recorded.
    let sql = if is_postgres(db) {
        "INSERT INTO ip_documents (sha256, title, path, path_bytes, created_at, collection)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (sha256) DO NOTHING"
    } else {
        "INSERT INTO ip_documents (id, sha256, title, path, path_bytes, created_at, collection)
         VALUES (1 + max(coalesce((SELECT max(id) FROM ip_documents), 0),
                         coalesce((SELECT max(id) FROM ip_deleted_documents), 0)),
                 ?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING"
    };
    let inserted = exec(
        db,
        sql,
        params![
            sha256,
            title,
            path.to_string_lossy().into_owned(),
            path_to_bytes(path),
            now_s(),
            collection.as_str()
        ],
    )? == 1;
    let doc = document_by_sha(db, sha256)?.ok_or_else(|| StoreError::NotFound(sha256.into()))?;
    Ok((doc, inserted))
}

fn row_to_doc(row: &Row) -> Result<Document> {
    Ok(Document {
        id: row.get(0)?,
        sha256: row.get(1)?,
        title: row.get(2)?,
        path: row.get(3)?,
        pages: row.get(4)?,
        status: DocStatus::parse(&row.get::<String>(5)?),
        error: row.get(6)?,
        path_bytes: row.get(7)?,
        done_pages: row.get(8)?,
        collection: Collection::new(row.get::<String>(9)?)?,
    })
}

const DOC_COLS: &str =
    "id, sha256, title, path, pages, status, error, path_bytes, done_pages, collection";

/// A document by SHA-256.
pub fn document_by_sha(db: &mut dyn Db, sha256: &str) -> Result<Option<Document>> {
    row(
        db,
        &format!("SELECT {DOC_COLS} FROM ip_documents WHERE sha256 = ?1"),
        params![sha256],
    )?
    .as_ref()
    .map(row_to_doc)
    .transpose()
}

/// A document by id.
pub fn document(db: &mut dyn Db, id: i64) -> Result<Option<Document>> {
    row(
        db,
        &format!("SELECT {DOC_COLS} FROM ip_documents WHERE id = ?1"),
        params![id],
    )?
    .as_ref()
    .map(row_to_doc)
    .transpose()
}

/// All documents, by id.
pub fn documents(db: &mut dyn Db) -> Result<Vec<Document>> {
    db.query(
        &format!("SELECT {DOC_COLS} FROM ip_documents ORDER BY id"),
        params![],
    )?
    .iter()
    .map(row_to_doc)
    .collect()
}

/// Whether a document exists and is still being ingested: a job of any other document (failed,
/// done, deleted) has nothing left to do and is dropped.
pub fn is_pending(db: &mut dyn Db, id: i64) -> Result<bool> {
    Ok(row(
        db,
        "SELECT 1 FROM ip_documents WHERE id = ?1 AND status = 'pending'",
        params![id],
    )?
    .is_some())
}

/// Whether any document is still being ingested.
pub fn has_pending_documents(db: &mut dyn Db) -> Result<bool> {
    Ok(row(
        db,
        "SELECT 1 FROM ip_documents WHERE status = 'pending' LIMIT 1",
        params![],
    )?
    .is_some())
}

/// Marks a document failed for good; the first reason recorded is kept.
pub fn fail_document(db: &mut dyn Db, id: i64, error: &str) -> Result<()> {
    exec(
        db,
        "UPDATE ip_documents SET status = 'failed', error = ?2, finished_at = ?3
         WHERE id = ?1 AND status != 'failed'",
        params![id, error, now_s()],
    )?;
    Ok(())
}

/// Records the page count.
pub fn set_page_count(db: &mut dyn Db, id: i64, pages: u32) -> Result<()> {
    exec(
        db,
        "UPDATE ip_documents SET pages = ?2 WHERE id = ?1 AND pages IS DISTINCT FROM ?2",
        params![id, pages],
    )?;
    Ok(())
}
