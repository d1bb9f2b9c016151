//! Compact encodings of multi-vectors for storage and search: IEEE half floats ([`to_f16_bytes`],
//! 2 bytes a value, the reranking copy) and int8 with one scale per vector ([`Int8Rows`], 1 byte a
//! value plus 4 a vector, the copy MaxSim scans).
//!
//! Late-interaction models emit L2-normalised vectors whose components lie in `[-1, 1]`: half
//! floats keep 11 significant bits, far below the models' own noise, and int8 scaled by each
//! vector's largest component keeps 7 bits where they matter (the int8 index's ranking is checked
//! against exact MaxSim in its tests and in `docs/benchmarks-visual.md`).

/// A float as the bits of an IEEE 754 half float (round to nearest even; overflow to infinity,
/// NaN kept NaN).
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        // Infinity, or NaN (keep a quiet bit so it stays NaN).
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal half (or zero): shift the mantissa with its implicit bit in.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rest = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = u32::from(rest > mid || (rest == mid && half & 1 == 1));
        return sign | (half + round) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    let round = u32::from(rest > 0x1000 || (rest == 0x1000 && half & 1 == 1));
    // A carry out of the mantissa correctly bumps the exponent (up to infinity).
    sign | (half + round) as u16
}

/// The float a half float's bits stand for (exact).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value = m * 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Values as little-endian half floats.
pub fn to_f16_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 2);
    for v in values {
        out.extend_from_slice(&f32_to_f16_bits(*v).to_le_bytes());
    }
    out
}

/// Little-endian half floats as values; `None` when the length is odd.
pub fn from_f16_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    let (pairs, rest) = bytes.as_chunks::<2>();
    if !rest.is_empty() {
        return None;
    }
    let table = f16_table();
    Some(
        pairs
            .iter()
            .map(|p| table[usize::from(u16::from_le_bytes(*p))])
            .collect(),
    )
}

/// Little-endian half floats decoded onto the end of `out` (no allocation once `out` has room);
/// `false` (nothing added) when the length is odd.
pub fn f16_bytes_into(bytes: &[u8], out: &mut Vec<f32>) -> bool {
    let (pairs, rest) = bytes.as_chunks::<2>();
    if !rest.is_empty() {
        return false;
    }
    let table = f16_table();
    out.extend(
        pairs
            .iter()
            .map(|p| table[usize::from(u16::from_le_bytes(*p))]),
    );
    true
}

/// Every half float's value (256 KiB, built once): reranking decodes whole pages, and a table
/// lookup is several times faster than decoding each value's bits.
fn f16_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(f16_bits_to_f32).collect())
}

/// Vectors quantised to int8, one scale per vector: value ≈ `codes[i] * scales[row]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Int8Rows {
    /// Dimension of each vector.
    pub dim: usize,
    /// `rows * dim` codes in `-127..=127`.
    pub codes: Vec<i8>,
    /// One scale per vector (its largest absolute value / 127; 0 for a zero vector).
    pub scales: Vec<f32>,
}

impl Int8Rows {
    /// Quantises `values` (vectors of `dim` values, row after row; a trailing partial row is
    /// dropped). Non-finite values count as 0.
    pub fn quantize(values: &[f32], dim: usize) -> Self {
        let mut out = Self {
            dim,
            codes: Vec::with_capacity(values.len()),
            scales: Vec::with_capacity(values.len().checked_div(dim).unwrap_or(0)),
        };
        if dim == 0 {
            return out;
        }
        for row in values.chunks_exact(dim) {
            let (codes, scale) = quantize_row(row);
            out.codes.extend_from_slice(&codes);
            out.scales.push(scale);
        }
        out
    }

    /// Number of vectors.
    pub fn rows(&self) -> usize {
        self.scales.len()
    }

