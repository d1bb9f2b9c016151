//! Visual multi-vector search over the stored pages: rows decoded by their encoding (`f32` rows of
//! schema v1–2, `f16` rows and their int8 codes in `ip_page_codes` since v3), the int8 index
//! MaxSim scans, and the exact rerank from half floats.

use squeueha::{Value, params};

use super::search::{PageHit, page_text};
use super::{Db, Result, row};
use crate::maxsim::{MultiVector, MultiVectorIndex, le_bytes_to_f32s};
use crate::maxsim_int8::Int8Index;
use crate::quant::{Int8Rows, from_f16_bytes};

/// A model's page vectors that have no int8 codes (rows written before schema v3): read by the
/// `(model, dim)` index and the codes' primary key, never past a row's blob.
pub(crate) const LEGACY_ROWS: &str = "SELECT v.doc_id, v.page_no, v.vectors, v.encoding
     FROM ip_page_vectors v
     WHERE v.model = ?1 AND v.dim = ?2
       AND NOT EXISTS (SELECT 1 FROM ip_page_codes c
                       WHERE c.doc_id = v.doc_id AND c.page_no = v.page_no)
     ORDER BY v.doc_id, v.page_no";

/// Fewest candidates of the int8 scan [`search_visual`] rescores exactly (or 4 × k if more).
pub const VISUAL_RERANK_MIN: usize = 50;

/// A row's exact vectors by its encoding; `None` for an unknown encoding or a bad length.
fn decode(encoding: &str, dim: usize, blob: &[u8]) -> Option<Vec<f32>> {
    let values = match encoding {
        "f16" => from_f16_bytes(blob)?,
        "f32" => le_bytes_to_f32s(blob)?,
        _ => return None,
    };
    (dim > 0 && values.len().is_multiple_of(dim)).then_some(values)
}

/// The bytes of column `i`, if it holds a blob.
fn blob(r: &squeueha::Row, i: usize) -> Option<&[u8]> {
    match r.values().get(i) {
        Some(Value::Blob(b)) => Some(b),
        _ => None,
    }
}

/// Loads every page's visual vectors of dimension `dim` (any model) into an exact MaxSim index
/// keyed by `(doc_id, page_no)`. Rows that cannot be decoded are skipped.
pub fn load_visual_index(db: &mut dyn Db, dim: usize) -> Result<MultiVectorIndex<(i64, u32)>> {
    let mut index = MultiVectorIndex::new(dim);
    let rows = db.query(
        "SELECT doc_id, page_no, encoding, vectors FROM ip_page_vectors WHERE dim = ?1
         ORDER BY doc_id, page_no",
        params![dim as i64],
    )?;
    for r in &rows {
        let encoding: String = r.get(2)?;
        if let Some(v) = blob(r, 3).and_then(|b| decode(&encoding, dim, b)) {
            index.push((r.get(0)?, r.get(1)?), &v).ok();
        }
    }
    Ok(index)
}

/// Loads the int8 vectors of `model`'s pages of dimension `dim` (only documents in `docs` when
/// given) into an index keyed by `(doc_id, page_no)`: the codes of `ip_page_codes`, and the rows
/// stored before schema v3 (`f32`, no codes) quantised here. Rows that cannot be decoded are
/// skipped.
pub fn load_int8_index(
    db: &mut dyn Db,
    model: &str,
    dim: usize,
    docs: Option<&[i64]>,
) -> Result<Int8Index<(i64, u32)>> {
    let mut index = Int8Index::new(dim);
    let (model, dim_param) = (Value::from(model), Value::from(dim as i64));
    let Some(docs) = docs else {
        let p = [model, dim_param];
        push_codes(&mut index, &db.query(CODES, &p)?, dim)?;
        push_legacy(&mut index, &db.query(LEGACY_ROWS, &p)?, dim)?;
        return Ok(index);
    };
    // Only the documents asked for are read, by the tables' primary keys: a question about two
    // documents does not read the whole collection's vectors. A long list goes in chunks, one
    // statement (two with legacy rows) each.
    let mut docs = docs.to_vec();
    docs.sort_unstable();
    docs.dedup();
    for chunk in docs.chunks(DOCS_PER_QUERY) {
        let ids: Vec<String> = (0..chunk.len()).map(|i| format!("?{}", i + 3)).collect();
        let mut p = vec![model.clone(), dim_param.clone()];
        p.extend(chunk.iter().map(|d| Value::from(*d)));
        let ids = ids.join(", ");
        let codes = CODES_OF_DOCS.replace("?3", &ids);
        push_codes(&mut index, &db.query(&codes, &p)?, dim)?;
        let legacy = LEGACY_ROWS_OF_DOCS.replace("?3", &ids);
        push_legacy(&mut index, &db.query(&legacy, &p)?, dim)?;
    }
    Ok(index)
}

