//! MaxSim over int8 vectors ([`Int8Index`]): a quarter of the memory of `f32` and, on a CPU with
//! AVX-VNNI or AVX-512 VNNI, 32 multiply-adds per instruction instead of 8.
//!
//! Page vectors are stored as int8 codes with one scale per vector ([`crate::quant::Int8Rows`]);
//! the query's vectors are quantised the same way. The kernel (`vpdpbusd`) multiplies unsigned by
//! signed bytes, so query codes are offset by 128 and each page vector carries the correction
//! `128 × Σ codes`. Approximate scores rank the pages; [`Int8Index::search_reranked`] rescores the
//! best candidates exactly from a full-precision copy (the store's half floats), so the final
//! top-k matches exact MaxSim while the scan reads one byte a value.

use crate::maxsim::{Hit, IndexError, MultiVector, PreparedQuery, top_k};
use crate::quant::{Int8Rows, quantize_row};

/// Pages' int8 vectors in one contiguous buffer, searchable by MaxSim.
#[derive(Debug, Clone)]
pub struct Int8Index<K> {
    dim: usize,
    codes: Vec<i8>,
    /// Per vector: its scale.
    scales: Vec<f32>,
    /// Per vector: `128 × Σ codes`, what the query's +128 offset adds to each dot product.
    offsets: Vec<i32>,
    /// (first vector, number of vectors) per page.
    spans: Vec<(usize, usize)>,
    keys: Vec<K>,
}

impl<K: Copy + Send + Sync> Int8Index<K> {
    /// An empty index of vectors of `dim` values.
    pub fn new(dim: usize) -> Self {
        Self::with_capacity(dim, 0, 0)
    }

    /// An empty index with room for `pages` pages of `vectors_per_page` vectors.
    pub fn with_capacity(dim: usize, pages: usize, vectors_per_page: usize) -> Self {
        let vectors = pages.saturating_mul(vectors_per_page);
        Self {
            dim,
            codes: Vec::with_capacity(vectors.saturating_mul(dim)),
            scales: Vec::with_capacity(vectors),
            offsets: Vec::with_capacity(vectors),
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

    /// Bytes held by the vectors (codes, scales and offsets).
    pub fn vector_bytes(&self) -> usize {
        self.codes.len() + self.scales.len() * 8
    }

    /// Adds a page's full-precision vectors, quantising them.
    pub fn push(&mut self, key: K, values: &[f32]) -> Result<(), IndexError> {
        if self.dim == 0 || !values.len().is_multiple_of(self.dim) {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: values.len(),
            });
        }
        self.push_rows(key, &Int8Rows::quantize(values, self.dim))
    }

