//! The visual index kept in memory between questions: loading a model's int8 codes from SQLite
//! costs about 0.3 s per 1,000 pages, far more than scanning them, so a long-lived searcher (the
//! coordinator's `/v1/search`, an MCP server) loads them once and reloads only when the stored
//! pages changed. Whether they changed is read from the store on every question: the model's
//! change counter (schema 7), which triggers move on at every write of a page's vectors (pages
//! added, deleted or replaced), one row read by its key whatever the number of pages.
//!
//! Up to [`VisualIndexSettings::scan_max_pages`] pages a model's int8 codes are held and scanned
//! in full (93 KB a page at ColQwen2's shape). Above, the cache holds a
//! [`CentroidIndex`](crate::visual_index::CentroidIndex) instead (a few hundred bytes a page),
//! built from the store once, then brought up to date document by document (added ones placed,
//! deleted ones dropped), rebuilt when the model's pages have grown fourfold; its candidates are
//! rescored by exact MaxSim from the stored half floats.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use squeueha::params;

use super::search::PageHit;
use super::visual::{load_int8_index, page_hits, page_vectors_into, rank_visual};
use super::{Db, Result};
use crate::maxsim::MultiVector;
use crate::maxsim_int8::Int8Index;
use crate::visual_index::{CentroidIndex, CentroidSettings, auto_centroids, training_sample};

/// The change counter of one model's rows when its index was loaded: a generation that every
/// write of a page's vectors moves on, and the model's pages.
type Stamp = [i64; 2];

/// One model's centroid index (shared by the questions that use it).
type ByModel = Arc<Centroids>;

/// One model's loaded index and the stamp it was loaded at.
type Loaded = (Stamp, Arc<Int8Index<(i64, u32)>>);

/// Default of [`VisualIndexSettings::scan_max_pages`].
pub const SCAN_MAX_PAGES: usize = 5_000;

/// How the cache indexes a model's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisualIndexSettings {
    /// Up to this many pages of a model, its int8 codes are scanned in full; above, the centroid
    /// index is used (0: always the centroid index).
    pub scan_max_pages: usize,
    /// The centroid index's settings (its codebook's size 0: chosen from the collection's).
    pub centroids: CentroidSettings,
}

impl Default for VisualIndexSettings {
    fn default() -> Self {
        Self {
            scan_max_pages: SCAN_MAX_PAGES,
            centroids: CentroidSettings::default(),
        }
    }
}

/// One dimension of a model's pages, as [`VisualIndexCache::prepare`] left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// The vectors' dimension.
    pub dim: usize,
    /// The model's pages at that dimension.
    pub pages: usize,
    /// Whether its centroid index was built (above `scan_max_pages`); otherwise its int8 codes
    /// are loaded at its first question.
    pub centroids: bool,
}

/// A model's centroid index and what it holds.
struct CentroidState {
    stamp: Stamp,
    index: CentroidIndex<(i64, u32)>,
    /// Pages held per document.
    docs: HashMap<i64, i64>,
    /// Pages when the codebook was trained.
    trained_at: usize,
}

/// One model's centroid index, brought up to date by one caller at a time.
#[derive(Default)]
struct Centroids {
    syncing: Mutex<()>,
    state: RwLock<Option<CentroidState>>,
}

/// Int8 indexes by `(model, dim)`, reloaded when the store's rows of that model change; above
/// [`VisualIndexSettings::scan_max_pages`] pages, centroid indexes kept up to date. Cheap to
/// clone (shared). Memory: one byte per stored value plus a scale per vector for scanned models
/// (about 0.9 GB for 10,000 pages of 700 vectors of 128 values), a few hundred bytes a page for
/// the others.
#[derive(Clone, Default)]
pub struct VisualIndexCache {
    loaded: Arc<Mutex<HashMap<(String, usize), Loaded>>>,
    centroids: Arc<Mutex<HashMap<(String, usize), ByModel>>>,
    settings: VisualIndexSettings,
}

