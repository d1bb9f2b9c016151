//! The feeder's settings, and how a configuration file writes them.

use std::time::Duration;

use horos_server_control::ThermalPolicy;
use serde::Deserialize;

use crate::lane::TemperatureSource;

/// Feeder settings.
///
/// A configuration file (TOML, JSON...) writes them with durations in the unit their key names,
/// every key optional, unknown keys refused:
/// `cooldown_s` (10; the pause after each batch), `thermal` (`"fixed"`: always `cooldown_s`;
/// `"follow"`: pause only while the hottest GPU is above 75 °C, longer the hotter, `cooldown_s`
/// when no temperature is read), `idle_poll_ms` (200), `release_delay_ms` (1000),
/// `health_interval_s` (5; 0 turns the checks off), `bad_request_delay_s` and `retry_delay_s`
/// (unset: the queue's back-off), `error_pause_ms` (1000). Out-of-range values are refused with
/// the key named ([`FeederConfig::from_file`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "FeederFile")]
pub struct FeederConfig {
    /// Pause after each batch (gpu-alloc's thermal pacing; a fixed 10 s by default).
    pub thermal: ThermalPolicy,
    /// Sleep when no lane has work.
    pub idle_poll: Duration,
    /// When released jobs (server down or busy) become visible again.
    pub release_delay: Duration,
    /// Retry delay of a job the server refused as a bad request (`None`: the queue's backoff). It is
    /// dead-lettered once its attempts are used up.
    pub bad_request_delay: Option<Duration>,
    /// Retry delay of a job that failed otherwise (a cut connection on a healthy server, a
    /// timeout, a 500, an answer that does not parse) (`None`: the queue's backoff).
    pub retry_delay: Option<Duration>,
    /// Pause before trying again after a failed restart or a queue error.
    pub error_pause: Duration,
    /// Health checks of every lane's server in [`Feeder::run`](crate::Feeder::run), also while idle ; a server
    /// found unhealthy is recovered in the background like one found down by a batch. `None`:
    /// only batches detect a dead server.
    pub health_interval: Option<Duration>,
}

impl Default for FeederConfig {
    fn default() -> Self {
        FeederConfig {
            thermal: ThermalPolicy::default(),
            idle_poll: Duration::from_millis(200),
            release_delay: Duration::from_secs(1),
            bad_request_delay: None,
            retry_delay: None,
            error_pause: Duration::from_secs(1),
            health_interval: Some(Duration::from_secs(5)),
        }
    }
}

/// How a configuration file writes [`FeederConfig`] (see its documentation for the keys).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FeederFile {
    /// Pause after each batch, seconds (0 to 3600).
    pub cooldown_s: f64,
    /// Whether the pause follows the GPUs' temperature.
    pub thermal: Pacing,
    /// Sleep when no lane has work, milliseconds.
    pub idle_poll_ms: u64,
    /// When released jobs become visible again, milliseconds.
    pub release_delay_ms: u64,
    /// Health checks of every server, seconds (0: only failed batches detect a dead server).
    pub health_interval_s: f64,
    /// Retry delay of a job refused as a bad request, seconds (unset: the queue's back-off).
    pub bad_request_delay_s: Option<f64>,
    /// Retry delay of a job that failed otherwise, seconds (unset: the queue's back-off).
    pub retry_delay_s: Option<f64>,
    /// Pause after a failed restart or a queue error, milliseconds.
    pub error_pause_ms: u64,
}

/// `thermal`: how long the pause after a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pacing {
    /// Always `cooldown_s`.
    #[default]
    Fixed,
    /// gpu-alloc's temperature-following policy ([`ThermalPolicy::follow_temperature`]), with
    /// `cooldown_s` when no temperature is read.
    Follow,
}

impl Default for FeederFile {
    fn default() -> Self {
        FeederFile {
            cooldown_s: 10.0,
            thermal: Pacing::Fixed,
            idle_poll_ms: 200,
            release_delay_ms: 1000,
            health_interval_s: 5.0,
            bad_request_delay_s: None,
            retry_delay_s: None,
            error_pause_ms: 1000,
        }
    }
}

/// A [`FeederFile`] value out of its range, named by its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct InvalidFeederConfig {
    /// The key, e.g. `cooldown_s`.
    pub key: &'static str,
    /// Its value as written.
    pub value: f64,
    /// What it must be.
    pub expected: &'static str,
}

