//! How long a feeder pauses a GPU after a batch: a policy gpu-alloc's simulator and the feeder
//! share.

use serde::{Deserialize, Serialize};

/// How long to pause a GPU after a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ThermalPolicy {
    /// Always pause `cooldown_s` after a batch.
    Fixed {
        /// Pause, seconds (10 by default).
        cooldown_s: f64,
    },
    /// Pause only above `threshold_c`: `base_pause_s + per_degree_s × (T − threshold)`,
    /// capped at `max_pause_s`. Without a temperature reading, pause `fallback_s`.
    FollowTemperature {
        /// Temperature at or below which no pause is taken (°C).
        threshold_c: f64,
        /// Pause just above the threshold, seconds.
        base_pause_s: f64,
        /// Extra pause per degree above the threshold, seconds.
        per_degree_s: f64,
        /// Longest pause, seconds.
        max_pause_s: f64,
        /// Pause when the temperature is unknown, seconds.
        fallback_s: f64,
    },
}

impl Default for ThermalPolicy {
    fn default() -> Self {
        Self::Fixed { cooldown_s: 10.0 }
    }
}

impl ThermalPolicy {
    /// The default temperature-following policy: pause above 75 °C, 5 s + 2 s/°C, at most 60 s.
    pub fn follow_temperature() -> Self {
        Self::FollowTemperature {
            threshold_c: 75.0,
            base_pause_s: 5.0,
            per_degree_s: 2.0,
            max_pause_s: 60.0,
            fallback_s: 10.0,
        }
    }

    /// Seconds to pause after a batch, given the GPU's temperature if known.
    pub fn pause_after_batch(&self, temperature_c: Option<f64>) -> f64 {
        match *self {
            Self::Fixed { cooldown_s } => cooldown_s.max(0.0),
            Self::FollowTemperature {
                threshold_c,
                base_pause_s,
                per_degree_s,
                max_pause_s,
                fallback_s,
            } => match temperature_c {
                None => fallback_s.max(0.0),
                Some(t) if t <= threshold_c => 0.0,
                Some(t) => (base_pause_s + per_degree_s * (t - threshold_c))
                    .clamp(0.0, max_pause_s.max(0.0)),
            },
        }
    }

    /// The smallest pause this policy can impose after a batch (used by the lower bound).
    pub fn min_pause_s(&self) -> f64 {
        match *self {
            Self::Fixed { cooldown_s } => cooldown_s.max(0.0),
            Self::FollowTemperature { .. } => 0.0,
        }
    }
}
