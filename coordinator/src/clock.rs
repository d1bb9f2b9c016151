//! Time helpers: the wall clock in milliseconds, seconds as a [`Duration`].

use std::time::Duration;

/// Milliseconds since the Unix epoch: squeueha's clock ([`squeueha::now_ms`]), unsigned.
pub(crate) fn now_ms() -> u64 {
    u64::try_from(squeueha::now_ms()).unwrap_or(0)
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
