//! An inverted file of single vectors ([`IvfLists`]): unit-length `f32` rows of one dimension
//! in contiguous lists, one list (an exact scan) below [`IndexSettings::ivf_min`] rows, else the
//! rows grouped by their nearest spherical k-means centroid (about √n lists), and a question scans
//! the lists of its `probes` nearest centroids. Each row carries an entry of the caller's (what it
//! stands for: a chunk, a page); cosine is the dot product of unit rows ([`crate::normalized`]).
//!
//! ```
//! use horos_retrieval::ivf::{IndexSettings, IvfLists};
//! use horos_retrieval::normalized;
//!
//! let mut index = IvfLists::new(3);
//! index.push("north", &normalized(&[0.0, 1.0, 0.1]))?;
//! index.push("east", &normalized(&[1.0, 0.0, 0.0]))?;
//! // Reorganised into inverted lists once it holds `ivf_min` rows (here it stays one list).
//! if let Some(grouped) = index.reorganised(&IndexSettings::default()) {
//!     index = grouped;
//! }
//! let best = index.search(&normalized(&[0.1, 0.9, 0.0]), 1, 8, 1)?;
//! assert_eq!(best[0].1, "north");
//! # Ok::<(), horos_retrieval::maxsim::IndexError>(())
//! ```

use crate::maxsim::IndexError;
use crate::vector_kernel::{kmeans, nearest, score_rows, top_n};

/// How an inverted file is organised and scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSettings {
    /// Rows of one dimension from which they are grouped into inverted lists (below: an exact
    /// scan of every row).
    pub ivf_min: usize,
    /// Inverted lists a question scans at least.
    pub probes: usize,
    /// Rows a question scans at least (more lists than `probes` where the lists are short: the
    /// fewer the rows, the more a question's neighbours spread over the lists).
    pub scan_min: usize,
    /// Threads scanning the rows for one question (and assigning rows to lists).
    pub threads: usize,
}

impl Default for IndexSettings {
    fn default() -> Self {
        Self {
            ivf_min: 150_000,
            probes: 64,
            scan_min: 60_000,
            threads: 1,
        }
    }
}

/// One list: its rows (`dim` values each) and what each stands for.
#[derive(Debug, Clone)]
struct List<E> {
    rows: Vec<f32>,
    entries: Vec<E>,
}

impl<E> Default for List<E> {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            entries: Vec::new(),
        }
    }
}

/// Unit-length rows of one dimension, each with the entry `E` it stands for, scanned exactly
/// while few and through inverted lists from [`IndexSettings::ivf_min`] rows (see the module's
/// documentation). Built again beside itself ([`Self::reorganised`]) as it grows or shrinks.
#[derive(Debug, Clone)]
pub struct IvfLists<E> {
    dim: usize,
    /// Unit-length centroids, one per list; empty for the single list of an exact scan.
    centroids: Vec<f32>,
    lists: Vec<List<E>>,
    /// Rows when the centroids were trained (they are trained again at four times as many).
    trained_at: usize,
    len: usize,
}

/// Rows scored by one worker at a time.
const SEGMENT_ROWS: usize = 4096;

/// Rows scanned for one question from which it is split over threads (the exact scan of 30,000
/// rows took 1.75 ms on one thread and 2.00 ms on two, with a worse tail: bench_text_index).
const PARALLEL_MIN_ROWS: usize = 100_000;

/// Training rows per list of k-means.
const SAMPLE_PER_LIST: usize = 24;

/// Rounds of k-means.
const KMEANS_ROUNDS: usize = 6;

