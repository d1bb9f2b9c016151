//! The searches over the stored pages: full text (FTS5), text vectors, visual multi-vectors,
//! and the page lookups that show a hit.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{Result, StoreError};
use crate::embed::cosine;
use crate::maxsim::{MultiVectorIndex, le_bytes_to_f32s};

/// A page found by a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageHit {
    /// Document id.
    pub doc_id: i64,
    /// Page number.
    pub page_no: u32,
    /// Score (higher is better).
    pub score: f64,
    /// A snippet of matching text (full-text and vector search).
    pub snippet: String,
}

/// Full-text search (FTS5 query syntax), best pages first by BM25.
pub fn search_text(conn: &Connection, query: &str, k: usize) -> Result<Vec<PageHit>> {
    let mut st = conn.prepare_cached(
        "SELECT doc_id, page_no, -bm25(ip_page_fts), snippet(ip_page_fts, 0, '[', ']', '…', 12)
         FROM ip_page_fts WHERE ip_page_fts MATCH ?1 ORDER BY bm25(ip_page_fts) LIMIT ?2",
    )?;
    let rows = st
        .query_map(params![query, k as i64], |r| {
            Ok(PageHit {
                doc_id: r.get(0)?,
                page_no: r.get(1)?,
                score: r.get(2)?,
                snippet: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Full-text search for text a user typed: as an FTS5 query when it is one (`"exact phrase"`,
/// `a AND b`, `pre*`), else, when FTS5 refuses it (`C++`, an unbalanced quote, `word:`), as its
/// words, any of them ([`words_query`]). User text never makes the search fail.
pub fn search_user_text(conn: &Connection, text: &str, k: usize) -> Result<Vec<PageHit>> {
    match search_text(conn, text, k) {
        Ok(hits) => Ok(hits),
        Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(..))) => {
            let words = words_query(text);
            if words.is_empty() {
                return Ok(Vec::new());
            }
            search_text(conn, &words, k)
        }
        Err(e) => Err(e),
    }
}

/// An FTS5 query that matches any word of `text`: each word quoted (so no word is an operator
/// or a column name), punctuation at its ends dropped, joined with `OR`; empty when `text` has
/// no word.
pub fn words_query(text: &str) -> String {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{}\"", w.replace('"', "")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// Vector search over chunk embeddings by cosine similarity (a full scan), best chunks first.
pub fn search_vectors(conn: &Connection, query: &[f32], k: usize) -> Result<Vec<PageHit>> {
    let mut st = conn
        .prepare("SELECT doc_id, page_no, text, vector FROM ip_chunks WHERE vector IS NOT NULL")?;
    let mut hits: Vec<PageHit> = Vec::new();
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let blob: Vec<u8> = r.get(3)?;
        let Some(v) = le_bytes_to_f32s(&blob) else {
            continue;
        };
        if v.len() != query.len() {
            continue;
        }
        let text: String = r.get(2)?;
        hits.push(PageHit {
            doc_id: r.get(0)?,
            page_no: r.get(1)?,
            score: f64::from(cosine(query, &v)),
            snippet: text.chars().take(120).collect(),
        });
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    Ok(hits)
}

/// Loads every page's visual vectors of dimension `dim` into a MaxSim index keyed by
/// `(doc_id, page_no)`.
pub fn load_visual_index(conn: &Connection, dim: usize) -> Result<MultiVectorIndex<(i64, u32)>> {
    let mut index = MultiVectorIndex::new(dim);
    let mut st = conn.prepare_cached("SELECT doc_id, page_no, vectors FROM ip_page_vectors WHERE dim = ?1 ORDER BY doc_id, page_no")?;
    let mut rows = st.query([dim as i64])?;
    while let Some(r) = rows.next()? {
        let blob: Vec<u8> = r.get(2)?;
        if let Some(v) = le_bytes_to_f32s(&blob) {
            // Rows of another length than a multiple of dim are skipped by push's check.
            let _ = index.push((r.get(0)?, r.get(1)?), &v);
        }
    }
    Ok(index)
}

/// The tables found on a page, as JSON values.
pub fn page_tables(conn: &Connection, doc_id: i64, page_no: u32) -> Result<Vec<serde_json::Value>> {
    let mut st = conn.prepare_cached(
        "SELECT json FROM ip_tables WHERE doc_id = ?1 AND page_no = ?2 ORDER BY table_index",
    )?;
    let rows = st
        .query_map(params![doc_id, page_no], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.iter().map(|s| Ok(serde_json::from_str(s)?)).collect()
}

/// A page's stored text.
pub fn page_text(conn: &Connection, doc_id: i64, page_no: u32) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT text FROM ip_pages WHERE doc_id = ?1 AND page_no = ?2",
            params![doc_id, page_no],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}