    /// The storage form: the codes, then the scales as little-endian `f32`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.codes.len() + self.scales.len() * 4);
        out.extend(self.codes.iter().map(|c| *c as u8));
        for s in &self.scales {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    /// Reads the storage form of `rows` vectors of `dim` values; `None` when the length does
    /// not match or a scale is not a finite, non-negative number.
    pub fn from_bytes(dim: usize, rows: usize, bytes: &[u8]) -> Option<Self> {
        let n = dim.checked_mul(rows)?;
        if bytes.len() != n.checked_add(rows.checked_mul(4)?)? {
            return None;
        }
        let (codes, scales) = bytes.split_at(n);
        let codes: Vec<i8> = codes.iter().map(|b| *b as i8).collect();
        let (chunks, _) = scales.as_chunks::<4>();
        let scales: Vec<f32> = chunks.iter().map(|c| f32::from_le_bytes(*c)).collect();
        if scales.iter().any(|s| !s.is_finite() || *s < 0.0) {
            return None;
        }
        Some(Self { dim, codes, scales })
    }

    /// The values the codes stand for.
    pub fn dequantize(&self) -> Vec<f32> {
        if self.dim == 0 {
            return Vec::new();
        }
        self.codes
            .chunks_exact(self.dim)
            .zip(&self.scales)
            .flat_map(|(row, s)| row.iter().map(move |c| f32::from(*c) * s))
            .collect()
    }
}

/// One vector's codes and scale.
pub fn quantize_row(row: &[f32]) -> (Vec<i8>, f32) {
    let finite = |v: f32| if v.is_finite() { v } else { 0.0 };
    let max = row.iter().fold(0f32, |m, v| m.max(finite(*v).abs()));
    if max == 0.0 {
        return (vec![0; row.len()], 0.0);
    }
    let inv = 127.0 / max;
    let codes = row
        .iter()
        .map(|v| (finite(*v) * inv).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (codes, max / 127.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn half_floats_round_trip_within_half_an_ulp() {
        for x in [
            0.0f32, -0.0, 1.0, -1.0, 0.5, 0.333_333, -0.088_388, 65504.0, 1e-5, 6.0e-8, 3.1e-5,
        ] {
            let y = f16_bits_to_f32(f32_to_f16_bits(x));
            // 11 significant bits: relative error ≤ 2^-11 for normal halves.
            assert!(
                (x - y).abs() <= x.abs() * 4.9e-4 + 6.0e-8,
                "{x} came back as {y}"
            );
        }
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(1e6), 0x7c00);
        assert!(f16_bits_to_f32(f32_to_f16_bits(f32::NAN)).is_nan());
        // Every half float survives the round trip exactly.
        for h in 0..=u16::MAX {
            let x = f16_bits_to_f32(h);
            if !x.is_nan() {
                assert_eq!(f32_to_f16_bits(x), h, "{h:#x}");
            }
        }
        let v = vec![0.25f32, -0.75, 0.125];
        assert_eq!(from_f16_bytes(&to_f16_bytes(&v)).unwrap(), v);
        assert!(from_f16_bytes(&[0, 1, 2]).is_none());
    }

    #[test]
    fn int8_rows_round_trip_and_refuse_bad_bytes() {
        let values = [0.5f32, -0.25, 0.1, 0.0, 0.0, 0.0, -1.0, f32::NAN, 0.5];
        let q = Int8Rows::quantize(&values, 3);
        assert_eq!(q.rows(), 3);
        assert_eq!(&q.codes[..3], &[127, -64, 25]);
        assert_eq!(q.scales[1], 0.0);
        let back = q.dequantize();
        for (a, b) in values.iter().zip(&back) {
            let a = if a.is_finite() { *a } else { 0.0 };
            assert!((a - b).abs() <= 0.5 / 127.0 + 1e-6, "{a} vs {b}");
        }
        let bytes = q.to_bytes();
        assert_eq!(bytes.len(), 9 + 12);
        assert_eq!(Int8Rows::from_bytes(3, 3, &bytes).unwrap(), q);
        assert!(Int8Rows::from_bytes(3, 2, &bytes).is_none());
        assert!(Int8Rows::from_bytes(usize::MAX, 3, &bytes).is_none());
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&(-1.0f32).to_le_bytes());
        assert!(Int8Rows::from_bytes(3, 3, &bad).is_none());
    }
}
