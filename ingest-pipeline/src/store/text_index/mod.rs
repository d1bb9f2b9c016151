//! The text vectors kept in memory between questions ([`TextVectorIndex`]): reading and scoring
//! every chunk's vector from the database costs about 100 ms per 30,000 chunks and 2–3 s per
//! million, so a long-lived pipeline loads them once, as unit-length `f32` rows, and brings them
//! up to date before each question by reading only what changed. Until it is built (the first
//! [`TextVectorIndex::sync`]), a question is the full scan of the store: a one-shot command does
//! not pay for a build it would use once.
//!
//! How it stays true to the store, on either backend and whoever wrote it:
//! - **Added chunks** are found by id: rows above the highest id seen, and the rows that had no
//!   vector yet at the last look (found through the partial index `ip_chunks_unembedded`) and
//!   have one now. Both reads are cheap: they touch only what changed.
//! - **Deleted chunks** (a document deleted or retried, here or by another process) are never
//!   returned: every candidate is looked up in the store before it is answered (its snippet is
//!   read there anyway), and a missing one drops its document's stale rows from memory before the
//!   ranking is done again. This pipeline's own deletions drop them at once
//!   ([`TextVectorIndex::forget_document`]).
//!
//! - **Chunks committed out of id order** (PostgreSQL with several writers: ids are given in one
//!   order and committed in another): the ids below the highest one read that had no row at a
//!   sync (a transaction still open, or a row rolled back or deleted) are looked for again at
//!   each later sync, for [`GAP_TTL`] (the newest [`GAP_WINDOW`] ids at most), so a
//!   chunk whose transaction commits after a higher id was read is found at the next question.
//!   On SQLite one writer at a time commits ids in their order: there is no such gap.
//!
//! The structure: one contiguous list scanned exactly while small; from
//! [`IndexSettings::ivf_min`] rows an inverted file of about √n lists (spherical k-means in
//! this crate), of which a question scans the nearest `probes` (more while they hold fewer than
//! `scan_min` rows). `docs/benchmarks-search.md`
//! has the measurements behind the defaults.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use squeueha::params;

use super::collections::Readable;
use super::search::PageHit;
use super::{Db, Result, one};
use crate::maxsim::le_bytes_to_f32s;
pub use horos_retrieval::ivf::IndexSettings;
use horos_retrieval::normalized;

/// What a row of the index stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The chunk's id (`ip_chunks.id`).
    chunk: i64,
    /// Its document.
    doc: i64,
    /// Its page.
    page: u32,
}

/// The rows of one dimension (horos-retrieval's inverted file).
type Lists = horos_retrieval::ivf::IvfLists<Entry>;

/// Chunks read per query while loading.
const LOAD_BATCH: i64 = 20_000;

/// Ids in one `IN` list.
const IN_LIST_MAX: usize = 5_000;

/// How long an id missing below the highest one read is looked for again (a writer's
/// transaction open longer than this, with its chunks, is found at the next restart).
pub const GAP_TTL: Duration = Duration::from_secs(600);

/// Ids of one sync's new range checked for gaps at most (the newest: transactions in flight
/// hold the newest ids), and gaps held at most (the newest kept): looking for them again costs
/// at most two reads by primary key a sync.
pub const GAP_WINDOW: i64 = 10_000;

/// Rounds of ranking again after candidates were found deleted.
const MAX_ROUNDS: usize = 4;

/// What the index holds and how far it has read the store.
#[derive(Debug, Default)]
struct State {
    loaded: bool,
    /// The highest chunk id seen (with or without a vector).
    high: i64,
    /// Chunk ids at or below `high` that had no vector at the last look.
    pending: HashSet<i64>,
    /// Chunk ids held.
    held: HashSet<i64>,
    /// Ids at or below `high` that had no row when read (PostgreSQL only), with when first
    /// missed: looked for again at each sync until [`GAP_TTL`].
    gaps: HashMap<i64, Instant>,
    by_dim: HashMap<usize, Lists>,
}

/// The chunk vectors of a store in memory (see the module's documentation). Cheap to clone
/// (shared); searches run concurrently, and the updates between them are serialised.
#[derive(Debug, Clone, Default)]
pub struct TextVectorIndex {
    state: Arc<RwLock<State>>,
    syncing: Arc<Mutex<()>>,
    settings: IndexSettings,
}

/// What [`TextVectorIndex::sync`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Synced {
    /// Rows added.
    pub added: usize,
    /// Rows held after it.
    pub rows: usize,
    /// Seconds it took.
    pub secs: f64,
}

/// A chunk row read from the store.
struct ChunkRow {
    entry: Entry,
    vector: Vec<f32>,
}