impl std::fmt::Debug for VisualIndexCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisualIndexCache")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl VisualIndexCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache with these settings.
    pub fn with_settings(settings: VisualIndexSettings) -> Self {
        Self {
            settings,
            ..Self::default()
        }
    }

    /// The settings.
    pub fn settings(&self) -> VisualIndexSettings {
        self.settings
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
        self.index_at(db, model, dim, now)
    }

    fn index_at(
        &self,
        db: &mut dyn Db,
        model: &str,
        dim: usize,
        now: Stamp,
    ) -> Result<Arc<Int8Index<(i64, u32)>>> {
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

    /// Makes `model`'s indexes ready before its first question, as a long-lived process does at
    /// start-up: for each dimension of its stored pages above
    /// [`VisualIndexSettings::scan_max_pages`], the centroid index is built from the store (the
    /// longest step: it reads every page's codes, minutes at 100,000 pages) or brought up to
    /// date. A model scanned in full is loaded at its first question instead (about 0.3 s a
    /// thousand pages), so that memory is not held for a model nobody asks. Blocking; a question
    /// asked meanwhile waits for the build rather than start another.
    pub fn prepare(&self, db: &mut dyn Db, model: &str) -> Result<Vec<Prepared>> {
        let rows = db.query(
            "SELECT dim, generation, pages FROM ip_visual_changes
             WHERE model = ?1 AND pages > 0 ORDER BY dim",
            params![model],
        )?;
        let mut prepared = Vec::new();
        for r in &rows {
            let (dim, now): (i64, Stamp) = (r.get(0)?, [r.get(1)?, r.get(2)?]);
            let (Ok(dim), Ok(pages)) = (usize::try_from(dim), usize::try_from(now[1])) else {
                continue;
            };
            let centroids = self.uses_centroids(pages);
            if centroids {
                self.centroids_at(db, model, dim, now)?;
            }
            prepared.push(Prepared {
                dim,
                pages,
                centroids,
            });
        }
        Ok(prepared)
    }

    /// Whether a model of `pages` pages is searched through its centroid index.
    fn uses_centroids(&self, pages: usize) -> bool {
        self.settings.scan_max_pages == 0 || pages > self.settings.scan_max_pages
    }

    /// Forgets every loaded index (the memory is freed once no search holds it).
    pub fn clear(&self) {
        self.lock().clear();
        self.centroids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, usize), Loaded>> {
        // A panic elsewhere cannot leave the map half-written: inserts are single calls.
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `model`'s centroid index, brought up to date with the store's rows (`now`).
    fn centroids_at(
        &self,
        db: &mut dyn Db,
        model: &str,
        dim: usize,
        now: Stamp,
    ) -> Result<Arc<Centroids>> {
        let entry = Arc::clone(
            self.centroids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((model.to_owned(), dim))
                .or_default(),
        );
        let _one_at_a_time = entry.syncing.lock().unwrap_or_else(|e| e.into_inner());
        let (current, trained_at) = {
            let s = entry.state.read().unwrap_or_else(|e| e.into_inner());
            (
                s.as_ref().is_some_and(|s| s.stamp == now),
                s.as_ref().map(|s| s.trained_at),
            )
        };
        if current {
            drop(_one_at_a_time);
            return Ok(entry);
        }
        let counts = doc_pages(db, model, dim)?;
        let pages = usize::try_from(counts.values().sum::<i64>()).unwrap_or(0);
        match trained_at {
            Some(at) if pages <= at.saturating_mul(4) => {
                self.update(db, &entry, model, dim, counts, now)?
            }
            _ => {
                let built = self.build(db, model, dim, counts, now)?;
                *entry.state.write().unwrap_or_else(|e| e.into_inner()) = Some(built);
            }
        }
        drop(_one_at_a_time);
        Ok(entry)
    }

    /// A centroid index of every stored page of `model`, read document by document (the
    /// codebook trained on the first pages read).
    fn build(
        &self,
        db: &mut dyn Db,
        model: &str,
        dim: usize,
        counts: HashMap<i64, i64>,
        now: Stamp,
    ) -> Result<CentroidState> {
        let started = Instant::now();
        let mut docs: Vec<i64> = counts.keys().copied().collect();
        docs.sort_unstable();
        let pages = usize::try_from(counts.values().sum::<i64>()).unwrap_or(0);
        let mut index: Option<CentroidIndex<(i64, u32)>> = None;
        let mut waiting: Vec<((i64, u32), Vec<f32>)> = Vec::new();
        let mut sample_vectors = 0usize;
        for chunk in docs.chunks(64) {
            let read = load_int8_index(db, model, dim, Some(chunk))?;
            for (key, values) in read.page_values() {
                match &mut index {
                    Some(index) => {
                        // Vectors of another length than the index's are not pages of it.
                        index.insert(key, &values).ok();
                    }
                    None => {
                        sample_vectors += values.len() / dim.max(1);
                        waiting.push((key, values));
                    }
                }
            }
            if index.is_none() {
                let per_page = sample_vectors / waiting.len().max(1);
                let centroids = match self.settings.centroids.centroids {
                    0 => auto_centroids(pages.saturating_mul(per_page)),
                    c => c,
                };
                let enough = sample_vectors >= training_sample(centroids);
                if enough || chunk.last() == docs.last() {
                    index = Some(self.train(dim, centroids, &mut waiting)?);
                }
            }
        }
        let index = match index {
            Some(index) => index,
            None => self.train(dim, 1, &mut waiting)?,
        };
        tracing::info!(
            model,
            pages = index.len(),
            centroids = index.centroid_count(),
            bytes = index.memory_bytes(),
            secs = started.elapsed().as_secs_f64(),
            "visual index built from the store"
        );
        Ok(CentroidState {
            stamp: now,
            trained_at: index.len(),
            index,
            docs: counts,
        })
    }

    /// A codebook of `centroids` trained on the `waiting` pages, which it then holds.
    fn train(
        &self,
        dim: usize,
        centroids: usize,
        waiting: &mut Vec<((i64, u32), Vec<f32>)>,
    ) -> Result<CentroidIndex<(i64, u32)>> {
        let sample: Vec<f32> = waiting
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        let settings = CentroidSettings {
            centroids,
            ..self.settings.centroids
        };
        let mut index = CentroidIndex::train(dim, &sample, settings)?;
        for (key, values) in waiting.drain(..) {
            index.insert(key, &values).ok();
        }
        Ok(index)
    }

    /// Brings `entry`'s index up to date: deleted documents dropped, new or grown ones read.
    fn update(
        &self,
        db: &mut dyn Db,
        entry: &Centroids,
        model: &str,
        dim: usize,
        counts: HashMap<i64, i64>,
        now: Stamp,
    ) -> Result<()> {
        let held = {
            let s = entry.state.read().unwrap_or_else(|e| e.into_inner());
            s.as_ref().map(|s| s.docs.clone()).unwrap_or_default()
        };
        let gone: HashSet<i64> = held
            .keys()
            .filter(|d| counts.get(d) != held.get(d))
            .copied()
            .collect();
        let mut changed: Vec<i64> = counts
            .iter()
            .filter(|(d, n)| held.get(d) != Some(n))
            .map(|(d, _)| *d)
            .collect();
        changed.sort_unstable();
        // Read before the index is locked: questions go on meanwhile.
        let read = load_int8_index(db, model, dim, Some(&changed))?;
        let mut s = entry.state.write().unwrap_or_else(|e| e.into_inner());
        let Some(state) = s.as_mut() else {
            return Ok(());
        };
        if !gone.is_empty() {
            state.index.remove_where(|(doc, _)| gone.contains(doc));
        }
        for (key, values) in read.page_values() {
            state.index.insert(key, &values).ok();
        }
        state.docs = counts;
        state.stamp = now;
        Ok(())
    }
}

/// Pages per document of `model` at `dim` (every stored row, with codes or before them).
fn doc_pages(db: &mut dyn Db, model: &str, dim: usize) -> Result<HashMap<i64, i64>> {
    db.query(
        "SELECT doc_id, count(*) FROM ip_page_vectors WHERE model = ?1 AND dim = ?2
         GROUP BY doc_id",
        params![model, dim as i64],
    )?
    .iter()
    .map(|r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)?)))
    .collect()
}

