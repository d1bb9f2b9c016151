//! Deterministic numbers from bytes and text, with no state: the FNV-1a hash, and the unit vector
//! of a text that the embeddings and pooling answers are made of.

/// FNV-1a of some bytes.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A deterministic unit vector for a text (FNV-1a hashes of the text and the component index).
pub(crate) fn embed(text: &str, dim: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dim.max(1))
        .map(|i| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for b in text.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            // splitmix64 finalizer: spreads one changed input byte over every output bit
            h ^= h >> 30;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            h ^= h >> 27;
            h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
            h ^= h >> 31;
            ((h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}