impl<E: Copy + Send + Sync> IvfLists<E> {
    /// No rows yet, of `dim` values each, scanned exactly.
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            centroids: Vec::new(),
            lists: vec![List::default()],
            trained_at: 0,
            len: 0,
        }
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Inverted lists (0 for an exact scan).
    pub fn list_count(&self) -> usize {
        if self.centroids.is_empty() {
            0
        } else {
            self.lists.len()
        }
    }

    /// The lists a question scans: `probes`, or as many as hold `scan_min` rows on average.
    pub fn probes_for(&self, probes: usize, scan_min: usize) -> usize {
        let lists = self.lists.len();
        probes.max((lists * scan_min).div_ceil(self.len.max(1)))
    }

    /// Adds a unit-length row (`dim` values: another length is [`IndexError::Dimension`]).
    pub fn push(&mut self, entry: E, unit: &[f32]) -> Result<(), IndexError> {
        self.check(unit.len())?;
        let l = if self.centroids.is_empty() {
            0
        } else {
            nearest(&self.centroids, unit)
        };
        self.lists[l].rows.extend_from_slice(unit);
        self.lists[l].entries.push(entry);
        self.len += 1;
        Ok(())
    }

    /// The dimension of the rows.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Whether it holds no row.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, got: usize) -> Result<(), IndexError> {
        if self.dim == 0 || got != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got,
            });
        }
        Ok(())
    }

    /// Drops the rows whose entry `keep` refuses; how many.
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) -> usize {
        let dim = self.dim;
        let mut removed = 0;
        for list in &mut self.lists {
            let mut w = 0;
            for r in 0..list.entries.len() {
                if keep(&list.entries[r]) {
                    if w != r {
                        list.entries[w] = list.entries[r];
                        list.rows.copy_within(r * dim..(r + 1) * dim, w * dim);
                    }
                    w += 1;
                }
            }
            removed += list.entries.len() - w;
            list.entries.truncate(w);
            list.rows.truncate(w * dim);
        }
        self.len -= removed;
        removed
    }

    /// The rows regrouped, when their count calls for it: into inverted lists from
    /// `settings.ivf_min` rows (trained again at four times the rows they were trained on), back
    /// into one list below half of it. Built beside these lists (searches go on meanwhile).
    pub fn reorganised(&self, settings: &IndexSettings) -> Option<IvfLists<E>> {
        let ivf = !self.centroids.is_empty();
        let want_ivf = self.len >= settings.ivf_min;
        let retrain = want_ivf && (!ivf || self.len >= 4 * self.trained_at.max(1));
        let flatten = ivf && self.len < settings.ivf_min / 2;
        if !(retrain || flatten) {
            return None;
        }
        let dim = self.dim;
        let mut rows = Vec::with_capacity(self.len * dim);
        let mut entries = Vec::with_capacity(self.len);
        for list in &self.lists {
            rows.extend_from_slice(&list.rows);
            entries.extend_from_slice(&list.entries);
        }
        let n = entries.len();
        if flatten {
            return Some(IvfLists {
                dim,
                centroids: Vec::new(),
                lists: vec![List { rows, entries }],
                trained_at: 0,
                len: n,
            });
        }
        let count = ((n as f64).sqrt() as usize).max(1);
        // Training rows spread evenly over the index.
        let take = (count * SAMPLE_PER_LIST).min(n);
        let stride = (n / take.max(1)).max(1);
        let sample: Vec<f32> = (0..take)
            .flat_map(|i| {
                rows[i * stride * dim..(i * stride + 1) * dim]
                    .iter()
                    .copied()
            })
            .collect();
        let centroids = kmeans(&sample, dim, count, KMEANS_ROUNDS);
        let mut lists: Vec<List<E>> = (0..centroids.len() / dim)
            .map(|_| List::default())
            .collect();
        let assigned = assign(&centroids, &rows, dim, settings.threads);
        for (i, l) in assigned.into_iter().enumerate() {
            lists[l]
                .rows
                .extend_from_slice(&rows[i * dim..(i + 1) * dim]);
            lists[l].entries.push(entries[i]);
        }
        Some(IvfLists {
            dim,
            centroids,
            lists,
            trained_at: n,
            len: n,
        })
    }

    /// The best `n` rows for the unit-length `query`, best first, with their cosine: every row
    /// of an exact scan, the rows of the `probes` nearest lists of an inverted file (see
    /// [`Self::probes_for`]). Scanned on `threads` threads. A query of another dimension is
    /// [`IndexError::Dimension`].
    pub fn search(
        &self,
        query: &[f32],
        n: usize,
        probes: usize,
        threads: usize,
    ) -> Result<Vec<(f32, E)>, IndexError> {
        self.search_where(query, n, probes, threads, &|_| true)
    }

    /// [`Self::search`] among the rows whose entry `keep` accepts: the others are never
    /// answered, and take no place among the best `n` (a filter applied after the ranking
    /// would leave fewer than `n`, or none, where the rows kept are few). Through inverted
    /// lists, only the rows of the lists scanned are found, as by [`Self::search`].
    pub fn search_where(
        &self,
        query: &[f32],
        n: usize,
        probes: usize,
        threads: usize,
        keep: &(dyn Fn(&E) -> bool + Sync),
    ) -> Result<Vec<(f32, E)>, IndexError> {
        self.check(query.len())?;
        let lists: Vec<&List<E>> = if self.centroids.is_empty() {
            self.lists.iter().collect()
        } else {
            let mut scores = Vec::with_capacity(self.lists.len());
            score_rows(query, &self.centroids, &mut scores);
            top_n(&scores, probes.max(1))
                .into_iter()
                .map(|l| &self.lists[l])
                .collect()
        };
        let dim = self.dim;
        let segments: Vec<(&List<E>, usize, usize)> = lists
            .iter()
            .flat_map(|l| {
                let rows = l.entries.len();
                (0..rows)
                    .step_by(SEGMENT_ROWS)
                    .map(move |s| (*l, s, (s + SEGMENT_ROWS).min(rows)))
            })
            .collect();
        let scan = |part: &[(&List<E>, usize, usize)]| -> Vec<(f32, E)> {
            let mut scores = Vec::new();
            let mut found = Vec::new();
            for &(list, start, end) in part {
                scores.clear();
                score_rows(query, &list.rows[start * dim..end * dim], &mut scores);
                for (score, entry) in scores.iter_mut().zip(&list.entries[start..end]) {
                    if !keep(entry) {
                        *score = f32::NEG_INFINITY;
                    }
                }
                found.extend(
                    top_n(&scores, n)
                        .into_iter()
                        .filter(|&i| scores[i] > f32::NEG_INFINITY)
                        .map(|i| (scores[i], list.entries[start + i])),
                );
            }
            found
        };
        // Below a few hundred thousand rows, starting threads costs as much as it saves.
        let rows: usize = segments.iter().map(|(_, start, end)| end - start).sum();
        let threads = if rows < PARALLEL_MIN_ROWS {
            1
        } else {
            threads.clamp(1, segments.len().max(1))
        };
        let found: Vec<(f32, E)> = if threads == 1 {
            scan(&segments)
        } else {
            let per = segments.len().div_ceil(threads);
            std::thread::scope(|s| {
                let handles: Vec<_> = segments
                    .chunks(per)
                    .map(|part| s.spawn(move || scan(part)))
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        };
        let scores: Vec<f32> = found.iter().map(|f| f.0).collect();
        Ok(top_n(&scores, n).into_iter().map(|i| found[i]).collect())
    }
}

/// The nearest centroid of each row, computed on `threads` threads.
fn assign(centroids: &[f32], rows: &[f32], dim: usize, threads: usize) -> Vec<usize> {
    let n = rows.len() / dim.max(1);
    let threads = threads.clamp(1, n.max(1));
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = rows
            .chunks(per * dim)
            .map(|part| {
                s.spawn(move || {
                    part.chunks_exact(dim)
                        .map(|r| nearest(centroids, r))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashSet;

    use super::*;
    use crate::normalized;

    /// Unit rows around `clusters` random centres (what embeddings of many topics look like).
    fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut x = seed.max(1);
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
        };
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..dim).map(|_| rand()).collect())
            .collect();
        (0..n)
            .map(|i| {
                let c = &centres[i % clusters];
                normalized(&c.iter().map(|v| v + 0.6 * rand()).collect::<Vec<_>>())
            })
            .collect()
    }

    #[test]
    fn inverted_lists_recall_the_exact_scans_best_ten() {
        let dim = 32;
        let mut rows = clustered(20_100, dim, 200, 7);
        // Questions near the same topics, not in the index.
        let queries = rows.split_off(20_000);
        let mut exact = IvfLists::new(dim);
        let mut ivf = IvfLists::new(dim);
        for (i, r) in rows.iter().enumerate() {
            exact.push(i, r).unwrap();
            ivf.push(i, r).unwrap();
        }
        let settings = IndexSettings {
            ivf_min: 10_000,
            probes: 24,
            scan_min: 0,
            threads: 2,
        };
        let mut ivf = ivf.reorganised(&settings).unwrap();
        assert!(ivf.list_count() > 100);
        let mut found = 0;
        for q in &queries {
            let want: HashSet<usize> = exact
                .search(q, 10, 0, 1)
                .unwrap()
                .iter()
                .map(|f| f.1)
                .collect();
            found += ivf
                .search(q, 10, settings.probes, 2)
                .unwrap()
                .iter()
                .filter(|f| want.contains(&f.1))
                .count();
        }
        let recall = found as f64 / (10 * queries.len()) as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
        // Fewer rows again: one exact list.
        ivf.retain(|e| *e < 3_000);
        let ivf = ivf.reorganised(&settings).unwrap();
        assert_eq!((ivf.list_count(), ivf.len()), (0, 3_000));
        assert!(ivf.reorganised(&settings).is_none());
    }

    #[test]
    fn rows_a_filter_refuses_are_never_answered_and_take_no_place() {
        let dim = 16;
        let rows = clustered(5_000, dim, 20, 3);
        let mut index = IvfLists::new(dim);
        for (i, r) in rows.iter().enumerate() {
            index.push(i, r).unwrap();
        }
        // Every 500th row kept: a question's ten best rows overall are others', yet the kept
        // rows come back, all of them, best first, and nothing else does.
        let keep = |e: &usize| e.is_multiple_of(500);
        let found = index.search_where(&rows[1], 10, 1, 2, &keep).unwrap();
        let ids: Vec<usize> = found.iter().map(|f| f.1).collect();
        assert_eq!(ids.len(), 10, "{ids:?}");
        assert!(ids.iter().all(keep), "{ids:?}");
        assert!(found.windows(2).all(|w| w[0].0 >= w[1].0), "{found:?}");
        let unfiltered = index.search(&rows[1], 10, 1, 2).unwrap();
        assert!(unfiltered.iter().any(|f| !keep(&f.1)));
        // Nothing kept: nothing answered.
        assert!(
            index
                .search_where(&rows[1], 10, 1, 1, &|_| false)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_row_or_question_of_another_dimension_is_an_error_not_a_panic() {
        let mut index = IvfLists::new(4);
        assert_eq!(
            index.push(1, &[1.0, 0.0]),
            Err(IndexError::Dimension {
                expected: 4,
                got: 2
            })
        );
        assert!(index.is_empty());
        index.push(1, &[1.0, 0.0, 0.0, 0.0]).unwrap();
        assert!(index.search(&[1.0; 5], 3, 1, 1).is_err());
        assert!(
            index
                .search(&[1.0, 0.0, 0.0, 0.0], 0, 1, 1)
                .unwrap()
                .is_empty()
        );
        let mut empty = IvfLists::<u8>::new(0);
        assert!(empty.push(1, &[]).is_err());
        assert!(empty.search(&[], 3, 1, 1).is_err());
    }
}