/// Most documents of a filtered visual search read by one statement.
const DOCS_PER_QUERY: usize = 256;

/// A model's int8 codes of one dimension.
const CODES: &str = "SELECT doc_id, page_no, count, int8 FROM ip_page_codes
     WHERE model = ?1 AND dim = ?2 ORDER BY doc_id, page_no";

/// [`CODES`] of some documents (`?3` stands for their list of parameters). The model is compared
/// through a cast so that SQLite looks the documents up by the primary key rather than read the
/// whole model by the `(model, dim)` index.
const CODES_OF_DOCS: &str = "SELECT doc_id, page_no, count, int8 FROM ip_page_codes
     WHERE doc_id IN (?3) AND CAST(model AS TEXT) = ?1 AND dim = ?2 ORDER BY doc_id, page_no";

/// [`LEGACY_ROWS`] of some documents (`?3` stands for their list of parameters; the cast as in
/// [`CODES_OF_DOCS`]).
const LEGACY_ROWS_OF_DOCS: &str = "SELECT v.doc_id, v.page_no, v.vectors, v.encoding
     FROM ip_page_vectors v
     WHERE v.doc_id IN (?3) AND CAST(v.model AS TEXT) = ?1 AND v.dim = ?2
       AND NOT EXISTS (SELECT 1 FROM ip_page_codes c
                       WHERE c.doc_id = v.doc_id AND c.page_no = v.page_no)
     ORDER BY v.doc_id, v.page_no";

/// Adds rows of [`CODES`] to `index`; rows that cannot be decoded are skipped.
fn push_codes(index: &mut Int8Index<(i64, u32)>, rows: &[squeueha::Row], dim: usize) -> Result<()> {
    for r in rows {
        let count = usize::try_from(r.get::<i64>(2)?).unwrap_or(0);
        if let Some(q) = blob(r, 3).and_then(|b| Int8Rows::from_bytes(dim, count, b)) {
            index.push_rows((r.get(0)?, r.get(1)?), &q).ok();
        }
    }
    Ok(())
}

/// Adds rows of [`LEGACY_ROWS`] (no codes: written before schema v3) to `index`, quantised
/// here. Not selected by `encoding = 'f32'`: that column comes after the vectors' blob, and
/// testing it would walk every row's overflow pages.
fn push_legacy(
    index: &mut Int8Index<(i64, u32)>,
    rows: &[squeueha::Row],
    dim: usize,
) -> Result<()> {
    for r in rows {
        let encoding: String = r.get(3)?;
        if let Some(v) = blob(r, 2).and_then(|b| decode(&encoding, dim, b)) {
            index.push((r.get(0)?, r.get(1)?), &v).ok();
        }
    }
    Ok(())
}