impl TextVectorIndex {
    /// An empty index with the default settings; filled by the first [`Self::sync`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index organised and scanned as `settings` says.
    pub fn with_settings(settings: IndexSettings) -> Self {
        Self {
            settings,
            ..Self::default()
        }
    }

    /// The same index (shared rows) scanning at least `probes` inverted lists and `scan_min`
    /// rows per question.
    pub fn with_scan(&self, probes: usize, scan_min: usize) -> Self {
        Self {
            settings: IndexSettings {
                probes,
                scan_min,
                ..self.settings
            },
            ..self.clone()
        }
    }

    /// The same index (shared rows) scanning on `threads` threads per question.
    pub fn with_threads(&self, threads: usize) -> Self {
        Self {
            settings: IndexSettings {
                threads,
                ..self.settings
            },
            ..self.clone()
        }
    }

    /// Whether the index was built (a first [`Self::sync`] ended).
    pub fn is_built(&self) -> bool {
        self.read().loaded
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.read().by_dim.values().map(Lists::len).sum()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inverted lists per dimension (0: scanned exactly).
    pub fn lists(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = self
            .read()
            .by_dim
            .iter()
            .map(|(d, l)| (*d, l.list_count()))
            .collect();
        out.sort_unstable();
        out
    }

    /// Brings the index up to date with the store: on the first call every chunk's vector is
    /// read (logged with the time it took), later only the chunks added or given a vector since.
    pub fn sync(&self, db: &mut dyn Db) -> Result<Synced> {
        let started = Instant::now();
        let _one_at_a_time = self.syncing.lock().unwrap_or_else(|e| e.into_inner());
        let (loaded, high, pending, gaps) = {
            let s = self.read();
            (s.loaded, s.high, s.pending.clone(), s.gaps.clone())
        };
        // Gaps only arise where ids commit out of order.
        let track_gaps = super::is_postgres(db);
        // This sync reads the rows up to `top`, read first: a row inserted later is above it
        // (read at the next sync), one inserted before is either in `nulls` or has its vector
        // (read below, or embedded since it was pending).
        let top: i64 = one(db, "SELECT coalesce(max(id), 0) FROM ip_chunks", params![])?.get(0)?;
        let nulls: HashSet<i64> = db
            .query(
                "SELECT id FROM ip_chunks WHERE vector IS NULL AND id <= ?1",
                params![top],
            )?
            .iter()
            .map(|r| r.get::<i64>(0))
            .collect::<squeueha::Result<_>>()?;
        let mut added = 0;
        // The highest rows were deleted, and SQLite gives their ids again from above the
        // highest surviving row: read from the highest row known to be older than the new ones.
        let mut after = if top < high {
            let s = self.read();
            let known = s.held.iter().chain(&s.pending);
            known.filter(|id| **id <= top).max().copied().unwrap_or(0)
        } else {
            high
        };
        let first_new = after;
        let mut read_ids: HashSet<i64> = HashSet::new();
        loop {
            let batch = db.query(
                "SELECT id, doc_id, page_no, vector FROM ip_chunks
                 WHERE id > ?1 AND id <= ?2 AND vector IS NOT NULL ORDER BY id LIMIT ?3",
                params![after, top, LOAD_BATCH],
            )?;
            let Some(last) = batch.last() else { break };
            after = last.get(0)?;
            if track_gaps {
                for r in &batch {
                    let id: i64 = r.get(0)?;
                    if id > top.saturating_sub(GAP_WINDOW) {
                        read_ids.insert(id);
                    }
                }
            }
            let full = batch.len() as i64 == LOAD_BATCH;
            added += self.add(chunk_rows(&batch)?);
            if !full {
                break;
            }
        }
        let embedded: Vec<i64> = pending.difference(&nulls).copied().collect();
        // In statements of a bounded length (SQLite refuses one over a megabyte).
        for ids in embedded.chunks(IN_LIST_MAX) {
            let sql = format!(
                "SELECT id, doc_id, page_no, vector FROM ip_chunks
                 WHERE vector IS NOT NULL AND id IN ({})",
                id_list(ids)
            );
            added += self.add(chunk_rows(&db.query(&sql, params![])?)?);
        }
        // Ids missed before, looked for again: a row now there is read (or waits for its
        // vector with the others), one still missing is kept until it is too old.
        let mut nulls = nulls;
        let mut still_missing: HashMap<i64, Instant> = HashMap::new();
        if track_gaps && !gaps.is_empty() {
            let ids: Vec<i64> = gaps.keys().copied().collect();
            let mut found = HashSet::new();
            for ids in ids.chunks(IN_LIST_MAX) {
                let rows = db.query(
                    &format!(
                        "SELECT id, doc_id, page_no, vector FROM ip_chunks WHERE id IN ({})",
                        id_list(ids)
                    ),
                    params![],
                )?;
                for r in &rows {
                    let id: i64 = r.get(0)?;
                    found.insert(id);
                    if matches!(r.values().get(3), Some(squeueha::Value::Null) | None) {
                        nulls.insert(id);
                    }
                }
                added += self.add(chunk_rows(&rows)?);
            }
            still_missing.extend(
                gaps.into_iter()
                    .filter(|(id, at)| !found.contains(id) && at.elapsed() < GAP_TTL),
            );
        }
        if track_gaps && top > first_new {
            let now = Instant::now();
            let from = first_new.max(top.saturating_sub(GAP_WINDOW));
            for id in (from + 1)..=top {
                if !read_ids.contains(&id) && !nulls.contains(&id) {
                    still_missing.entry(id).or_insert(now);
                }
            }
        }
        if still_missing.len() > GAP_WINDOW as usize {
            let mut ids: Vec<i64> = still_missing.keys().copied().collect();
            ids.sort_unstable_by(|a, b| b.cmp(a));
            for id in &ids[GAP_WINDOW as usize..] {
                still_missing.remove(id);
            }
        }
        let mut s = self.write();
        s.pending = nulls
            .into_iter()
            .filter(|id| !s.held.contains(id))
            .collect();
        s.high = top;
        s.gaps = still_missing;
        drop(s);
        // Regrouped beside the rows in use (nothing else changes them while this sync runs:
        // changes all take `syncing`). Questions asked meanwhile wait for this sync, as they
        // bring the index up to date first: seconds at a million rows, at each fourfold growth.
        let rebuilt: Vec<(usize, Lists)> = self
            .read()
            .by_dim
            .iter()
            .filter_map(|(dim, l)| l.reorganised(&self.settings).map(|l| (*dim, l)))
            .collect();
        let mut s = self.write();
        s.by_dim.extend(rebuilt);
        let rows = s.by_dim.values().map(Lists::len).sum();
        let secs = started.elapsed().as_secs_f64();
        if !loaded {
            s.loaded = true;
            let lists = s.by_dim.values().map(Lists::list_count).sum::<usize>();
            tracing::info!(rows, lists, secs, "text-vector index built from the store");
        }
        Ok(Synced { added, rows, secs })
    }

    /// Adds rows read from the store (one read under a reused id replaces the row held); how
    /// many.
    fn add(&self, rows: Vec<ChunkRow>) -> usize {
        let added = rows.len();
        let mut s = self.write();
        for row in rows {
            if s.held.contains(&row.entry.chunk) {
                // An id seen again: a new row under a reused id, or the same one twice.
                let chunk = row.entry.chunk;
                s.by_dim.values_mut().for_each(|l| {
                    l.retain(|e| e.chunk != chunk);
                });
            }
            let unit = normalized(&row.vector);
            s.held.insert(row.entry.chunk);
            if unit.is_empty() {
                // A vector of no value: no question finds it.
                continue;
            }
            let lists = s
                .by_dim
                .entry(unit.len())
                .or_insert_with(|| Lists::new(unit.len()));
            // The lists are keyed by their rows' length: this row's dimension is theirs.
            let _ = lists.push(row.entry, &unit);
        }
        added
    }

    /// Drops a document's rows (it was deleted or is ingested again).
    pub fn forget_document(&self, doc_id: i64) {
        self.remove(|e| e.doc != doc_id);
    }

    /// Drops the rows `keep` refuses. The next sync reads the store again from the highest id
    /// still known (held or waiting for its vector) when that is below the last id read: SQLite
    /// gives a deleted highest id to the next row inserted, and only ids above every surviving
    /// row can be given again.
    fn remove(&self, keep: impl Fn(&Entry) -> bool) {
        // Not during a sync, which would set the last id read over the one lowered here.
        let _one_at_a_time = self.syncing.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = self.write();
        let mut gone = Vec::new();
        s.by_dim.values_mut().for_each(|l| {
            l.retain(|e| {
                let kept = keep(e);
                if !kept {
                    gone.push(e.chunk);
                }
                kept
            });
        });
        for &chunk in &gone {
            s.held.remove(&chunk);
        }
        if let Some(lowest) = gone.iter().min() {
            let surviving = s.held.iter().chain(&s.pending).max().copied().unwrap_or(0);
            s.high = s.high.min(surviving.max(lowest - 1));
        }
    }

    /// The best `n` chunks for `query` by cosine, best first, as [`super::search_vectors`]
    /// ranks them (chunks of another dimension are left out), after [`Self::sync`]; never a
    /// chunk the store no longer holds. Before the index is built (while it is, or in a one-shot
    /// command that never builds it), [`super::search_vectors`] itself: the full scan of the
    /// store.
    pub fn search(&self, db: &mut dyn Db, query: &[f32], n: usize) -> Result<Vec<PageHit>> {
        self.search_in(db, query, n, &Readable::Every)
    }

    /// [`Self::search`] among the chunks of the `readable` documents: the others are never
    /// answered and take no place among the best `n` (through inverted lists, the rows of the
    /// lists scanned only, as for every question).
    pub fn search_in(
        &self,
        db: &mut dyn Db,
        query: &[f32],
        n: usize,
        readable: &Readable,
    ) -> Result<Vec<PageHit>> {
        if !self.is_built() {
            return super::search_vectors_in(db, query, n, readable);
        }
        self.sync(db)?;
        if n == 0 || query.is_empty() {
            return Ok(Vec::new());
        }
        let unit = normalized(query);
        let mut hits = Vec::new();
        for round in 0..MAX_ROUNDS {
            if round > 0 {
                self.sync(db)?;
            }
            let found = match self.read().by_dim.get(&unit.len()) {
                Some(lists) => {
                    let probes = lists.probes_for(self.settings.probes, self.settings.scan_min);
                    // Found by the question's length: its dimension is the lists'.
                    let keep = |e: &Entry| readable.allows(e.doc);
                    lists
                        .search_where(&unit, n, probes, self.settings.threads, &keep)
                        .unwrap_or_default()
                }
                None => return Ok(Vec::new()),
            };
            let stored = stored_chunks(db, &found)?;
            // A chunk gone, or its id now another page's (SQLite reuses the highest ids).
            let stale: HashSet<i64> = found
                .iter()
                .filter(|(_, e)| stored.get(&e.chunk).is_none_or(|(at, _)| at != e))
                .map(|(_, e)| e.doc)
                .collect();
            hits = found
                .iter()
                .filter_map(|(score, e)| match stored.get(&e.chunk) {
                    Some((at, text)) if at == e => Some(PageHit {
                        doc_id: e.doc,
                        page_no: e.page,
                        score: f64::from(*score),
                        snippet: text.chars().take(120).collect(),
                    }),
                    _ => None,
                })
                .collect();
            if stale.is_empty() {
                break;
            }
            self.drop_stale(db, &stale)?;
        }
        Ok(hits)
    }

    /// Drops the rows of `docs` that the store no longer holds with a vector.
    fn drop_stale(&self, db: &mut dyn Db, docs: &HashSet<i64>) -> Result<()> {
        let docs: Vec<i64> = docs.iter().copied().collect();
        let live: HashSet<(i64, i64, u32)> = db
            .query(
                &format!(
                    "SELECT id, doc_id, page_no FROM ip_chunks
                     WHERE vector IS NOT NULL AND doc_id IN ({})",
                    id_list(&docs)
                ),
                params![],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .collect::<squeueha::Result<_>>()?;
        self.remove(|e| !docs.contains(&e.doc) || live.contains(&(e.chunk, e.doc, e.page)));
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // Updates are single calls between checks: a panic cannot leave a half-made row.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The found chunks that the store still holds with a vector, by id: what each stands for now,
/// and its text.
fn stored_chunks(db: &mut dyn Db, found: &[(f32, Entry)]) -> Result<HashMap<i64, (Entry, String)>> {
    if found.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<i64> = found.iter().map(|(_, e)| e.chunk).collect();
    db.query(
        &format!(
            "SELECT id, doc_id, page_no, text FROM ip_chunks
             WHERE vector IS NOT NULL AND id IN ({})",
            id_list(&ids)
        ),
        params![],
    )?
    .iter()
    .map(|r| {
        let entry = Entry {
            chunk: r.get(0)?,
            doc: r.get(1)?,
            page: r.get(2)?,
        };
        Ok((entry.chunk, (entry, r.get(3)?)))
    })
    .collect()
}

/// Ids as the literal list of an `IN` (integers only: nothing a user wrote).
fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// Rows of `(id, doc_id, page_no, vector)`; a vector that is not whole `f32`s is skipped.
fn chunk_rows(rows: &[squeueha::Row]) -> Result<Vec<ChunkRow>> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let Some(squeueha::Value::Blob(blob)) = r.values().get(3) else {
            continue;
        };
        // An empty vector ranks nothing (and has no dimension to group by).
        let Some(vector) = le_bytes_to_f32s(blob).filter(|v| !v.is_empty()) else {
            continue;
        };
        out.push(ChunkRow {
            entry: Entry {
                chunk: r.get(0)?,
                doc: r.get(1)?,
                page: r.get(2)?,
            },
            vector,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
