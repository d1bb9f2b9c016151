//! Priorities. A priority, everywhere the coordinator and the model pool take one (`x_priority`,
//! a job's `priority`, a task's `priority`, `default_priority`, [`UpstreamPool::acquire`]), is a
//! **rank: smaller is more important** (0 is the highest; negative values rank higher still).
//!
//! squeueha orders its queues the other way (higher claimed first), so a rank crosses into a
//! queue through [`queue_priority`], the one conversion. The whole convention is described in
//! the workspace's `docs/architecture.md` ("Priorities").
//!
//! [`UpstreamPool::acquire`]: crate::UpstreamPool::acquire

/// squeueha's priority (higher claimed first) for a `rank` (smaller is more important).
///
/// Order-reversing and total: a smaller rank never gets a lower queue priority, and no rank
/// overflows (`i32::MIN`, which has no negation, is claimed with `i32::MIN + 1`).
pub const fn queue_priority(rank: i32) -> i32 {
    rank.saturating_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_smaller_rank_is_claimed_first_and_no_rank_overflows() {
        let ranks = [i32::MIN, i32::MIN + 1, -5, 0, 1, 5, i32::MAX - 1, i32::MAX];
        for w in ranks.windows(2) {
            assert!(
                queue_priority(w[0]) >= queue_priority(w[1]),
                "{} then {}",
                w[0],
                w[1]
            );
        }
        assert_eq!(queue_priority(0), 0);
        assert_eq!(queue_priority(5), -5);
        assert_eq!(queue_priority(-3), 3);
        assert_eq!(queue_priority(i32::MIN), i32::MAX);
        assert_eq!(queue_priority(i32::MAX), -i32::MAX);
    }
}
