//! A visual index that scales past what a full MaxSim scan can read per question: token pooling
//! at index time, a first stage of centroids held in memory, and an exact MaxSim rerank of its
//! candidates from the stored vectors (the ColBERTv2 / PLAID pattern, kept small).
//!
//! - [`pool_tokens`]: a page's patch vectors grouped into `n / factor` clusters (spherical
//!   k-means seeded on evenly spaced patches), each cluster's mean kept: fewer vectors to store
//!   and to rerank, little lost (the neighbouring patches of a page repeat each other).
//! - [`CentroidIndex`]: a codebook of centroids trained on a sample of the collection's vectors
//!   (two levels, so that placing a vector costs about 2√C dot products, not C); each page is
//!   held as the set of centroids its vectors fall in, and each centroid lists its pages. A
//!   question scores every centroid once, then:
//!   1. each query vector's `probes` best centroids walk their lists: a page's score is the sum,
//!      over the query vectors, of the best centroid of its own that was probed;
//!   2. the best `shortlist` pages are scored on all their centroids (centroid MaxSim);
//!   3. the best `candidates` of those are rescored by exact MaxSim from the vectors the caller
//!      reads (the store's half floats), and the best `k` returned.
//!
//! Memory: 8 bytes per distinct centroid of a page (its list entry and the page's own list), a
//! few hundred bytes a page at ColQwen2's shape, against 93 KB a page for the int8 scan's codes.
//! `docs/benchmarks-visual.md` has the measurements behind the defaults.

use std::collections::HashMap;
use std::hash::Hash;

use crate::maxsim::{Hit, IndexError, MultiVector, PreparedQuery, top_k};
use crate::vector_kernel::{dot, kmeans, nearest, normalized, top_n};

/// `values` (rows of `dim`) pooled to about `len / factor` vectors: rows grouped by spherical
/// k-means (`rounds` refinements from evenly spaced seeds), each group's mean normalised. A
/// factor of 0 or 1, or fewer than two rows, leaves the rows as they are; rows that are not a
/// whole number of `dim` are returned unchanged.
pub fn pool_tokens(values: &[f32], dim: usize, factor: usize, rounds: usize) -> Vec<f32> {
    if dim == 0 || !values.len().is_multiple_of(dim) {
        return values.to_vec();
    }
    let n = values.len() / dim;
    if factor <= 1 || n < 2 {
        return values.to_vec();
    }
    let groups = n.div_ceil(factor);
    let centroids = kmeans(values, dim, groups, rounds.max(1));
    let mut sums = vec![0f32; groups * dim];
    let mut counts = vec![0usize; groups];
    for row in values.chunks_exact(dim) {
        let c = nearest(&centroids, row);
        counts[c] += 1;
        for (s, x) in sums[c * dim..(c + 1) * dim].iter_mut().zip(row) {
            *s += x;
        }
    }
    let mut out = Vec::with_capacity(groups * dim);
    for (c, count) in counts.iter().enumerate() {
        if *count > 0 {
            out.extend(normalized(&sums[c * dim..(c + 1) * dim]));
        }
    }
    out
}

/// How the index is built and searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CentroidSettings {
    /// Centroids of the codebook (0: [`auto_centroids`] of the training sample's size).
    pub centroids: usize,
    /// k-means refinements when training.
    pub rounds: usize,
    /// Centroids probed per query vector in the first stage.
    pub probes: usize,
    /// Pages of the first stage scored on all their centroids.
    pub shortlist: usize,
    /// Pages rescored by exact MaxSim (at least `k`).
    pub candidates: usize,
}

impl Default for CentroidSettings {
    fn default() -> Self {
        Self {
            centroids: 0,
            rounds: 6,
            probes: 8,
            shortlist: 2_000,
            candidates: 128,
        }
    }
}

/// The codebook's size for a collection of `vectors` stored vectors: about 4√n, a power of two
/// between 256 and 16,384.
pub fn auto_centroids(vectors: usize) -> usize {
    let target = 4.0 * (vectors as f64).sqrt();
    let pow = target.log2().round().clamp(8.0, 14.0);
    2usize.pow(pow as u32)
}

