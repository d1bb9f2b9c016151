//! The exponential back-off every restart loop uses.

use std::time::Duration;

/// Exponential back-off: `initial`, doubled per step, capped at `max` (a `max` below `initial`
/// is raised to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// A back-off starting at `initial`, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max: max.max(initial),
            next: initial,
        }
    }

    /// The next wait; the one after is twice as long (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        d
    }

    /// Back to the initial wait.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The wait the next [`Backoff::next_delay`] returns.
    pub fn peek(&self) -> Duration {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (0..8).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        let mut odd = Backoff::new(Duration::from_secs(5), Duration::from_secs(1));
        assert_eq!(odd.next_delay(), Duration::from_secs(5));
        assert_eq!(odd.next_delay(), Duration::from_secs(5));
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
    }
}
