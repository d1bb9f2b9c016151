//! The visual index kept in memory between questions: loading a model's int8 codes from SQLite
//! costs about 0.3 s per 1,000 pages, far more than scanning them, so a long-lived searcher (the
//! coordinator's `/v1/search`, an MCP server) loads them once and reloads only when the stored
//! pages changed. Whether they changed is read from the store on every question (a count and
//! sums over the model's rows, by its index): pages added, deleted or replaced by a new document
//! (document ids are never reused) all change it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use squeueha::params;

use super::search::PageHit;
use super::visual::{load_int8_index, rank_visual};
use super::{Db, Result, one};
use crate::maxsim::MultiVector;
use crate::maxsim_int8::Int8Index;

/// What the stored rows of one model looked like when its index was loaded.
type Stamp = [i64; 5];

/// One model's loaded index and the stamp it was loaded at.
type Loaded = (Stamp, Arc<Int8Index<(i64, u32)>>);

/// Int8 indexes by `(model, dim)`, reloaded when the store's rows of that model change. Cheap to
/// clone (shared). Memory: one byte per stored value plus a scale per vector (about 0.9 GB for
/// 10,000 pages of 700 vectors of 128 values).
#[derive(Debug, Clone, Default)]
pub struct VisualIndexCache {
    loaded: Arc<Mutex<HashMap<(String, usize), Loaded>>>,
}

impl VisualIndexCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// `model`'s index at dimension `dim`, loaded from `conn` unless the copy in memory is
    /// current. Two callers that find it stale at once may both load it; the last one is kept.
    pub fn index(
        &self,
        db: &mut dyn Db,
        model: &str,
        dim: usize,
    ) -> Result<Arc<Int8Index<(i64, u32)>>> {
        let now = stamp(db, model, dim)?;
        let key = (model.to_owned(), dim);
        if let Some((at, index)) = self.lock().get(&key)
            && *at == now
        {
            return Ok(Arc::clone(index));
        }
        // Loaded without the lock held: other models' questions go on meanwhile.
        let index = Arc::new(load_int8_index(db, model, dim, None)?);
        self.lock().insert(key, (now, Arc::clone(&index)));
        Ok(index)
    }

    /// Forgets every loaded index (the memory is freed once no search holds it).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, usize), Loaded>> {
        // A panic elsewhere cannot leave the map half-written: inserts are single calls.
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The rows of `model` at `dim`: codes (count, Σ doc ids, Σ page numbers, highest doc id) and the
/// legacy `f32` rows quantised at load (count).
fn stamp(db: &mut dyn Db, model: &str, dim: usize) -> Result<Stamp> {
    let r = one(
        db,
        "SELECT count(*), CAST(coalesce(sum(doc_id), 0) AS BIGINT),
                CAST(coalesce(sum(page_no), 0) AS BIGINT), coalesce(max(doc_id), 0)
         FROM ip_page_codes WHERE model = ?1 AND dim = ?2",
        params![model, dim as i64],
    )?;
    let (count, docs, pages, top): (i64, i64, i64, i64) =
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
    let legacy: i64 = one(
        db,
        &format!(
            "SELECT count(*) FROM ({}) legacy",
            super::visual::LEGACY_ROWS
        ),
        params![model, dim as i64],
    )?
    .get(0)?;
    Ok([count, docs, pages, top, legacy])
}

/// [`super::search_visual`] over the cached index of `model` (documents `docs` only when given:
/// those are loaded for the question, as a filtered scan of the whole index could miss them).
pub fn search_visual_cached(
    db: &mut dyn Db,
    cache: &VisualIndexCache,
    model: &str,
    query: &MultiVector,
    k: usize,
    docs: Option<&[i64]>,
    threads: usize,
) -> Result<Vec<PageHit>> {
    if query.is_empty() || k == 0 {
        return Ok(Vec::new());
    }
    match docs {
        Some(docs) => {
            let index = load_int8_index(db, model, query.dim, Some(docs))?;
            rank_visual(db, &index, query, k, threads)
        }
        None => {
            let index = cache.index(db, model, query.dim)?;
            rank_visual(db, &index, query, k, threads)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::{delete_document, insert_document, migrate, store_page_vectors};

    fn page(x: f32) -> MultiVector {
        MultiVector::from_rows(&[vec![x, 1.0 - x, 0.0, 0.0]]).unwrap()
    }

    #[test]
    fn the_index_is_reloaded_only_when_the_models_pages_change() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let cache = VisualIndexCache::new();
        let (a, _) = insert_document(&mut conn, "a", "a", "/a.pdf").unwrap();
        store_page_vectors(&mut conn, a.id, 1, &page(1.0), "col").unwrap();
        let first = cache.index(&mut conn, "col", 4).unwrap();
        assert_eq!(first.len(), 1);
        // Nothing changed: the same index in memory.
        assert!(Arc::ptr_eq(
            &first,
            &cache.index(&mut conn, "col", 4).unwrap()
        ));
        // Another model's pages do not touch this one's.
        store_page_vectors(&mut conn, a.id, 2, &page(0.5), "other").unwrap();
        assert!(Arc::ptr_eq(
            &first,
            &cache.index(&mut conn, "col", 4).unwrap()
        ));
        // A page added: reloaded.
        let (b, _) = insert_document(&mut conn, "b", "b", "/b.pdf").unwrap();
        store_page_vectors(&mut conn, b.id, 1, &page(0.0), "col").unwrap();
        let second = cache.index(&mut conn, "col", 4).unwrap();
        assert_eq!(second.len(), 2);
        // A document deleted: reloaded without its pages, and search never returns them.
        delete_document(&mut conn, a.id).unwrap();
        let third = cache.index(&mut conn, "col", 4).unwrap();
        assert_eq!(third.len(), 1);
        let hits = search_visual_cached(&mut conn, &cache, "col", &page(1.0), 5, None, 1).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.doc_id).collect::<Vec<_>>(),
            [b.id],
            "{hits:?}"
        );
        // Restricted to a document: only its pages.
        let (c, _) = insert_document(&mut conn, "c", "c", "/c.pdf").unwrap();
        store_page_vectors(&mut conn, c.id, 1, &page(1.0), "col").unwrap();
        let hits = search_visual_cached(&mut conn, &cache, "col", &page(1.0), 5, Some(&[b.id]), 1)
            .unwrap();
        assert_eq!(hits.iter().map(|h| h.doc_id).collect::<Vec<_>>(), [b.id]);
        let hits = search_visual_cached(&mut conn, &cache, "col", &page(1.0), 5, None, 1).unwrap();
        assert_eq!(hits[0].doc_id, c.id, "the new page ranks first: {hits:?}");
    }
}
