//! The arithmetic of the vector indexes (text vectors, the visual first stage): dot products over contiguous `f32` rows (written
//! as 16 independent lanes so that the compiler vectorises them: AVX-512, AVX2 or NEON), the
//! best `n` of a list of scores, and the k-means that places the inverted lists' centroids.

/// Lanes of the dot product: 16 accumulators, one AVX-512 register or two AVX2 ones.
const LANES: usize = 16;

/// The dot product of two equally long vectors: compiled for AVX2 and FMA as well, and that
/// version chosen at run time where the CPU has them (the baseline build has SSE2 only).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot_lanes(a, b)
}

/// [`dot_lanes`] compiled for AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

/// The dot product in independent lanes (what the compiler vectorises).
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `v` scaled to unit length (a zero vector stays zero: it scores 0 against everything).
pub fn normalized(v: &[f32]) -> Vec<f32> {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter().map(|x| x / norm).collect()
    } else {
        vec![0.0; v.len()]
    }
}

/// Scores of `query` against each row of `rows` (`dim` values per row), appended to `out`.
pub(crate) fn score_rows(query: &[f32], rows: &[f32], out: &mut Vec<f32>) {
    let dim = query.len();
    if dim == 0 {
        return;
    }
    out.extend(rows.chunks_exact(dim).map(|r| dot(query, r)));
}

/// The positions of the best `n` scores, best first (ties: the lower position first).
pub(crate) fn top_n(scores: &[f32], n: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    let by_score = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b));
    if n < idx.len() && n > 0 {
        idx.select_nth_unstable_by(n - 1, by_score);
        idx.truncate(n);
    } else if n == 0 {
        idx.clear();
    }
    idx.sort_unstable_by(by_score);
    idx
}

/// The index of the centroid (rows of `centroids`) closest to `v` in cosine (all unit length).
pub(crate) fn nearest(centroids: &[f32], v: &[f32]) -> usize {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, c) in centroids.chunks_exact(v.len().max(1)).enumerate() {
        let s = dot(c, v);
        if s > best.1 {
            best = (i, s);
        }
    }
    best.0
}

/// Spherical k-means: `lists` unit-length centroids of the unit rows `sample` (`dim` values
/// each), started from evenly spaced rows and refined `rounds` times. Fewer rows than lists: the
/// rows themselves.
pub(crate) fn kmeans(sample: &[f32], dim: usize, lists: usize, rounds: usize) -> Vec<f32> {
    let n = sample.len() / dim.max(1);
    let lists = lists.min(n).max(1);
    if n == 0 {
        return Vec::new();
    }
    let step = n / lists;
    let mut centroids: Vec<f32> = (0..lists)
        .flat_map(|i| sample[i * step * dim..(i * step + 1) * dim].iter().copied())
        .collect();
    for _ in 0..rounds {
        let mut sums = vec![0.0f32; lists * dim];
        let mut counts = vec![0usize; lists];
        for row in sample.chunks_exact(dim) {
            let c = nearest(&centroids, row);
            counts[c] += 1;
            for (s, x) in sums[c * dim..(c + 1) * dim].iter_mut().zip(row) {
                *s += x;
            }
        }
        for (c, count) in counts.iter().enumerate() {
            // An empty list keeps its centroid (it may catch rows added later).
            if *count > 0 {
                let unit = normalized(&sums[c * dim..(c + 1) * dim]);
                centroids[c * dim..(c + 1) * dim].copy_from_slice(&unit);
            }
        }
    }
    centroids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_dot_product_equals_the_plain_one_at_every_length() {
        for len in [0, 1, 15, 16, 17, 33, 384] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "{len}");
        }
    }

    #[test]
    fn normalized_vectors_have_unit_length_and_zero_stays_zero() {
        let v = normalized(&[3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(normalized(&[0.0, 0.0]), [0.0, 0.0]);
        assert_eq!(normalized(&[f32::NAN, 1.0]), [0.0, 0.0]);
    }

    #[test]
    fn top_n_is_best_first_with_ties_by_position() {
        let scores = [0.1, 0.9, 0.5, 0.9, -1.0];
        assert_eq!(top_n(&scores, 3), [1, 3, 2]);
        assert_eq!(top_n(&scores, 10), [1, 3, 2, 0, 4]);
        assert!(top_n(&scores, 0).is_empty());
        let mut out = Vec::new();
        score_rows(&[1.0, 0.0], &[0.5, 0.5, -1.0, 0.0], &mut out);
        assert_eq!(out, [0.5, -1.0]);
    }

    #[test]
    fn kmeans_finds_separated_clusters() {
        // Two tight clusters around the axes of a plane.
        let mut sample = Vec::new();
        for i in 0..50 {
            let e = i as f32 * 1e-3;
            sample.extend(normalized(&[1.0, e]));
            sample.extend(normalized(&[e, 1.0]));
        }
        let c = kmeans(&sample, 2, 2, 5);
        let a = nearest(&c, &[1.0, 0.0]);
        let b = nearest(&c, &[0.0, 1.0]);
        assert_ne!(a, b);
        assert!(dot(&c[a * 2..a * 2 + 2], &[1.0, 0.0]) > 0.99);
    }
}