    /// Adds a page's already quantised vectors (as stored).
    pub fn push_rows(&mut self, key: K, rows: &Int8Rows) -> Result<(), IndexError> {
        if rows.dim != self.dim || rows.codes.len() != rows.rows() * self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: rows.dim,
            });
        }
        let start = self.scales.len();
        self.codes.extend_from_slice(&rows.codes);
        self.scales.extend_from_slice(&rows.scales);
        self.offsets.extend(
            rows.codes
                .chunks_exact(self.dim)
                .map(|r| 128 * r.iter().map(|c| i32::from(*c)).sum::<i32>()),
        );
        self.spans.push((start, rows.rows()));
        self.keys.push(key);
        Ok(())
    }

    /// The `k` best pages for `query` by approximate (int8) MaxSim, best first, on `threads`
    /// threads.
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
        Ok(top_k(
            self.keys.iter().copied().zip(self.scores(query, threads)),
            k,
        ))
    }

    /// The `k` best pages for `query` by exact MaxSim: the best `candidates` pages of the int8
    /// scan (at least `k`) rescored from the full-precision vectors `exact(key)` gives (`None`:
    /// the page keeps its approximate score).
    pub fn search_reranked(
        &self,
        query: &MultiVector,
        k: usize,
        candidates: usize,
        threads: usize,
        mut exact: impl FnMut(K) -> Option<Vec<f32>>,
    ) -> Result<Vec<Hit<K>>, IndexError> {
        let shortlist = self.search(query, candidates.max(k), threads)?;
        let prepared = PreparedQuery::new(&query.data, self.dim);
        let mut scratch = Vec::new();
        let rescored = shortlist.into_iter().map(|h| {
            let score = exact(h.key)
                .filter(|v| v.len().is_multiple_of(self.dim))
                .map_or(h.score, |v| prepared.score(&v, &mut scratch));
            (h.key, score)
        });
        Ok(top_k(rescored, k))
    }

    /// Each page's key and its vectors decoded back to `f32` (codes × scales), in insertion
    /// order.
    pub fn page_values(&self) -> impl Iterator<Item = (K, Vec<f32>)> + '_ {
        self.keys
            .iter()
            .zip(&self.spans)
            .map(|(key, (start, len))| {
                let codes = &self.codes[start * self.dim..(start + len) * self.dim];
                let scales = &self.scales[*start..start + len];
                let values = codes
                    .chunks_exact(self.dim.max(1))
                    .zip(scales)
                    .flat_map(|(row, scale)| row.iter().map(move |c| f32::from(*c) * scale))
                    .collect();
                (*key, values)
            })
    }

    /// Approximate MaxSim score of every page, in insertion order.
    pub fn scores(&self, query: &MultiVector, threads: usize) -> Vec<f32> {
        let n = self.spans.len();
        let mut out = vec![0f32; n];
        if query.dim != self.dim || self.dim == 0 {
            return out;
        }
        let q = QueryCodes::new(&query.data, self.dim);
        let threads = threads.clamp(1, n.max(1));
        let per = n.div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (t, slot) in out.chunks_mut(per).enumerate() {
                let first = t * per;
                let q = &q;
                s.spawn(move || {
                    let mut maxes = Vec::new();
                    for (i, score) in slot.iter_mut().enumerate() {
                        let (start, len) = self.spans[first + i];
                        let page = PageCodes {
                            codes: &self.codes[start * self.dim..(start + len) * self.dim],
                            scales: &self.scales[start..start + len],
                            offsets: &self.offsets[start..start + len],
                        };
                        *score = q.score(&page, &mut maxes);
                    }
                });
            }
        });
        out
    }
}

/// One page's slice of the index.
struct PageCodes<'a> {
    codes: &'a [i8],
    scales: &'a [f32],
    offsets: &'a [i32],
}

/// The query quantised: per vector, codes + 128 as bytes and its scale. For 128 dimensions the
/// codes are also laid out for the AVX-VNNI kernel: blocks of 32 query vectors, for each group
/// of 4 dimensions the 32 vectors' 4 bytes side by side (`block[g * 128 + q * 4 + j]`).
struct QueryCodes {
    dim: usize,
    unsigned: Vec<u8>,
    scales: Vec<f32>,
    blocks: Vec<Box<[u8; 128 * 32]>>,
    /// The VNNI kernel the blocks are for (`None`: no blocks).
    kernel: Option<Vnni>,
}

impl QueryCodes {
    fn new(query: &[f32], dim: usize) -> Self {
        Self::with_kernel(query, dim, vnni_kernel())
    }

    /// As [`QueryCodes::new`], laid out for `kernel` (which the CPU must have).
    fn with_kernel(query: &[f32], dim: usize, kernel: Option<Vnni>) -> Self {
        let mut unsigned = Vec::with_capacity(query.len());
        let mut scales = Vec::with_capacity(query.len() / dim.max(1));
        for row in query.chunks_exact(dim) {
            let (codes, scale) = quantize_row(row);
            unsigned.extend(codes.iter().map(|c| (i16::from(*c) + 128) as u8));
            scales.push(scale);
        }
        let mut blocks = Vec::new();
        if dim == 128 && kernel.is_some() {
            for chunk in unsigned.chunks(128 * 32) {
                // Padding lanes hold code 0 (byte 128); their maxima are never summed.
                let mut b = Box::new([128u8; 128 * 32]);
                for (qi, qv) in chunk.chunks_exact(128).enumerate() {
                    for g in 0..32 {
                        b[g * 128 + qi * 4..g * 128 + qi * 4 + 4]
                            .copy_from_slice(&qv[g * 4..g * 4 + 4]);
                    }
                }
                blocks.push(b);
            }
        }
        Self {
            dim,
            unsigned,
            scales,
            blocks,
            kernel,
        }
    }