/// How many vectors to train a codebook of `centroids` on: 64 a centroid, at least 100,000.
pub fn training_sample(centroids: usize) -> usize {
    centroids.saturating_mul(64).max(100_000)
}

/// One page held by the index.
#[derive(Debug, Clone)]
struct Page<K> {
    /// `None` once removed (its slot stays until the lists are compacted).
    key: Option<K>,
    /// The distinct centroids its vectors fall in.
    cells: Box<[u32]>,
}

/// The first stage of a scalable visual search: pages as sets of centroids, centroids listing
/// their pages (see the module's documentation).
#[derive(Debug, Clone)]
pub struct CentroidIndex<K> {
    dim: usize,
    settings: CentroidSettings,
    /// Coarse centroids (rows of `dim`).
    coarse: Vec<f32>,
    /// Per coarse centroid: its fine centroids' first index and count in `fine`.
    cells: Vec<(u32, u32)>,
    /// The codebook (rows of `dim`), grouped by coarse centroid.
    fine: Vec<f32>,
    /// Per fine centroid: the page slots whose vectors fall in it.
    lists: Vec<Vec<u32>>,
    pages: Vec<Page<K>>,
    slots: HashMap<K, u32>,
    removed: usize,
}

impl<K: Copy + Eq + Hash + Send + Sync> CentroidIndex<K> {
    /// A codebook trained on `sample` (unit rows of `dim` values, e.g. a few pages' vectors of
    /// the collection), holding no page yet.
    pub fn train(
        dim: usize,
        sample: &[f32],
        settings: CentroidSettings,
    ) -> Result<Self, IndexError> {
        if dim == 0 || !sample.len().is_multiple_of(dim) {
            return Err(IndexError::Dimension {
                expected: dim,
                got: sample.len(),
            });
        }
        let n = sample.len() / dim;
        let wanted = if settings.centroids == 0 {
            auto_centroids(n)
        } else {
            settings.centroids
        }
        .clamp(1, n.max(1));
        let coarse_count = ((wanted as f64).sqrt().round() as usize).clamp(1, n.max(1));
        let coarse = kmeans(sample, dim, coarse_count, settings.rounds.max(1));
        let coarse_count = coarse.len() / dim;
        // The sample split by coarse centroid, each part clustered into its share of the
        // codebook.
        let mut parts: Vec<Vec<f32>> = vec![Vec::new(); coarse_count];
        for row in sample.chunks_exact(dim) {
            parts[nearest(&coarse, row)].extend_from_slice(row);
        }
        let (mut fine, mut cells) = (Vec::new(), Vec::with_capacity(coarse_count));
        for part in &parts {
            let rows = part.len() / dim;
            let share = (wanted * rows).div_ceil(n.max(1)).clamp(1, rows.max(1));
            let first = (fine.len() / dim) as u32;
            if rows == 0 {
                cells.push((first, 0));
                continue;
            }
            let centroids = kmeans(part, dim, share, settings.rounds.max(1));
            cells.push((first, (centroids.len() / dim) as u32));
            fine.extend(centroids);
        }
        let lists = vec![Vec::new(); fine.len() / dim];
        Ok(Self {
            dim,
            settings,
            coarse,
            cells,
            fine,
            lists,
            pages: Vec::new(),
            slots: HashMap::new(),
            removed: 0,
        })
    }

    /// The same codebook and pages, searched with other settings (the codebook's size is kept).
    pub fn with_settings(mut self, settings: CentroidSettings) -> Self {
        self.settings = CentroidSettings {
            centroids: self.settings.centroids,
            rounds: self.settings.rounds,
            ..settings
        };
        self
    }

    /// Dimension of the vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Centroids of the codebook.
    pub fn centroid_count(&self) -> usize {
        self.lists.len()
    }

    /// Pages held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no page is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether `key`'s page is held.
    pub fn contains(&self, key: &K) -> bool {
        self.slots.contains_key(key)
    }

