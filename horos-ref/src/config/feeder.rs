//! `[feeder]`.

use serde::Deserialize;

/// `[feeder]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeederSection {
    /// Pause after each batch, seconds (the seed's 10 s).
    pub cooldown_s: f64,
    /// Sleep when no lane has work, milliseconds.
    pub idle_poll_ms: u64,
    /// When released jobs become visible again, milliseconds.
    pub release_delay_ms: u64,
    /// Health checks of every server, seconds (0: only failed batches detect a dead server).
    pub health_interval_s: f64,
    /// Pacing after each batch: `fixed` (always `cooldown_s`) or `follow` (pause only while the
    /// hottest GPU is above 75 °C, longer the hotter; `cooldown_s` when no temperature is read).
    pub thermal: ThermalKind,
}

/// `feeder.thermal`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ThermalKind {
    /// Always the same pause.
    #[default]
    Fixed,
    /// gpu-alloc's temperature-following policy, read through NVML.
    Follow,
}

impl Default for FeederSection {
    fn default() -> Self {
        FeederSection {
            cooldown_s: 10.0,
            idle_poll_ms: 200,
            release_delay_ms: 1000,
            health_interval_s: 5.0,
            thermal: ThermalKind::Fixed,
        }
    }
}

impl FeederSection {
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(0.0..=3600.0).contains(&self.cooldown_s) {
            return Err(format!(
                "feeder.cooldown_s = {} is not between 0 and 3600",
                self.cooldown_s
            ));
        }
        if !(0.0..=86_400.0).contains(&self.health_interval_s) {
            return Err(format!(
                "feeder.health_interval_s = {} is not between 0 and 86400",
                self.health_interval_s
            ));
        }
        Ok(())
    }
}
