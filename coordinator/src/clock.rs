//! Time helpers: the wall clock in milliseconds, seconds as a [`Duration`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Seconds from configuration or a request as a duration: never panics (NaN or negative is
/// zero, huge is capped at ~31 years).
pub(crate) fn secs(x: f64) -> Duration {
    if x.is_nan() || x <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(x.min(1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secs_never_panics() {
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs(-3.0), Duration::ZERO);
        assert_eq!(secs(1.5), Duration::from_millis(1500));
        assert_eq!(secs(f64::INFINITY), Duration::from_secs(1_000_000_000));
    }
}