    /// Bytes held: the codebook, the lists, each page's centroids and its key (the hash map's
    /// slots counted at their size).
    pub fn memory_bytes(&self) -> usize {
        let floats = (self.coarse.len() + self.fine.len()) * 4;
        let lists: usize = self.lists.iter().map(|l| l.capacity() * 4 + 24).sum();
        let pages: usize = self
            .pages
            .iter()
            .map(|p| p.cells.len() * 4 + std::mem::size_of::<Page<K>>())
            .sum();
        let slots = self.slots.capacity() * (std::mem::size_of::<K>() + 4 + 1);
        floats + lists + pages + slots
    }

    /// The centroid `v` (unit length) falls in: its nearest among the fine centroids of its two
    /// nearest coarse ones.
    fn place(&self, v: &[f32]) -> u32 {
        let coarse = self.coarse.chunks_exact(self.dim).map(|c| dot(c, v));
        let mut near = [(usize::MAX, f32::NEG_INFINITY); 2];
        for (i, s) in coarse.enumerate() {
            if s > near[0].1 {
                near = [(i, s), near[0]];
            } else if s > near[1].1 {
                near[1] = (i, s);
            }
        }
        let mut best = (0u32, f32::NEG_INFINITY);
        for (cell, _) in near.iter().filter(|(i, _)| *i != usize::MAX) {
            let (first, count) = self.cells[*cell];
            for c in first..first + count {
                let at = c as usize * self.dim;
                let s = dot(&self.fine[at..at + self.dim], v);
                if s > best.1 {
                    best = (c, s);
                }
            }
        }
        best.0
    }

