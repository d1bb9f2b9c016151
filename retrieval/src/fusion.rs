//! Rankings fused by reciprocal rank (RRF): an item's score is the sum, over the rankings that
//! hold it, of `1 / (RRF_K + rank)` (ranks from 1), so an item two rankings agree on rises above
//! one that only one ranking puts first. What a hybrid search does with its full-text, vector and
//! visual rankings.
//!
//! ```
//! use horos_retrieval::fusion::fuse;
//!
//! let text = vec!["p1", "p2", "p3"];
//! let visual = vec!["p4", "p2"];
//! let fused = fuse(&[text, visual], |page| *page, 2);
//! assert_eq!(fused[0].0, "p2"); // second in both
//! assert_eq!(fused.len(), 2);
//! ```

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// The constant of reciprocal-rank fusion (the usual 60: a ranking's first places weigh, its
/// tail does not vanish).
pub const RRF_K: f64 = 60.0;

/// The rankings `lists` (best first) fused by reciprocal rank: the best `k` items, each the first
/// one met with its key (`key` tells which items are the same), with its fused score; best first,
/// ties in the order of their keys. An item listed twice in one ranking counts at its best rank.
pub fn fuse<T: Clone, K: Eq + Hash + Ord>(
    lists: &[Vec<T>],
    key: impl Fn(&T) -> K,
    k: usize,
) -> Vec<(T, f64)> {
    let mut fused: HashMap<K, (T, f64)> = HashMap::new();
    for list in lists {
        let mut seen = HashSet::new();
        let mut rank = 0usize;
        for item in list {
            if !seen.insert(key(item)) {
                continue;
            }
            rank += 1;
            let add = 1.0 / (RRF_K + rank as f64);
            fused
                .entry(key(item))
                .and_modify(|(_, score)| *score += add)
                .or_insert_with(|| (item.clone(), add));
        }
    }
    let mut out: Vec<(K, (T, f64))> = fused.into_iter().collect();
    out.sort_by(|a, b| b.1.1.total_cmp(&a.1.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
    out.into_iter().map(|(_, hit)| hit).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_two_rankings_agree_on_rise_above_one_rankings_first() {
        let text = vec![(1, 1), (1, 2), (2, 1)];
        let vector = vec![(1, 2), (3, 1), (1, 2), (2, 1)];
        let visual = vec![(4, 1), (1, 2)];
        let fused = fuse(&[text, vector, visual], |p| *p, 3);
        let order: Vec<(i64, u32)> = fused.iter().map(|h| h.0).collect();
        // (1,2): ranks 2, 1 and 2; (2,1): 3 and 3 (its duplicate in `vector` does not count);
        // (1,1) and (4,1) are first once, the lower key first; (3,1) second once.
        assert_eq!(order, [(1, 2), (2, 1), (1, 1)]);
        let expect = 1.0 / 62.0 + 1.0 / 61.0 + 1.0 / 62.0;
        assert!((fused[0].1 - expect).abs() < 1e-12, "{fused:?}");
        assert!(fuse(&[] as &[Vec<u8>], |p| *p, 5).is_empty());
        assert!(fuse(&[vec![1u8]], |p| *p, 0).is_empty());
    }

    #[test]
    fn the_first_item_met_with_a_key_is_the_one_returned() {
        let a = vec![(7, "from a")];
        let b = vec![(7, "from b"), (8, "only b")];
        let fused = fuse(&[a, b], |item| item.0, 5);
        assert_eq!(fused[0].0, (7, "from a"));
        assert_eq!(fused[1].0, (8, "only b"));
    }
}