    /// Approximate MaxSim of one page (`maxes` is scratch space).
    fn score(&self, page: &PageCodes<'_>, maxes: &mut Vec<f32>) -> f32 {
        if page.scales.is_empty() || self.scales.is_empty() {
            return 0.0;
        }
        #[cfg(target_arch = "x86_64")]
        if let (false, Some(kernel)) = (self.blocks.is_empty(), self.kernel) {
            let (docs, _) = page.codes.as_chunks::<128>();
            let mut total = 0f32;
            for (b, block) in self.blocks.iter().enumerate() {
                let mut m = [f32::NEG_INFINITY; 32];
                // SAFETY: `kernel` is only set when the CPU has its features (see vnni_kernel).
                unsafe {
                    match kernel {
                        Vnni::Avx => {
                            vnni::block32_avx(block, docs, page.scales, page.offsets, &mut m)
                        }
                        Vnni::Avx512 => {
                            vnni::block32_avx512(block, docs, page.scales, page.offsets, &mut m);
                        }
                    }
                }
                let first = b * 32;
                let used = (self.scales.len() - first).min(32);
                total += m[..used]
                    .iter()
                    .zip(&self.scales[first..first + used])
                    .map(|(m, s)| m * s)
                    .sum::<f32>();
            }
            return total;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.score_avx2(page, maxes) };
        }
        self.score_portable(page, maxes)
    }

    /// The portable loop compiled for AVX2 (CPUs without AVX-VNNI: most AMD Zen and Intel
    /// before Alder Lake): the compiler widens the codes and multiplies 16 pairs per instruction
    /// (`vpmaddwd`) where the baseline build does 4.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn score_avx2(&self, page: &PageCodes<'_>, maxes: &mut Vec<f32>) -> f32 {
        self.score_portable(page, maxes)
    }

    #[inline(always)]
    fn score_portable(&self, page: &PageCodes<'_>, maxes: &mut Vec<f32>) -> f32 {
        let dim = self.dim;
        maxes.clear();
        maxes.resize(self.scales.len(), f32::NEG_INFINITY);
        for ((d, ds), off) in page
            .codes
            .chunks_exact(dim)
            .zip(page.scales)
            .zip(page.offsets)
        {
            for (qi, q) in self.unsigned.chunks_exact(dim).enumerate() {
                let dot: i32 = q
                    .iter()
                    .zip(d)
                    .map(|(a, b)| i32::from(*a) * i32::from(*b))
                    .sum();
                let v = (dot - off) as f32 * ds;
                if v > maxes[qi] {
                    maxes[qi] = v;
                }
            }
        }
        maxes.iter().zip(&self.scales).map(|(m, s)| m * s).sum()
    }
}

/// Which `vpdpbusd` the CPU has: the VEX one (AVX-VNNI: Intel since Alder Lake, AMD since Zen 5)
/// or the EVEX one on 256-bit registers (AVX-512 VNNI with VL: Intel server CPUs since Cascade
/// Lake, AMD Zen 4). Same instruction, same kernel; only the encoding differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vnni {
    Avx,
    Avx512,
}

/// `HOROS_MAXSIM_NO_VNNI=1` turns the VNNI kernels off (the AVX2 loop then scans): for
/// measuring one against the other in the same build, and a way around a CPU or hypervisor that
/// reports an instruction set it does not run well.
fn vnni_kernel() -> Option<Vnni> {
    // Read once: the query path asks for every question.
    static KERNEL: std::sync::OnceLock<Option<Vnni>> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(|| {
        if std::env::var_os("HOROS_MAXSIM_NO_VNNI").is_some_and(|v| v == "1") {
            return None;
        }
        [Vnni::Avx, Vnni::Avx512]
            .into_iter()
            .find(|k| k.on_this_cpu())
    })
}