/// A page's stored visual vectors at full precision (half floats since schema v3).
pub fn page_vectors(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<Option<MultiVector>> {
    let Some(r) = row(
        db,
        "SELECT dim, encoding, vectors FROM ip_page_vectors WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no],
    )?
    else {
        return Ok(None);
    };
    let (dim, encoding): (i64, String) = (r.get(0)?, r.get(1)?);
    let Ok(dim) = usize::try_from(dim) else {
        return Ok(None);
    };
    Ok(blob(&r, 2)
        .and_then(|b| decode(&encoding, dim, b))
        .map(|data| MultiVector { dim, data }))
}

/// [`page_vectors`] decoded onto the end of `out` (reused between pages by a rerank); whether
/// the page was found with vectors of dimension `dim`.
pub(crate) fn page_vectors_into(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    dim: usize,
    out: &mut Vec<f32>,
) -> Result<bool> {
    let Some(r) = row(
        db,
        "SELECT dim, encoding, vectors FROM ip_page_vectors WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no],
    )?
    else {
        return Ok(false);
    };
    let (stored, encoding): (i64, String) = (r.get(0)?, r.get(1)?);
    if usize::try_from(stored).ok() != Some(dim) {
        return Ok(false);
    }
    let Some(b) = blob(&r, 2) else {
        return Ok(false);
    };
    Ok(match encoding.as_str() {
        "f16" => crate::quant::f16_bytes_into(b, out),
        _ => match decode(&encoding, dim, b) {
            Some(v) => {
                out.extend(v);
                true
            }
            None => false,
        },
    })
}

/// The visual models whose vectors are stored: `(model, dim, pages)`, most pages first.
pub fn visual_models(db: &mut dyn Db) -> Result<Vec<(String, usize, u64)>> {
    db.query(
        "SELECT model, dim, count(*) FROM ip_page_vectors GROUP BY model, dim ORDER BY 3 DESC",
        params![],
    )?
    .iter()
    .map(|r| {
        Ok((
            r.get::<String>(0)?,
            usize::try_from(r.get::<i64>(1)?).unwrap_or(0),
            u64::try_from(r.get::<i64>(2)?).unwrap_or(0),
        ))
    })
    .collect()
}

/// The `k` best pages of `model` for the query vectors `query` (from the same model) by MaxSim,
/// best first, only in documents `docs` when given: the int8 index is scanned on `threads`
/// threads and its best `max(4k, VISUAL_RERANK_MIN)` pages are rescored exactly from their half
/// floats. The snippet is the start of the page's stored text.
pub fn search_visual(
    db: &mut dyn Db,
    model: &str,
    query: &MultiVector,
    k: usize,
    docs: Option<&[i64]>,
    threads: usize,
) -> Result<Vec<PageHit>> {
    if query.is_empty() || k == 0 {
        return Ok(Vec::new());
    }
    let index = load_int8_index(db, model, query.dim, docs)?;
    rank_visual(db, &index, query, k, threads)
}

/// The `k` best pages of `index` for `query`: the int8 scan's best `max(4k, VISUAL_RERANK_MIN)`
/// rescored exactly from the half floats stored on `conn`, each with the start of its text.
pub(crate) fn rank_visual(
    db: &mut dyn Db,
    index: &Int8Index<(i64, u32)>,
    query: &MultiVector,
    k: usize,
    threads: usize,
) -> Result<Vec<PageHit>> {
    let candidates = k.saturating_mul(4).max(VISUAL_RERANK_MIN);
    let hits = index
        .search_reranked(query, k, candidates, threads, |(doc, page)| {
            page_vectors(db, doc, page).ok().flatten().map(|mv| mv.data)
        })
        // A query of another dimension than the index's ranks nothing.
        .unwrap_or_default();
    page_hits(db, hits)
}

/// Hits as the store answers them: each page with the start of its text.
pub(crate) fn page_hits(
    db: &mut dyn Db,
    hits: Vec<crate::maxsim::Hit<(i64, u32)>>,
) -> Result<Vec<PageHit>> {
    hits.into_iter()
        .map(|h| {
            let (doc_id, page_no) = h.key;
            let text = page_text(db, doc_id, page_no)?.unwrap_or_default();
            Ok(PageHit {
                doc_id,
                page_no,
                score: f64::from(h.score),
                snippet: text.chars().take(120).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::{insert_document, migrate, store_page_vectors};

    fn mv(rows: &[[f32; 4]]) -> MultiVector {
        MultiVector::from_rows(&rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn compact_rows_legacy_rows_models_and_document_filters() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let (a, _) = insert_document(&mut conn, "a", "a", "/a.pdf").unwrap();
        let (b, _) = insert_document(&mut conn, "b", "b", "/b.pdf").unwrap();
        store_page_vectors(
            &mut conn,
            a.id,
            1,
            &mv(&[[1.0, 0.0, 0.0, 0.0], [0.0, 0.6, 0.8, 0.0]]),
            "col",
        )
        .unwrap();
        store_page_vectors(&mut conn, b.id, 1, &mv(&[[0.0, 0.0, 0.0, 1.0]]), "col").unwrap();
        store_page_vectors(&mut conn, b.id, 2, &mv(&[[1.0, 0.0, 0.0, 0.0]]), "other").unwrap();
        // A row as schema v2 wrote it: f32, no codes.
        conn.execute(
            "INSERT INTO ip_page_vectors (doc_id, page_no, model, dim, count, vectors)
             VALUES (?1, 3, 'col', 4, 1, ?2)",
            rusqlite::params![b.id, mv(&[[0.0, 0.0, 1.0, 0.0]]).to_le_bytes()],
        )
        .unwrap();
        let (enc, len): (String, i64) = conn
            .query_row(
                "SELECT encoding, length(vectors) FROM ip_page_vectors WHERE doc_id = ?1 AND page_no = 1",
                [a.id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((enc.as_str(), len), ("f16", 2 * 4 * 2));
        let back = page_vectors(&mut conn, a.id, 1).unwrap().unwrap();
        assert_eq!((back.dim, back.len()), (4, 2));
        assert!((back.data[5] - 0.6).abs() < 5e-4);

        let q = mv(&[[0.0, 0.0, 1.0, 0.0]]);
        let hits = search_visual(&mut conn, "col", &q, 5, None, 1).unwrap();
        let keys: Vec<(i64, u32)> = hits.iter().map(|h| (h.doc_id, h.page_no)).collect();
        // The legacy row matches exactly; page a/1 by its second vector; b/1 not at all.
        assert_eq!(keys, [(b.id, 3), (a.id, 1), (b.id, 1)]);
        assert!((hits[0].score - 1.0).abs() < 1e-6);
        assert!((hits[1].score - 0.8).abs() < 1e-3, "{}", hits[1].score);
        let only_a = search_visual(&mut conn, "col", &q, 5, Some(&[a.id]), 1).unwrap();
        assert_eq!(only_a.len(), 1);
        assert_eq!(only_a[0].doc_id, a.id);
        // Document b alone: its legacy row and its code row of this model, not its other
        // model's page; an id given twice or unknown changes nothing.
        let only_b = search_visual(&mut conn, "col", &q, 5, Some(&[b.id, 999, b.id]), 1).unwrap();
        let keys: Vec<(i64, u32)> = only_b.iter().map(|h| (h.doc_id, h.page_no)).collect();
        assert_eq!(keys, [(b.id, 3), (b.id, 1)]);
        // A list longer than one statement takes: read in chunks, the same pages found.
        let many: Vec<i64> = (1000..1600).chain([b.id, a.id]).collect();
        let all = search_visual(&mut conn, "col", &q, 5, Some(&many), 1).unwrap();
        let keys: Vec<(i64, u32)> = all.iter().map(|h| (h.doc_id, h.page_no)).collect();
        assert_eq!(keys, [(b.id, 3), (a.id, 1), (b.id, 1)]);
        assert!(
            search_visual(&mut conn, "col", &q, 5, Some(&[]), 1)
                .unwrap()
                .is_empty()
        );
        // Another model's pages, or another dimension, are never compared.
        assert!(
            search_visual(&mut conn, "nobody", &q, 5, None, 1)
                .unwrap()
                .is_empty()
        );
        let wide = MultiVector {
            dim: 8,
            data: vec![0.1; 8],
        };
        assert!(
            search_visual(&mut conn, "col", &wide, 5, None, 1)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            visual_models(&mut conn).unwrap(),
            [("col".to_owned(), 4, 3), ("other".to_owned(), 4, 1)]
        );
        assert_eq!(load_visual_index(&mut conn, 4).unwrap().len(), 4);
    }

    #[test]
    fn the_scan_reads_one_models_codes_by_its_index_and_one_documents_by_its_key() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        // A whole model by the `(model, dim)` indexes; one document by the primary keys.
        for (sql, index) in [
            (CODES, "ip_page_codes_model"),
            (LEGACY_ROWS, "ip_page_vectors_model"),
            (CODES_OF_DOCS, "sqlite_autoindex_ip_page_codes_1 (doc_id=?)"),
            (
                LEGACY_ROWS_OF_DOCS,
                "sqlite_autoindex_ip_page_vectors_1 (doc_id=?)",
            ),
        ] {
            let sql = sql
                .replace("?1", "'m'")
                .replace("?2", "128")
                .replace("?3", "7, 9, 11");
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(plan[0].contains(index), "{plan:?}");
        }
    }
}
