//! Late-interaction (ColBERT / ColQwen2 style) search over pages stored as many vectors each.
//!
//! The score of a page for a query is `Σ_q max_d ⟨q, d⟩` over the query's vectors `q` and the
//! page's vectors `d` (MaxSim). [`MultiVectorIndex`] keeps every page's vectors in one
//! contiguous `f32` buffer; the 128-dimension kernel computes 4 page vectors × 2 query vectors
//! at a time (AVX2 + FMA when the CPU has them, detected at run time), and pages are scored on
//! several threads.

use serde::{Deserialize, Serialize};

/// Several vectors of the same dimension, stored row after row.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MultiVector {
    /// Dimension of each vector.
    pub dim: usize,
    /// `len() * dim` values.
    pub data: Vec<f32>,
}

impl MultiVector {
    /// Builds from rows; all rows must have the same length (`None` otherwise).
    pub fn from_rows(rows: &[Vec<f32>]) -> Option<Self> {
        let dim = rows.first().map_or(0, Vec::len);
        if rows.iter().any(|r| r.len() != dim) {
            return None;
        }
        Some(Self {
            dim,
            data: rows.concat(),
        })
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Whether there is no vector.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Little-endian bytes of the values (the storage format).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        f32s_to_le_bytes(&self.data)
    }

    /// Reads the storage format back; `None` if the byte length does not fit `dim`.
    pub fn from_le_bytes(dim: usize, bytes: &[u8]) -> Option<Self> {
        let data = le_bytes_to_f32s(bytes)?;
        if dim == 0 || !data.len().is_multiple_of(dim) {
            return None;
        }
        Some(Self { dim, data })
    }
}

/// Values as little-endian bytes.
pub fn f32s_to_le_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Little-endian bytes as values; `None` when the length is not a multiple of 4.
pub fn le_bytes_to_f32s(bytes: &[u8]) -> Option<Vec<f32>> {
    let (chunks, rest) = bytes.as_chunks::<4>();
    if !rest.is_empty() {
        return None;
    }
    Some(chunks.iter().map(|c| f32::from_le_bytes(*c)).collect())
}

/// A search hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit<K> {
    /// The page's key.
    pub key: K,
    /// Its MaxSim score.
    pub score: f32,
}

/// Pages' vectors in one contiguous buffer, searchable by MaxSim.
#[derive(Debug, Clone)]
pub struct MultiVectorIndex<K> {
    dim: usize,
    data: Vec<f32>,
    /// (first vector, number of vectors) per page.
    spans: Vec<(usize, usize)>,
    keys: Vec<K>,
}

/// Errors of the index.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IndexError {
    /// A vector set has another dimension than the index.
    #[error("dimension {got} does not match the index's {expected}")]
    Dimension {
        /// The index's dimension.
        expected: usize,
        /// The one given.
        got: usize,
    },
}

impl<K: Copy + Send + Sync> MultiVectorIndex<K> {
    /// An empty index of vectors of `dim` values.
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            data: Vec::new(),
            spans: Vec::new(),
            keys: Vec::new(),
        }
    }

    /// An empty index with room for `pages` pages of `vectors_per_page` vectors.
    pub fn with_capacity(dim: usize, pages: usize, vectors_per_page: usize) -> Self {
        Self {
            dim,
            data: Vec::with_capacity(pages * vectors_per_page * dim),
            spans: Vec::with_capacity(pages),
            keys: Vec::with_capacity(pages),
        }
    }

    /// Dimension of the vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of pages.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the index has no page.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Adds a page's vectors (`values.len()` must be a multiple of the dimension).
    pub fn push(&mut self, key: K, values: &[f32]) -> Result<(), IndexError> {
        if self.dim == 0 || !values.len().is_multiple_of(self.dim) {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: values.len(),
            });
        }
        let start = self.data.len() / self.dim;
        self.data.extend_from_slice(values);
        self.spans.push((start, values.len() / self.dim));
        self.keys.push(key);
        Ok(())
    }

    /// The `k` best pages for `query` by MaxSim, best first, scoring on `threads` threads.
    pub fn search(
        &self,
        query: &MultiVector,
        k: usize,
        threads: usize,
    ) -> Result<Vec<Hit<K>>, IndexError> {
        if query.dim != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: query.dim,
            });
        }
        let scores = self.scores(&query.data, threads);
        Ok(top_k(self.keys.iter().copied().zip(scores), k))
    }

    /// MaxSim score of every page, in insertion order.
    pub fn scores(&self, query: &[f32], threads: usize) -> Vec<f32> {
        let n = self.spans.len();
        let mut out = vec![0f32; n];
        let prepared = PreparedQuery::new(query, self.dim);
        let threads = threads.clamp(1, n.max(1));
        let per = n.div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (t, slot) in out.chunks_mut(per).enumerate() {
                let first = t * per;
                let prepared = &prepared;
                s.spawn(move || {
                    let mut maxes = Vec::new();
                    for (i, score) in slot.iter_mut().enumerate() {
                        let (start, len) = self.spans[first + i];
                        let page = &self.data[start * self.dim..(start + len) * self.dim];
                        *score = prepared.score(page, &mut maxes);
                    }
                });
            }
        });
        out
    }
}