impl FeederConfig {
    /// The settings a file wrote, checked.
    pub fn from_file(file: FeederFile) -> Result<FeederConfig, InvalidFeederConfig> {
        let seconds = |key: &'static str, value: f64, max: f64| {
            if value.is_finite() && (0.0..=max).contains(&value) {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(InvalidFeederConfig {
                    key,
                    value,
                    expected: "a number of seconds in range (0 to 3600; 86400 for health_interval_s)",
                })
            }
        };
        seconds("cooldown_s", file.cooldown_s, 3600.0)?;
        let health = seconds("health_interval_s", file.health_interval_s, 86_400.0)?;
        let bad_request_delay = file
            .bad_request_delay_s
            .map(|v| seconds("bad_request_delay_s", v, 3600.0))
            .transpose()?;
        let retry_delay = file
            .retry_delay_s
            .map(|v| seconds("retry_delay_s", v, 3600.0))
            .transpose()?;
        let thermal = match file.thermal {
            Pacing::Fixed => ThermalPolicy::Fixed {
                cooldown_s: file.cooldown_s,
            },
            Pacing::Follow => {
                let mut policy = ThermalPolicy::follow_temperature();
                if let ThermalPolicy::FollowTemperature { fallback_s, .. } = &mut policy {
                    *fallback_s = file.cooldown_s;
                }
                policy
            }
        };
        Ok(FeederConfig {
            thermal,
            idle_poll: Duration::from_millis(file.idle_poll_ms),
            release_delay: Duration::from_millis(file.release_delay_ms),
            bad_request_delay,
            retry_delay,
            error_pause: Duration::from_millis(file.error_pause_ms),
            health_interval: (!health.is_zero()).then_some(health),
        })
    }

    /// The pause after a batch when no temperature is known, seconds (a file's `cooldown_s`).
    pub fn cooldown_s(&self) -> f64 {
        match &self.thermal {
            ThermalPolicy::Fixed { cooldown_s } => *cooldown_s,
            ThermalPolicy::FollowTemperature { fallback_s, .. } => *fallback_s,
        }
    }

    /// Whether the pause after a batch follows the GPUs' temperature (`thermal = "follow"`).
    pub fn follows_temperature(&self) -> bool {
        matches!(self.thermal, ThermalPolicy::FollowTemperature { .. })
    }

    /// The temperature the feeder should read ([`Feeder::with_temperature`](crate::Feeder::with_temperature)):
    /// `hottest` (the hottest GPU's last reading) with `thermal = "follow"`, else none. Following
    /// without a reading is logged: the policy then pauses `cooldown_s` after each batch.
    pub fn temperature_source(
        &self,
        hottest: Option<TemperatureSource>,
    ) -> Option<TemperatureSource> {
        if !self.follows_temperature() {
            return None;
        }
        if hottest.is_none() {
            tracing::warn!(
                "feeder.thermal = \"follow\" but no GPU is read (NVML unavailable, or [gpus] source = \"none\"): pausing cooldown_s after each batch"
            );
        }
        hottest
    }
}

impl TryFrom<FeederFile> for FeederConfig {
    type Error = InvalidFeederConfig;

    fn try_from(file: FeederFile) -> Result<Self, Self::Error> {
        FeederConfig::from_file(file)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_writes_durations_in_the_unit_of_their_key() {
        let c: FeederConfig = serde_json::from_value(serde_json::json!({
            "cooldown_s": 2.5, "idle_poll_ms": 50, "health_interval_s": 0, "retry_delay_s": 3
        }))
        .unwrap();
        assert_eq!(c.thermal, ThermalPolicy::Fixed { cooldown_s: 2.5 });
        assert_eq!(c.idle_poll, Duration::from_millis(50));
        assert_eq!(c.health_interval, None);
        assert_eq!(c.retry_delay, Some(Duration::from_secs(3)));
        assert_eq!(c.release_delay, FeederConfig::default().release_delay);
        let c: FeederConfig =
            serde_json::from_value(serde_json::json!({"thermal": "follow", "cooldown_s": 4}))
                .unwrap();
        assert!(matches!(
            c.thermal,
            ThermalPolicy::FollowTemperature { fallback_s, .. } if fallback_s == 4.0
        ));
        assert_eq!(c.cooldown_s(), 4.0);
        let defaults: FeederConfig = serde_json::from_value(serde_json::json!({})).unwrap();
        let d = FeederConfig::default();
        assert_eq!(
            (
                defaults.thermal,
                defaults.idle_poll,
                defaults.health_interval
            ),
            (d.thermal, d.idle_poll, d.health_interval)
        );
    }

    #[test]
    fn the_temperature_is_read_only_when_the_pause_follows_it() {
        let hottest = || Some(std::sync::Arc::new(|| Some(81.0)) as TemperatureSource);
        let fixed = FeederConfig::default();
        assert!(!fixed.follows_temperature());
        assert!(fixed.temperature_source(hottest()).is_none());
        let follow: FeederConfig =
            serde_json::from_value(serde_json::json!({"thermal": "follow"})).unwrap();
        assert!(follow.follows_temperature());
        let source = follow.temperature_source(hottest()).unwrap();
        assert_eq!(source(), Some(81.0));
        // No GPU read: the policy falls back to cooldown_s (and no source is handed on).
        assert!(follow.temperature_source(None).is_none());
    }

    #[test]
    fn unknown_keys_and_out_of_range_values_are_named() {
        for (json, key) in [
            (serde_json::json!({"cooldown": 1}), "cooldown"),
            (serde_json::json!({"cooldown_s": -1}), "cooldown_s"),
            (
                serde_json::json!({"health_interval_s": 1e9}),
                "health_interval_s",
            ),
            (serde_json::json!({"thermal": "hot"}), "hot"),
        ] {
            let e = serde_json::from_value::<FeederConfig>(json)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
