//! Thermal pacing between batches: a fixed cooldown (10 s by default) or a
//! temperature-following pause (none below a threshold, longer the hotter the GPU).
//!
//! [`ThermalModel`] is the first-order heating/cooling model the simulated fleet and the
//! simulator use.

use serde::{Deserialize, Serialize};

pub use horos_server_control::ThermalPolicy;

/// First-order GPU temperature model: the die approaches `busy_c` while computing and
/// `ambient_c` otherwise, with time constant `tau_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThermalModel {
    /// Idle equilibrium, °C.
    pub ambient_c: f64,
    /// Equilibrium under full load, °C.
    pub busy_c: f64,
    /// Time constant, seconds.
    pub tau_s: f64,
}

impl Default for ThermalModel {
    fn default() -> Self {
        Self {
            ambient_c: 38.0,
            busy_c: 84.0,
            tau_s: 120.0,
        }
    }
}

impl ThermalModel {
    /// Temperature after `dt_s` seconds at `utilization` (0..=1) starting from `temp_c`.
    pub fn step(&self, temp_c: f64, utilization: f64, dt_s: f64) -> f64 {
        let target = self.ambient_c + (self.busy_c - self.ambient_c) * utilization.clamp(0.0, 1.0);
        let k = if self.tau_s > 0.0 {
            (-dt_s.max(0.0) / self.tau_s).exp()
        } else {
            0.0
        };
        target + (temp_c - target) * k
    }
}