    /// The distinct centroids a page's vectors (rows of `dim`) fall in: what [`Self::insert`]
    /// computes, apart so that many pages can be placed on several threads before they are
    /// inserted with [`Self::insert_placed`].
    pub fn place_page(&self, values: &[f32]) -> Result<Vec<u32>, IndexError> {
        if !values.len().is_multiple_of(self.dim) {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: values.len(),
            });
        }
        if self.lists.is_empty() {
            return Ok(Vec::new());
        }
        let mut cells: Vec<u32> = values
            .chunks_exact(self.dim)
            .map(|v| self.place(v))
            .collect();
        cells.sort_unstable();
        cells.dedup();
        Ok(cells)
    }

    /// Adds (or replaces) a page from its vectors (rows of `dim`, unit length as the model gives
    /// them, pooled or not).
    pub fn insert(&mut self, key: K, values: &[f32]) -> Result<(), IndexError> {
        let cells = self.place_page(values)?;
        self.insert_placed(key, cells);
        Ok(())
    }

    /// Adds (or replaces) a page by the centroids [`Self::place_page`] found for it (centroids
    /// this index does not have are ignored).
    pub fn insert_placed(&mut self, key: K, mut cells: Vec<u32>) {
        if self.lists.is_empty() {
            // An index trained on nothing has nowhere to put a page.
            return;
        }
        self.remove(&key);
        cells.retain(|c| (*c as usize) < self.lists.len());
        cells.sort_unstable();
        cells.dedup();
        let slot = self.pages.len() as u32;
        for c in &cells {
            self.lists[*c as usize].push(slot);
        }
        self.pages.push(Page {
            key: Some(key),
            cells: cells.into_boxed_slice(),
        });
        self.slots.insert(key, slot);
    }

    /// Removes `key`'s page; whether it was held. Its slot is skipped by searches, and the lists
    /// are compacted once a quarter of the slots are removed ones.
    pub fn remove(&mut self, key: &K) -> bool {
        let Some(slot) = self.slots.remove(key) else {
            return false;
        };
        if let Some(page) = self.pages.get_mut(slot as usize) {
            page.key = None;
        }
        self.removed += 1;
        if self.removed * 4 > self.pages.len() {
            self.compact();
        }
        true
    }

    /// Removes every page `gone` accepts; how many.
    pub fn remove_where(&mut self, gone: impl Fn(&K) -> bool) -> usize {
        let keys: Vec<K> = self.slots.keys().filter(|k| gone(k)).copied().collect();
        keys.iter().filter(|k| self.remove(k)).count()
    }

    /// Drops removed pages' slots and list entries.
    fn compact(&mut self) {
        let pages = std::mem::take(&mut self.pages);
        self.lists.iter_mut().for_each(Vec::clear);
        self.slots.clear();
        self.removed = 0;
        for page in pages.into_iter().filter(|p| p.key.is_some()) {
            let slot = self.pages.len() as u32;
            for c in page.cells.iter() {
                self.lists[*c as usize].push(slot);
            }
            if let Some(key) = page.key {
                self.slots.insert(key, slot);
            }
            self.pages.push(page);
        }
        self.lists.iter_mut().for_each(|l| l.shrink_to_fit());
    }

    /// Every centroid's score against every query vector, centroid-major (`nq` values per
    /// centroid), computed on `threads` threads.
    fn centroid_scores(&self, query: &MultiVector, threads: usize) -> Vec<f32> {
        let (dim, nq) = (self.dim, query.len());
        let per = self.lists.len().div_ceil(threads.max(1)).max(1);
        let score_part = |part: &[f32]| {
            let mut out = Vec::with_capacity(part.len() / dim * nq);
            for c in part.chunks_exact(dim) {
                out.extend(query.data.chunks_exact(dim).map(|q| dot(q, c)));
            }
            out
        };
        if threads <= 1 {
            return score_part(&self.fine);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .fine
                .chunks(per * dim)
                .map(|part| s.spawn(move || score_part(part)))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    }

    /// The `shortlist` best pages by the first two stages (centroid scores only), best first:
    /// `(slot, score)`.
    fn shortlist(&self, query: &MultiVector, threads: usize) -> Vec<(u32, f32)> {
        let nq = query.len();
        if nq == 0 || self.slots.is_empty() {
            return Vec::new();
        }
        let scores = self.centroid_scores(query, threads);
        // The same scores query-major: each query vector's scores of every centroid in a row.
        let centroids = self.lists.len();
        let mut by_query = vec![0f32; scores.len()];
        for (c, row) in scores.chunks_exact(nq).enumerate() {
            for (i, v) in row.iter().enumerate() {
                by_query[i * centroids + c] = *v;
            }
        }
        // Stage 1: each query vector's best probed centroid of each page met in their lists.
        let mut total = vec![0f32; self.pages.len()];
        let mut best = vec![f32::NEG_INFINITY; self.pages.len()];
        let mut met: Vec<u32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for col in by_query.chunks_exact(centroids) {
            let probed = top_n(col, self.settings.probes.max(1));
            let floor = probed.last().map_or(0.0, |c| col[*c]);
            for c in &probed {
                let s = col[*c];
                for slot in &self.lists[*c] {
                    let b = &mut best[*slot as usize];
                    if *b == f32::NEG_INFINITY {
                        touched.push(*slot);
                        *b = s;
                    } else if s > *b {
                        *b = s;
                    }
                }
            }
            for slot in touched.drain(..) {
                let t = &mut total[slot as usize];
                if *t == 0.0 {
                    met.push(slot);
                }
                // Above the floor (a page that shows none of the probed centroids gets it).
                *t += best[slot as usize] - floor + f32::MIN_POSITIVE;
                best[slot as usize] = f32::NEG_INFINITY;
            }
        }
        met.retain(|s| self.pages[*s as usize].key.is_some());
        let first: Vec<f32> = met.iter().map(|s| total[*s as usize]).collect();
        let keep = top_n(&first, self.settings.shortlist.max(1));
        // Stage 2: the shortlist scored on all its centroids.
        let mut maxes = vec![f32::NEG_INFINITY; nq];
        keep.into_iter()
            .map(|i| {
                let slot = met[i];
                maxes.iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
                for c in self.pages[slot as usize].cells.iter() {
                    let row = &scores[*c as usize * nq..(*c as usize + 1) * nq];
                    for (m, s) in maxes.iter_mut().zip(row) {
                        *m = m.max(*s);
                    }
                }
                (slot, maxes.iter().sum())
            })
            .collect()
    }

    /// The `k` best pages for `query` by the centroids alone (stages 1 and 2), best first.
    pub fn search_approximate(
        &self,
        query: &MultiVector,
        k: usize,
        threads: usize,
    ) -> Result<Vec<Hit<K>>, IndexError> {
        self.check(query)?;
        let found = self.shortlist(query, threads);
        Ok(top_k(
            found
                .into_iter()
                .filter_map(|(slot, s)| self.pages[slot as usize].key.map(|k| (k, s))),
            k,
        ))
    }

    /// The `k` best pages for `query` by exact MaxSim over the vectors `exact(key, buffer)` reads
    /// into `buffer` (cleared first; `false`: the page cannot be read, e.g. deleted meanwhile, and
    /// is left out) for the first stages' best `candidates`, best first. The pages are read one
    /// after the other on the calling thread (the reader may be a database connection) and
    /// scored on `threads` threads meanwhile; buffers are reused.
    pub fn search(
        &self,
        query: &MultiVector,
        k: usize,
        threads: usize,
        mut exact: impl FnMut(K, &mut Vec<f32>) -> bool,
    ) -> Result<Vec<Hit<K>>, IndexError> {
        self.check(query)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut found = self.shortlist(query, threads);
        let candidates = self.settings.candidates.max(k);
        if found.len() > candidates {
            found.select_nth_unstable_by(candidates - 1, |a, b| b.1.total_cmp(&a.1));
            found.truncate(candidates);
        }
        let keys: Vec<K> = found
            .iter()
            .filter_map(|(slot, _)| self.pages[*slot as usize].key)
            .collect();
        let dim = self.dim;
        let valid = |v: &[f32]| !v.is_empty() && v.len().is_multiple_of(dim);
        let prepared = PreparedQuery::new(&query.data, dim);
        let workers = threads.clamp(1, keys.len().max(1));
        if workers <= 1 {
            let (mut buffer, mut scratch) = (Vec::new(), Vec::new());
            let mut rescored = Vec::with_capacity(keys.len());
            for key in keys {
                buffer.clear();
                if exact(key, &mut buffer) && valid(&buffer) {
                    rescored.push((key, prepared.score(&buffer, &mut scratch)));
                }
            }
            return Ok(top_k(rescored.into_iter(), k));
        }
        let (work, queue) = std::sync::mpsc::sync_channel::<(K, Vec<f32>)>(workers * 2);
        let queue = std::sync::Mutex::new(queue);
        let (spare, reuse) = std::sync::mpsc::channel::<Vec<f32>>();
        let rescored = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let (queue, spare, prepared) = (&queue, spare.clone(), &prepared);
                    s.spawn(move || {
                        let (mut scratch, mut out) = (Vec::new(), Vec::new());
                        loop {
                            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                            let Ok((key, v)) = next else { break };
                            out.push((key, prepared.score(&v, &mut scratch)));
                            // The reader may have finished: a buffer it no longer wants.
                            let _ = spare.send(v);
                        }
                        out
                    })
                })
                .collect();
            drop(spare);
            for key in keys {
                let mut buffer = reuse.try_recv().unwrap_or_default();
                buffer.clear();
                if exact(key, &mut buffer) && valid(&buffer) && work.send((key, buffer)).is_err() {
                    break;
                }
            }
            drop(work);
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Vec<_>>()
        });
        Ok(top_k(rescored.into_iter(), k))
    }

    fn check(&self, query: &MultiVector) -> Result<(), IndexError> {
        if query.dim != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: query.dim,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::maxsim::maxsim;

    const DIM: usize = 16;

    /// A reader's answer: `values` copied into the buffer.
    fn fill(buffer: &mut Vec<f32>, values: &[f32]) -> bool {
        buffer.extend_from_slice(values);
        true
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn uniform(&mut self) -> f32 {
            (self.next() as f32 / (1u64 << 31) as f32) - 0.5
        }
    }

    /// `pages` pages of 40 vectors, each a noisy copy of one of the page's 6 concepts (of 64).
    fn collection(pages: usize) -> (Vec<Vec<f32>>, Vec<Vec<usize>>, Vec<f32>) {
        let mut rng = Rng(9);
        let concepts: Vec<f32> = (0..64)
            .flat_map(|_| normalized(&(0..DIM).map(|_| rng.uniform()).collect::<Vec<_>>()))
            .collect();
        let (mut out, mut owns) = (Vec::new(), Vec::new());
        for _ in 0..pages {
            let own: Vec<usize> = (0..6).map(|_| rng.next() as usize % 64).collect();
            let mut page = Vec::new();
            for _ in 0..40 {
                let c = own[rng.next() as usize % own.len()];
                let v: Vec<f32> = concepts[c * DIM..(c + 1) * DIM]
                    .iter()
                    .map(|x| x + 0.1 * rng.uniform())
                    .collect();
                page.extend(normalized(&v));
            }
            out.push(page);
            owns.push(own);
        }
        (out, owns, concepts)
    }

    #[test]
    fn pooling_keeps_a_third_of_the_vectors_and_the_pages_maxsim() {
        let (pages, _, concepts) = collection(3);
        let pooled = pool_tokens(&pages[0], DIM, 3, 3);
        assert_eq!(pooled.len() % DIM, 0);
        let n = pooled.len() / DIM;
        assert!((1..=14).contains(&n), "{n} vectors");
        // Every pooled vector has unit length.
        for v in pooled.chunks_exact(DIM) {
            assert!((dot(v, v) - 1.0).abs() < 1e-4);
        }
        // A question made of the page's own concepts scores about the same on both.
        let query: Vec<f32> = concepts[..DIM * 4].to_vec();
        let mut s = Vec::new();
        let (full, small) = (
            maxsim(&query, &pages[0], DIM, &mut s),
            maxsim(&query, &pooled, DIM, &mut s),
        );
        assert!(
            (full - small).abs() < 0.15 * full.abs().max(1.0),
            "{full} vs {small}"
        );
        // Nothing to pool: unchanged.
        assert_eq!(pool_tokens(&pages[0], DIM, 1, 3), pages[0]);
        assert_eq!(pool_tokens(&pages[0][..DIM], DIM, 3, 3), pages[0][..DIM]);
        assert_eq!(pool_tokens(&[1.0, 2.0, 3.0], 2, 3, 3), [1.0, 2.0, 3.0]);
        assert!(pool_tokens(&[], DIM, 3, 3).is_empty());
    }

    fn index_of(pages: &[Vec<f32>], settings: CentroidSettings) -> CentroidIndex<usize> {
        let sample: Vec<f32> = pages.iter().take(50).flatten().copied().collect();
        let mut index = CentroidIndex::train(DIM, &sample, settings).unwrap();
        for (i, p) in pages.iter().enumerate() {
            index.insert(i, p).unwrap();
        }
        index
    }

    fn exact_top(pages: &[Vec<f32>], query: &[f32], k: usize) -> Vec<usize> {
        let mut s = Vec::new();
        let scored = pages
            .iter()
            .enumerate()
            .map(|(i, p)| (i, maxsim(query, p, DIM, &mut s)));
        top_k(scored, k).into_iter().map(|h| h.key).collect()
    }

    #[test]
    fn the_reranked_answer_is_exact_maxsim_of_the_best_pages() {
        let (pages, owns, concepts) = collection(400);
        let index = index_of(
            &pages,
            CentroidSettings {
                centroids: 64,
                ..CentroidSettings::default()
            },
        );
        assert_eq!(index.len(), 400);
        let mut agree = 0;
        for target in (0..400).step_by(40) {
            let query: Vec<f32> = owns[target]
                .iter()
                .flat_map(|c| concepts[c * DIM..(c + 1) * DIM].iter().copied())
                .collect();
            let q = MultiVector {
                dim: DIM,
                data: query.clone(),
            };
            let hits = index.search(&q, 5, 2, |k, b| fill(b, &pages[k])).unwrap();
            let want = exact_top(&pages, &query, 5);
            // The scores are exact MaxSim of the pages returned.
            let mut s = Vec::new();
            for h in &hits {
                let exact = maxsim(&query, &pages[h.key], DIM, &mut s);
                assert!((h.score - exact).abs() < 1e-4);
            }
            agree += hits.iter().filter(|h| want.contains(&h.key)).count();
            assert!(hits.iter().any(|h| h.key == target) || want[..1] != [target]);
        }
        assert!(agree >= 45, "{agree} of 50 of the exact top-5 found");
    }

    #[test]
    fn removed_pages_are_never_returned_and_new_ones_found_at_once() {
        let (pages, owns, concepts) = collection(120);
        let mut index = index_of(&pages[..100], CentroidSettings::default());
        let query_of = |t: usize| MultiVector {
            dim: DIM,
            data: owns[t]
                .iter()
                .flat_map(|c| concepts[c * DIM..(c + 1) * DIM].iter().copied())
                .collect(),
        };
        let read = |k: usize, b: &mut Vec<f32>| fill(b, &pages[k]);
        // A page added after training is found first for its own question.
        index.insert(110, &pages[110]).unwrap();
        let hits = index.search(&query_of(110), 3, 1, read).unwrap();
        assert_eq!(hits[0].key, 110, "{hits:?}");
        // Removed: never returned, even when nothing else was removed yet (no compaction).
        assert!(index.remove(&110));
        assert!(!index.remove(&110));
        let hits = index.search(&query_of(110), 10, 1, read).unwrap();
        assert!(hits.iter().all(|h| h.key != 110));
        // A page the reader cannot read (deleted from the store meanwhile) is left out.
        let gone = index.search(&query_of(5), 10, 1, |k, b| k != 5 && fill(b, &pages[k]));
        assert!(gone.unwrap().iter().all(|h| h.key != 5));
        // Many removed: compacted, the rest still found.
        assert_eq!(index.remove_where(|k| *k < 60), 60);
        assert_eq!(index.len(), 40);
        let hits = index.search(&query_of(70), 3, 1, read).unwrap();
        assert_eq!(hits[0].key, 70);
        assert!(hits.iter().all(|h| h.key >= 60));
        // Replaced: one page under its key.
        index.insert(70, &pages[71]).unwrap();
        assert_eq!(index.len(), 40);
        // A question of another dimension is refused.
        let wide = MultiVector {
            dim: DIM + 1,
            data: vec![0.0; DIM + 1],
        };
        assert!(index.search(&wide, 3, 1, read).is_err());
        assert!(index.memory_bytes() > 0);
    }

    #[test]
    fn training_on_little_or_bad_input_does_not_panic() {
        assert!(
            CentroidIndex::<usize>::train(DIM, &[0.5; DIM + 1], CentroidSettings::default())
                .is_err()
        );
        let mut empty =
            CentroidIndex::<usize>::train(DIM, &[], CentroidSettings::default()).unwrap();
        empty.insert(1, &[0.25; DIM]).unwrap();
        let q = MultiVector {
            dim: DIM,
            data: vec![0.25; DIM],
        };
        assert!(empty.search(&q, 3, 1, |_, _| false).unwrap().is_empty());
        let one = CentroidIndex::<usize>::train(DIM, &[0.25; DIM], CentroidSettings::default());
        let mut one = one.unwrap();
        one.insert(1, &[0.25; DIM * 2]).unwrap();
        let hits = one.search(&q, 3, 1, |_, b| fill(b, &[0.25; DIM])).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(auto_centroids(0), 256);
        assert_eq!(auto_centroids(1_000_000), 4096);
        assert_eq!(auto_centroids(usize::MAX / 2), 16_384);
    }
}