/// The `k` best of `scored`, best first (selection, then a sort of the `k`).
pub(crate) fn top_k<K>(scored: impl Iterator<Item = (K, f32)>, k: usize) -> Vec<Hit<K>> {
    let mut hits: Vec<Hit<K>> = scored.map(|(key, score)| Hit { key, score }).collect();
    let k = k.min(hits.len());
    if k == 0 {
        return Vec::new();
    }
    hits.select_nth_unstable_by(k - 1, |a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits
}

/// A query laid out for the fast kernel: for 128 dimensions on a CPU with AVX2 and FMA, the
/// query vectors are transposed into blocks of 32 (dimension-major), so that the kernel
/// multiplies one page value broadcast across 32 query lanes and keeps the running maxima in
/// registers (no horizontal sums).
pub struct PreparedQuery<'a> {
    dim: usize,
    raw: &'a [f32],
    blocks: Vec<Box<[f32; 128 * 32]>>,
}

impl<'a> PreparedQuery<'a> {
    /// Prepares `query` (vectors of `dim` values, row after row).
    pub fn new(query: &'a [f32], dim: usize) -> Self {
        let mut blocks = Vec::new();
        if dim == 128 && has_avx2_fma() {
            for chunk in query.chunks(128 * 32) {
                let mut b = Box::new([0f32; 128 * 32]);
                for (qi, qv) in chunk.chunks_exact(128).enumerate() {
                    for (k, v) in qv.iter().enumerate() {
                        b[k * 32 + qi] = *v;
                    }
                }
                blocks.push(b);
            }
        }
        Self {
            dim,
            raw: query,
            blocks,
        }
    }

    /// MaxSim score of one page (`maxes` is scratch space).
    pub fn score(&self, page: &[f32], maxes: &mut Vec<f32>) -> f32 {
        if self.blocks.is_empty() || page.is_empty() || self.dim == 0 {
            return maxsim(self.raw, page, self.dim, maxes);
        }
        #[cfg(target_arch = "x86_64")]
        {
            let nq = self.raw.len() / 128;
            let (docs, _) = page.as_chunks::<128>();
            let mut total = 0f32;
            for (b, block) in self.blocks.iter().enumerate() {
                let mut m = [f32::NEG_INFINITY; 32];
                // SAFETY: blocks are only built when the CPU has AVX2 and FMA (checked in new).
                unsafe { avx2::block32(block, docs, &mut m) };
                let used = (nq - b * 32).min(32);
                total += m[..used].iter().sum::<f32>();
            }
            total
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            maxsim(self.raw, page, self.dim, maxes)
        }
    }
}

fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_max_ps,
        _mm256_setzero_ps, _mm256_storeu_ps,
    };

    /// Running maxima of 32 query lanes over the page vectors `docs`; `qt` is the block of 32
    /// query vectors transposed (`qt[k * 32 + q]`). Two page vectors per step: 8 accumulators,
    /// 4 query registers, 2 broadcasts.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn block32(qt: &[f32; 128 * 32], docs: &[[f32; 128]], maxes: &mut [f32; 32]) {
        let q = qt.as_ptr();
        // SAFETY: every pointer below stays inside `qt` (k < 128, offsets < 32), a page vector
        // (k < 128) or `maxes` (32 values); unaligned loads and stores are used throughout.
        unsafe {
            let mut m = [
                _mm256_loadu_ps(maxes.as_ptr()),
                _mm256_loadu_ps(maxes.as_ptr().add(8)),
                _mm256_loadu_ps(maxes.as_ptr().add(16)),
                _mm256_loadu_ps(maxes.as_ptr().add(24)),
            ];
            let (pairs, rest) = docs.as_chunks::<2>();
            for pair in pairs {
                let (d0, d1) = (pair[0].as_ptr(), pair[1].as_ptr());
                let z = _mm256_setzero_ps();
                let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
                let (mut b0, mut b1, mut b2, mut b3) = (z, z, z, z);
                for k in 0..128 {
                    let qk = q.add(k * 32);
                    let (q0, q1, q2, q3) = (
                        _mm256_loadu_ps(qk),
                        _mm256_loadu_ps(qk.add(8)),
                        _mm256_loadu_ps(qk.add(16)),
                        _mm256_loadu_ps(qk.add(24)),
                    );
                    let x = _mm256_broadcast_ss(&*d0.add(k));
                    a0 = _mm256_fmadd_ps(q0, x, a0);
                    a1 = _mm256_fmadd_ps(q1, x, a1);
                    a2 = _mm256_fmadd_ps(q2, x, a2);
                    a3 = _mm256_fmadd_ps(q3, x, a3);
                    let y = _mm256_broadcast_ss(&*d1.add(k));
                    b0 = _mm256_fmadd_ps(q0, y, b0);
                    b1 = _mm256_fmadd_ps(q1, y, b1);
                    b2 = _mm256_fmadd_ps(q2, y, b2);
                    b3 = _mm256_fmadd_ps(q3, y, b3);
                }
                m[0] = _mm256_max_ps(m[0], _mm256_max_ps(a0, b0));
                m[1] = _mm256_max_ps(m[1], _mm256_max_ps(a1, b1));
                m[2] = _mm256_max_ps(m[2], _mm256_max_ps(a2, b2));
                m[3] = _mm256_max_ps(m[3], _mm256_max_ps(a3, b3));
            }
            for d in rest {
                let d0 = d.as_ptr();
                let z = _mm256_setzero_ps();
                let mut a: [__m256; 4] = [z, z, z, z];
                for k in 0..128 {
                    let qk = q.add(k * 32);
                    let x = _mm256_broadcast_ss(&*d0.add(k));
                    for (i, acc) in a.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(_mm256_loadu_ps(qk.add(i * 8)), x, *acc);
                    }
                }
                for i in 0..4 {
                    m[i] = _mm256_max_ps(m[i], a[i]);
                }
            }
            for (i, v) in m.iter().enumerate() {
                _mm256_storeu_ps(maxes.as_mut_ptr().add(i * 8), *v);
            }
        }
    }
}

/// MaxSim of one page: `Σ_q max_d ⟨q, d⟩`; `maxes` is scratch space of one value per query
/// vector. A page without vectors scores 0.
pub fn maxsim(query: &[f32], page: &[f32], dim: usize, maxes: &mut Vec<f32>) -> f32 {
    if dim == 0 || page.is_empty() || query.is_empty() {
        return 0.0;
    }
    let nq = query.len() / dim;
    maxes.clear();
    maxes.resize(nq, f32::NEG_INFINITY);
    if dim == 128 {
        let (q, _) = query.as_chunks::<128>();
        let (d, _) = page.as_chunks::<128>();
        kernel128_dispatch(q, d, maxes);
    } else {
        for (qi, q) in query.chunks_exact(dim).enumerate() {
            for d in page.chunks_exact(dim) {
                let dot: f32 = q.iter().zip(d).map(|(a, b)| a * b).sum();
                if dot > maxes[qi] {
                    maxes[qi] = dot;
                }
            }
        }
    }
    maxes.iter().sum()
}

fn kernel128_dispatch(q: &[[f32; 128]], d: &[[f32; 128]], maxes: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            unsafe { kernel128_avx2(q, d, maxes) };
            return;
        }
    }
    kernel128::<false>(q, d, maxes);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn kernel128_avx2(q: &[[f32; 128]], d: &[[f32; 128]], maxes: &mut [f32]) {
    kernel128::<true>(q, d, maxes);
}

#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

#[inline(always)]
fn hsum(v: &[f32; 8]) -> f32 {
    ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))
}

#[inline(always)]
#[allow(clippy::needless_range_loop)] // indexed lanes: the shape LLVM vectorises
fn dot128<const FMA: bool>(a: &[f32; 128], b: &[f32; 128]) -> f32 {
    let mut acc = [0f32; 8];
    for c in 0..16 {
        for l in 0..8 {
            acc[l] = madd::<FMA>(a[c * 8 + l], b[c * 8 + l], acc[l]);
        }
    }
    hsum(&acc)
}