/// The change counter of `model` at `dim` (schema 7's `ip_visual_changes`, kept by triggers):
/// its generation and its pages; `[0, 0]` for a model with no page. One row read by its key.
fn stamp(db: &mut dyn Db, model: &str, dim: usize) -> Result<Stamp> {
    let rows = db.query(
        "SELECT generation, pages FROM ip_visual_changes WHERE model = ?1 AND dim = ?2",
        params![model, dim as i64],
    )?;
    match rows.first() {
        Some(r) => Ok([r.get(0)?, r.get(1)?]),
        None => Ok([0, 0]),
    }
}

/// [`super::search_visual`] over the cached index of `model` (documents `docs` only when given:
/// those are loaded for the question, as a filtered scan of the whole index could miss them).
/// Above the cache's [`VisualIndexSettings::scan_max_pages`], the centroid index finds the
/// candidates that exact MaxSim from the stored half floats ranks.
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
    if let Some(docs) = docs {
        let index = load_int8_index(db, model, query.dim, Some(docs))?;
        return rank_visual(db, &index, query, k, threads);
    }
    let now = stamp(db, model, query.dim)?;
    let pages = usize::try_from(now[1]).unwrap_or(0);
    if !cache.uses_centroids(pages) {
        let index = cache.index_at(db, model, query.dim, now)?;
        return rank_visual(db, &index, query, k, threads);
    }
    let entry = cache.centroids_at(db, model, query.dim, now)?;
    let state = entry.state.read().unwrap_or_else(|e| e.into_inner());
    let Some(state) = state.as_ref() else {
        return Ok(Vec::new());
    };
    let hits = state
        .index
        .search(query, k, threads, |(doc, page), buffer| {
            page_vectors_into(db, doc, page, query.dim, buffer).unwrap_or(false)
        })
        // A query of another dimension than the index's ranks nothing.
        .unwrap_or_default();
    page_hits(db, hits)
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

    #[test]
    fn the_change_counter_moves_on_every_write_of_a_models_pages_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        assert_eq!(stamp(&mut conn, "col", 4).unwrap(), [0, 0]);
        let (a, _) = insert_document(&mut conn, "a", "a", "/a.pdf").unwrap();
        store_page_vectors(&mut conn, a.id, 1, &page(1.0), "col").unwrap();
        store_page_vectors(&mut conn, a.id, 2, &page(0.5), "col").unwrap();
        let two = stamp(&mut conn, "col", 4).unwrap();
        assert_eq!(two[1], 2, "{two:?}");
        // A page's vectors written again (an upsert): the same pages, a new generation.
        store_page_vectors(&mut conn, a.id, 2, &page(0.0), "col").unwrap();
        let rewritten = stamp(&mut conn, "col", 4).unwrap();
        assert_eq!(rewritten[1], 2);
        assert_ne!(rewritten[0], two[0]);
        // A page moved to another model: counted there, not here.
        store_page_vectors(&mut conn, a.id, 2, &page(0.0), "other").unwrap();
        assert_eq!(stamp(&mut conn, "col", 4).unwrap()[1], 1);
        assert_eq!(stamp(&mut conn, "other", 4).unwrap()[1], 1);
        // The document deleted: no page left, and the generation moved on.
        let before = stamp(&mut conn, "col", 4).unwrap();
        delete_document(&mut conn, a.id).unwrap();
        let after = stamp(&mut conn, "col", 4).unwrap();
        assert_eq!(after[1], 0);
        assert_ne!(after[0], before[0]);
        // Read by its key, not by a scan of the model's rows.
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT generation, pages FROM ip_visual_changes
                 WHERE model = 'col' AND dim = 4",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(
            plan.contains("USING INDEX") || plan.contains("PRIMARY KEY"),
            "{plan}"
        );
    }

    #[test]
    fn prepare_builds_the_centroid_index_before_the_first_question() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let cache = VisualIndexCache::with_settings(VisualIndexSettings {
            scan_max_pages: 2,
            ..VisualIndexSettings::default()
        });
        let (a, _) = insert_document(&mut conn, "a", "a", "/a.pdf").unwrap();
        for p in 1..=3 {
            store_page_vectors(&mut conn, a.id, p, &page(p as f32 / 4.0), "col").unwrap();
        }
        let (b, _) = insert_document(&mut conn, "b", "b", "/b.pdf").unwrap();
        store_page_vectors(&mut conn, b.id, 1, &page(1.0), "small").unwrap();
        let held = |cache: &VisualIndexCache, model: &str| {
            cache
                .centroids
                .lock()
                .unwrap()
                .get(&(model.to_owned(), 4))
                .map(|e| e.state.read().unwrap().as_ref().map(|s| s.index.len()))
        };
        assert_eq!(held(&cache, "col"), None);
        let ready = cache.prepare(&mut conn, "col").unwrap();
        assert_eq!(
            ready,
            [Prepared {
                dim: 4,
                pages: 3,
                centroids: true
            }]
        );
        assert_eq!(
            held(&cache, "col"),
            Some(Some(3)),
            "built before any question"
        );
        // Under the scan size: nothing held until a question.
        let small = cache.prepare(&mut conn, "small").unwrap();
        assert!(!small[0].centroids);
        assert_eq!(held(&cache, "small"), None);
        assert!(cache.prepare(&mut conn, "none").unwrap().is_empty());
        // The first question uses what was built: the best page first.
        let hits = search_visual_cached(&mut conn, &cache, "col", &page(0.75), 2, None, 1).unwrap();
        assert_eq!((hits[0].doc_id, hits[0].page_no), (a.id, 3), "{hits:?}");
    }
}