impl Vnni {
    /// Whether this CPU runs the kernel.
    fn on_this_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
                && match self {
                    Vnni::Avx => std::arch::is_x86_feature_detected!("avxvnni"),
                    Vnni::Avx512 => {
                        std::arch::is_x86_feature_detected!("avx512vnni")
                            && std::arch::is_x86_feature_detected!("avx512vl")
                    }
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::{
        __m256, __m256i, _mm256_cvtepi32_ps, _mm256_dpbusd_avx_epi32, _mm256_dpbusd_epi32,
        _mm256_loadu_ps, _mm256_loadu_si256, _mm256_max_ps, _mm256_mul_ps, _mm256_set1_epi32,
        _mm256_set1_ps, _mm256_setzero_si256, _mm256_storeu_ps, _mm256_sub_epi32,
    };

    /// Running maxima (scaled by each page vector's scale) of 32 query lanes over the page
    /// vectors `docs`; `qt` is the block of 32 query vectors laid out by group of 4 dimensions.
    /// Two page vectors per step: 8 accumulators, 4 query registers, 2 broadcasts. Built once
    /// per encoding of `vpdpbusd` (`$dpbusd`, enabled by `$features`).
    macro_rules! block32 {
        ($name:ident, $features:literal, $dpbusd:ident) => {
            #[target_feature(enable = $features)]
            pub(super) fn $name(
                qt: &[u8; 128 * 32],
                docs: &[[i8; 128]],
                scales: &[f32],
                offsets: &[i32],
                maxes: &mut [f32; 32],
            ) {
                let q = qt.as_ptr();
                // SAFETY: every pointer below stays inside `qt` (g < 32, offsets < 128), a page vector
                // (g * 4 + 4 ≤ 128) or `maxes` (32 values); loads and stores are unaligned.
                unsafe {
                    let mut m = [
                        _mm256_loadu_ps(maxes.as_ptr()),
                        _mm256_loadu_ps(maxes.as_ptr().add(8)),
                        _mm256_loadu_ps(maxes.as_ptr().add(16)),
                        _mm256_loadu_ps(maxes.as_ptr().add(24)),
                    ];
                    let word = |d: &[i8; 128], g: usize| {
                        _mm256_set1_epi32(i32::from_le_bytes([
                            d[g * 4] as u8,
                            d[g * 4 + 1] as u8,
                            d[g * 4 + 2] as u8,
                            d[g * 4 + 3] as u8,
                        ]))
                    };
                    let finish = |acc: [__m256i; 4], off: i32, scale: f32, m: &mut [__m256; 4]| {
                        let (o, s) = (_mm256_set1_epi32(off), _mm256_set1_ps(scale));
                        for i in 0..4 {
                            let v =
                                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i], o)), s);
                            m[i] = _mm256_max_ps(m[i], v);
                        }
                    };
                    let mut i = 0;
                    while i + 1 < docs.len() {
                        let (d0, d1) = (&docs[i], &docs[i + 1]);
                        let z = _mm256_setzero_si256();
                        let mut a = [z; 4];
                        let mut b = [z; 4];
                        for g in 0..32 {
                            let qg = q.add(g * 128) as *const __m256i;
                            let qs = [
                                _mm256_loadu_si256(qg),
                                _mm256_loadu_si256(qg.add(1)),
                                _mm256_loadu_si256(qg.add(2)),
                                _mm256_loadu_si256(qg.add(3)),
                            ];
                            let (x, y) = (word(d0, g), word(d1, g));
                            for r in 0..4 {
                                a[r] = $dpbusd(a[r], qs[r], x);
                                b[r] = $dpbusd(b[r], qs[r], y);
                            }
                        }
                        finish(a, offsets[i], scales[i], &mut m);
                        finish(b, offsets[i + 1], scales[i + 1], &mut m);
                        i += 2;
                    }
                    if i < docs.len() {
                        let d0 = &docs[i];
                        let mut a = [_mm256_setzero_si256(); 4];
                        for g in 0..32 {
                            let qg = q.add(g * 128) as *const __m256i;
                            let x = word(d0, g);
                            for (r, acc) in a.iter_mut().enumerate() {
                                *acc = $dpbusd(*acc, _mm256_loadu_si256(qg.add(r)), x);
                            }
                        }
                        finish(a, offsets[i], scales[i], &mut m);
                    }
                    for (r, v) in m.iter().enumerate() {
                        _mm256_storeu_ps(maxes.as_mut_ptr().add(r * 8), *v);
                    }
                }
            }
        };
    }

    block32!(block32_avx, "avx2,avxvnni", _mm256_dpbusd_avx_epi32);
    block32!(
        block32_avx512,
        "avx2,avx512vnni,avx512vl",
        _mm256_dpbusd_epi32
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::maxsim::MultiVectorIndex;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    fn unit_rows(seed: &mut u64, n: usize, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n * dim).map(|_| lcg(seed)).collect();
        for r in v.chunks_exact_mut(dim) {
            let norm = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            r.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }

    #[test]
    fn int8_scores_track_exact_maxsim_on_both_kernels() {
        let mut seed = 3;
        for (dim, nq, nd) in [
            (128, 1, 1),
            (128, 33, 7),
            (128, 32, 1030),
            (128, 5, 2),
            (24, 4, 9),
        ] {
            let q = MultiVector {
                dim,
                data: unit_rows(&mut seed, nq, dim),
            };
            let page = unit_rows(&mut seed, nd, dim);
            let mut exact = MultiVectorIndex::new(dim);
            exact.push(0, &page).unwrap();
            let mut approx = Int8Index::new(dim);
            approx.push(0, &page).unwrap();
            let want = exact.scores(&q.data, 1)[0];
            let got = approx.scores(&q, 1)[0];
            // Each of nq maxima is off by a few thousandths at most.
            assert!(
                (got - want).abs() < 0.01 * nq as f32,
                "{dim}x{nq}x{nd}: {got} vs {want}"
            );
            // The portable kernel agrees with the fast one.
            let codes = QueryCodes::new(&q.data, dim);
            let rows = Int8Rows::quantize(&page, dim);
            let offsets: Vec<i32> = rows
                .codes
                .chunks_exact(dim)
                .map(|r| 128 * r.iter().map(|c| i32::from(*c)).sum::<i32>())
                .collect();
            let pc = PageCodes {
                codes: &rows.codes,
                scales: &rows.scales,
                offsets: &offsets,
            };
            let portable = codes.score_portable(&pc, &mut Vec::new());
            assert!(
                (portable - got).abs() < 1e-3 * got.abs().max(1.0),
                "{portable} vs {got}"
            );
            // Every VNNI kernel this CPU has, not only the one chosen, agrees with it too.
            for kernel in [Vnni::Avx, Vnni::Avx512]
                .into_iter()
                .filter(|k| k.on_this_cpu())
            {
                let by =
                    QueryCodes::with_kernel(&q.data, dim, Some(kernel)).score(&pc, &mut Vec::new());
                assert!(
                    (by - portable).abs() < 1e-3 * portable.abs().max(1.0),
                    "{kernel:?}: {by} vs {portable}"
                );
            }
        }
    }

    #[test]
    fn reranked_search_returns_exact_order_and_refuses_other_dimensions() {
        let mut seed = 5;
        let pages: Vec<Vec<f32>> = (0..40).map(|_| unit_rows(&mut seed, 30, 128)).collect();
        let mut index = Int8Index::new(128);
        let mut exact = MultiVectorIndex::new(128);
        for (i, p) in pages.iter().enumerate() {
            index.push(i, p).unwrap();
            exact.push(i, p).unwrap();
        }
        let q = MultiVector {
            dim: 128,
            data: pages[17][..5 * 128]
                .iter()
                .map(|v| v + 0.02 * lcg(&mut seed))
                .collect(),
        };
        let want = exact.search(&q, 5, 1).unwrap();
        let got = index
            .search_reranked(&q, 5, 20, 2, |k| Some(pages[k].clone()))
            .unwrap();
        assert_eq!(got[0].key, 17);
        assert_eq!(
            got.iter().map(|h| h.key).collect::<Vec<_>>(),
            want.iter().map(|h| h.key).collect::<Vec<_>>()
        );
        assert!((got[0].score - want[0].score).abs() < 1e-3);
        let bad = MultiVector {
            dim: 64,
            data: vec![0.1; 64],
        };
        assert!(index.search(&bad, 3, 1).is_err());
        assert!(index.push(99, &[0.0; 100]).is_err());
        assert_eq!(index.len(), 40);
    }
}
