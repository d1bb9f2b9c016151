//! The rows of one dimension: unit-length `f32` vectors in contiguous lists, one list (an exact
//! scan) below [`IndexSettings::ivf_min`] rows, else an inverted file: the rows grouped by their
//! nearest k-means centroid, and a question scans the lists of its `probes` nearest centroids.

use super::IndexSettings;
use crate::vector_kernel::{kmeans, nearest, score_rows, top_n};

/// What a row of the index stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    /// The chunk's id (`ip_chunks.id`).
    pub chunk: i64,
    /// Its document.
    pub doc: i64,
    /// Its page.
    pub page: u32,
}

/// One list: its rows (`dim` values each) and what each stands for.
#[derive(Debug, Default)]
struct List {
    rows: Vec<f32>,
    entries: Vec<Entry>,
}

/// The rows of one dimension.
#[derive(Debug)]
pub(super) struct Lists {
    dim: usize,
    /// Unit-length centroids, one per list; empty for the single list of an exact scan.
    centroids: Vec<f32>,
    lists: Vec<List>,
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

impl Lists {
    /// No rows yet, scanned exactly.
    pub(super) fn new(dim: usize) -> Self {
        Self {
            dim,
            centroids: Vec::new(),
            lists: vec![List::default()],
            trained_at: 0,
            len: 0,
        }
    }

    /// Rows held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Inverted lists (0 for an exact scan).
    pub(super) fn list_count(&self) -> usize {
        if self.centroids.is_empty() {
            0
        } else {
            self.lists.len()
        }
    }

    /// The lists a question scans: `probes`, or as many as hold `scan_min` rows on average.
    pub(super) fn probes_for(&self, probes: usize, scan_min: usize) -> usize {
        let lists = self.lists.len();
        probes.max((lists * scan_min).div_ceil(self.len.max(1)))
    }

    /// Adds a unit-length row.
    pub(super) fn push(&mut self, entry: Entry, unit: &[f32]) {
        let l = if self.centroids.is_empty() {
            0
        } else {
            nearest(&self.centroids, unit)
        };
        self.lists[l].rows.extend_from_slice(unit);
        self.lists[l].entries.push(entry);
        self.len += 1;
    }

    /// Drops the rows whose entry `keep` refuses; how many.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> usize {
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
    pub(super) fn reorganised(&self, settings: &IndexSettings) -> Option<Lists> {
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
            return Some(Lists {
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
        let mut lists: Vec<List> = (0..centroids.len() / dim)
            .map(|_| List::default())
            .collect();
        let assigned = assign(&centroids, &rows, dim, settings.threads);
        for (i, l) in assigned.into_iter().enumerate() {
            lists[l]
                .rows
                .extend_from_slice(&rows[i * dim..(i + 1) * dim]);
            lists[l].entries.push(entries[i]);
        }
        Some(Lists {
            dim,
            centroids,
            lists,
            trained_at: n,
            len: n,
        })
    }

    /// The best `n` rows for the unit-length `query`, best first, with their cosine: every row
    /// of an exact scan, the rows of the `probes` nearest lists of an inverted file. Scanned on
    /// `threads` threads.
    pub(super) fn search(
        &self,
        query: &[f32],
        n: usize,
        probes: usize,
        threads: usize,
    ) -> Vec<(f32, Entry)> {
        let lists: Vec<&List> = if self.centroids.is_empty() {
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
        let segments: Vec<(&List, usize, usize)> = lists
            .iter()
            .flat_map(|l| {
                let rows = l.entries.len();
                (0..rows)
                    .step_by(SEGMENT_ROWS)
                    .map(move |s| (*l, s, (s + SEGMENT_ROWS).min(rows)))
            })
            .collect();
        let scan = |part: &[(&List, usize, usize)]| -> Vec<(f32, Entry)> {
            let mut scores = Vec::new();
            let mut found = Vec::new();
            for &(list, start, end) in part {
                scores.clear();
                score_rows(query, &list.rows[start * dim..end * dim], &mut scores);
                found.extend(
                    top_n(&scores, n)
                        .into_iter()
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
        let found: Vec<(f32, Entry)> = if threads == 1 {
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
        top_n(&scores, n).into_iter().map(|i| found[i]).collect()
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