#[allow(clippy::needless_range_loop)] // indexed lanes: the shape LLVM vectorises
/// Register-blocked kernel: 2 query vectors × 4 page vectors per step, 8 lanes per accumulator.
#[inline(always)]
fn kernel128<const FMA: bool>(q: &[[f32; 128]], d: &[[f32; 128]], maxes: &mut [f32]) {
    let (d4, d_rest) = d.as_chunks::<4>();
    let (q2, q_rest) = q.as_chunks::<2>();
    for db in d4 {
        for (qi, qb) in q2.iter().enumerate() {
            let mut acc = [[0f32; 8]; 8];
            for c in 0..16 {
                for l in 0..8 {
                    let i = c * 8 + l;
                    let (a0, a1) = (qb[0][i], qb[1][i]);
                    for (j, dv) in db.iter().enumerate() {
                        acc[j][l] = madd::<FMA>(a0, dv[i], acc[j][l]);
                        acc[4 + j][l] = madd::<FMA>(a1, dv[i], acc[4 + j][l]);
                    }
                }
            }
            let m0 = hsum(&acc[0])
                .max(hsum(&acc[1]))
                .max(hsum(&acc[2]).max(hsum(&acc[3])));
            let m1 = hsum(&acc[4])
                .max(hsum(&acc[5]))
                .max(hsum(&acc[6]).max(hsum(&acc[7])));
            let base = qi * 2;
            maxes[base] = maxes[base].max(m0);
            maxes[base + 1] = maxes[base + 1].max(m1);
        }
        let base = q2.len() * 2;
        for (k, qv) in q_rest.iter().enumerate() {
            for dv in db {
                maxes[base + k] = maxes[base + k].max(dot128::<FMA>(qv, dv));
            }
        }
    }
    for dv in d_rest {
        for (qi, qv) in q.iter().enumerate() {
            maxes[qi] = maxes[qi].max(dot128::<FMA>(qv, dv));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    fn naive(q: &[f32], d: &[f32], dim: usize) -> f32 {
        q.chunks_exact(dim)
            .map(|qv| {
                d.chunks_exact(dim)
                    .map(|dv| qv.iter().zip(dv).map(|(a, b)| a * b).sum::<f32>())
                    .fold(f32::NEG_INFINITY, f32::max)
            })
            .sum()
    }

    #[test]
    fn kernel_matches_naive_for_odd_sizes() {
        let mut seed = 7;
        for (nq, nd) in [(1, 1), (3, 5), (32, 1030), (5, 7), (2, 4)] {
            let q: Vec<f32> = (0..nq * 128).map(|_| lcg(&mut seed)).collect();
            let d: Vec<f32> = (0..nd * 128).map(|_| lcg(&mut seed)).collect();
            let mut scratch = Vec::new();
            let got = maxsim(&q, &d, 128, &mut scratch);
            let want = naive(&q, &d, 128);
            assert!(
                (got - want).abs() < 1e-3 * want.abs().max(1.0),
                "{nq}x{nd}: {got} vs {want}"
            );
        }
        let q: Vec<f32> = (0..3 * 10).map(|_| lcg(&mut seed)).collect();
        let d: Vec<f32> = (0..4 * 10).map(|_| lcg(&mut seed)).collect();
        let mut scratch = Vec::new();
        assert!((maxsim(&q, &d, 10, &mut scratch) - naive(&q, &d, 10)).abs() < 1e-4);
    }

    #[test]
    fn prepared_query_matches_naive() {
        let mut seed = 11;
        for (nq, nd) in [(1, 1), (31, 3), (32, 1030), (33, 5), (70, 2)] {
            let q: Vec<f32> = (0..nq * 128).map(|_| lcg(&mut seed)).collect();
            let d: Vec<f32> = (0..nd * 128).map(|_| lcg(&mut seed)).collect();
            let mut scratch = Vec::new();
            let got = PreparedQuery::new(&q, 128).score(&d, &mut scratch);
            let want = naive(&q, &d, 128);
            assert!(
                (got - want).abs() < 1e-3 * want.abs().max(1.0),
                "{nq}x{nd}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn search_ranks_the_matching_page_first() {
        let mut seed = 1;
        let mut index = MultiVectorIndex::new(128);
        let pages: Vec<Vec<f32>> = (0..50)
            .map(|_| (0..20 * 128).map(|_| lcg(&mut seed)).collect())
            .collect();
        for (i, p) in pages.iter().enumerate() {
            index.push(i, p).unwrap();
        }
        // Query: 6 vectors of page 37, slightly perturbed.
        let q: Vec<f32> = pages[37][..6 * 128]
            .iter()
            .map(|v| v + 0.01 * lcg(&mut seed))
            .collect();
        let hits = index
            .search(&MultiVector { dim: 128, data: q }, 3, 2)
            .unwrap();
        assert_eq!(hits.len(), 3);
        assert_eq!(hits[0].key, 37);
        assert!(hits[0].score > hits[1].score);
        assert!(
            index
                .search(
                    &MultiVector {
                        dim: 64,
                        data: vec![0.0; 64]
                    },
                    3,
                    2
                )
                .is_err()
        );
        let mv = MultiVector {
            dim: 128,
            data: pages[0].clone(),
        };
        assert_eq!(MultiVector::from_le_bytes(128, &mv.to_le_bytes()), Some(mv));
    }
}
