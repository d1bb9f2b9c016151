//! The allocator's settings and their checks.

use std::collections::BTreeMap;

use horos_server_control::settings::Problem;
use serde::{Deserialize, Serialize};

/// An anti-inversion rule: do not switch to `target` for at most `max_target_jobs` pending
/// jobs while `other` has more than `ratio` times as many pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AntiInversionRule {
    /// Class a switch would serve.
    pub target: String,
    /// Class whose backlog has precedence.
    pub other: String,
    /// The rule applies when `target` has at most this many pending jobs.
    pub max_target_jobs: usize,
    /// ... and `other` has more than `ratio` × as many.
    pub ratio: f64,
}

impl Default for AntiInversionRule {
    fn default() -> Self {
        Self {
            target: "think".into(),
            other: "vision".into(),
            max_target_jobs: 3,
            ratio: 10.0,
        }
    }
}

/// Per-mode overrides of the anti-thrash limits (`[allocator.modes.<name>]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModeLimits {
    /// Minimum time a GPU stays in this mode once loaded (default: `min_dwell_s`).
    pub min_resident_s: Option<f64>,
    /// Bound on how long a job of this mode may wait (default: `max_wait_s`).
    pub max_wait_s: Option<f64>,
}

/// Allocator settings.
///
/// Every key has a default and an unknown key is refused, so this is a configuration file's
/// `[allocator]` section as it is; [`validate`](Self::validate) checks the ranges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AllocatorConfig {
    /// Seconds between ticks (5 s).
    pub tick_s: f64,
    /// Horizon over which a switch must pay for itself (900 s).
    pub horizon_s: f64,
    /// Minimum time a GPU stays in a mode before it may switch again (300 s).
    pub min_dwell_s: f64,
    /// Fixed part of the hysteresis threshold, GPU-seconds of work (30 s).
    pub hysteresis_s: f64,
    /// Part of the threshold proportional to the swap costs (0.5): the swap-in of the target,
    /// plus the swap back when the class the GPU leaves still receives work.
    pub hysteresis_swap_fraction: f64,
    /// Bound on how long any job may wait before it starts (1200 s): the starvation rule
    /// gives its class one more GPU in time.
    pub max_wait_s: f64,
    /// Safety margin before the bound at which the starvation rule fires (60 s).
    pub starvation_margin_s: f64,
    /// Pause between batches assumed when converting work to GPU time (the thermal cooldown,
    /// 10 s by default).
    pub batch_overhead_s: f64,
    /// Time constant of the arrival-rate estimate (900 s).
    pub rate_time_constant_s: f64,
    /// A switch that reverses one made less than this long ago (b→a after a→b) needs
    /// `reversal_factor` times the usual threshold (1800 s).
    pub reversal_window_s: f64,
    /// See `reversal_window_s` (3).
    pub reversal_factor: f64,
    /// A class with no arrival for `silence_gaps` × its mean gap between arrivals (and at
    /// least `min_silence_s`) counts as receiving no more work (5; 0 disables).
    pub silence_gaps: f64,
    /// See `silence_gaps` (120 s).
    pub min_silence_s: f64,
    /// The last GPU of a class is not taken while its oldest job has waited more than this
    /// fraction of `max_wait_s` (0.5; above 1 disables).
    pub protect_wait_fraction: f64,
    /// Time constant of the moving average of each backlog used for planning (300 s).
    pub backlog_time_constant_s: f64,
    /// Anti-inversion rules (default: think vs vision, 3 jobs, 10×).
    pub anti_inversion: Vec<AntiInversionRule>,
    /// The servers of modes that can sleep are put to sleep rather than stopped when their
    /// GPU switches away (false): a switch back costs the wake, not the cold start, and the
    /// amortisation rule counts it so. It takes effect only for modes whose `sleep.can_sleep`
    /// is set (the executor's lanes do not set it yet: no production server sleeps).
    pub sleep: bool,
    /// A GPU, its class's only one, with jobs of its class queued serves one more batch before
    /// switching when that lowers the total waiting and keeps the wanted class within its
    /// bound (false). On the shipped phase-change trace it cuts swaps (45 to 39) and most
    /// waits but lengthens the makespan by 0.6 %, so it is off by default; queues per class
    /// already serve A B A A C as A A A, B, C.
    pub serve_resident_first: bool,
    /// Per-mode minimum resident time and maximum wait (none: the global values).
    pub modes: BTreeMap<String, ModeLimits>,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self {
            tick_s: 5.0,
            horizon_s: 900.0,
            min_dwell_s: 300.0,
            hysteresis_s: 30.0,
            hysteresis_swap_fraction: 0.5,
            max_wait_s: 1200.0,
            starvation_margin_s: 60.0,
            batch_overhead_s: 10.0,
            rate_time_constant_s: 900.0,
            backlog_time_constant_s: 300.0,
            protect_wait_fraction: 0.5,
            silence_gaps: 5.0,
            min_silence_s: 120.0,
            reversal_window_s: 1800.0,
            reversal_factor: 3.0,
            anti_inversion: vec![AntiInversionRule::default()],
            sleep: false,
            serve_resident_first: false,
            modes: BTreeMap::new(),
        }
    }
}

/// An [`AllocatorConfig`] value out of its range, named by its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct InvalidAllocatorConfig {
    /// The setting, e.g. `tick_s` or `anti_inversion[0].ratio`.
    pub key: String,
    /// Its value as given.
    pub value: f64,
    /// What it must be.
    pub expected: &'static str,
}

impl AllocatorConfig {
    /// Minimum time a GPU stays in `mode` once loaded.
    pub fn min_resident_s(&self, mode: &str) -> f64 {
        self.modes
            .get(mode)
            .and_then(|l| l.min_resident_s)
            .unwrap_or(self.min_dwell_s)
    }

    /// Bound on how long a job of `mode` may wait.
    pub fn max_wait_s(&self, mode: &str) -> f64 {
        self.modes
            .get(mode)
            .and_then(|l| l.max_wait_s)
            .unwrap_or(self.max_wait_s)
    }

    /// What `horos-ref check` reports of values that parse and are in range but cannot work
    /// as meant, as problems of `section` (`allocator`): a starvation margin as long as a
    /// maximum wait makes every job that waits at all count as starving, so the rule moves a
    /// GPU at each arrival (thrash) instead of at the bound.
    pub fn problems(&self, section: &str) -> Vec<Problem> {
        let margin = self.starvation_margin_s;
        let mut waits = vec![(format!("{section}.max_wait_s"), self.max_wait_s)];
        for (mode, limits) in &self.modes {
            if let Some(w) = limits.max_wait_s {
                waits.push((format!("{section}.modes.{mode}.max_wait_s"), w));
            }
        }
        waits
            .into_iter()
            .filter(|(_, w)| margin >= *w)
            .map(|(key, w)| {
                Problem::new(
                    key,
                    format!(
                        "{w} s is no longer than starvation_margin_s ({margin} s): every job \
                         that waits at all counts as starving, and the starvation rule moves a \
                         GPU at each arrival instead of at the bound"
                    ),
                    format!(
                        "set {section}.starvation_margin_s below it (a tenth, say: {}), or \
                         raise it",
                        w / 10.0
                    ),
                )
            })
            .collect()
    }

    /// Checks every value's range; the error names the first key out of range.
    pub fn validate(&self) -> Result<(), InvalidAllocatorConfig> {
        let check = |key: &str, value: f64, ok: bool, expected: &'static str| {
            if ok && value.is_finite() {
                Ok(())
            } else {
                Err(InvalidAllocatorConfig {
                    key: key.to_owned(),
                    value,
                    expected,
                })
            }
        };
        check(
            "tick_s",
            self.tick_s,
            self.tick_s > 0.0,
            "a positive number of seconds",
        )?;
        check(
            "horizon_s",
            self.horizon_s,
            self.horizon_s > 0.0,
            "a positive number of seconds",
        )?;
        for (key, v) in [
            ("min_dwell_s", self.min_dwell_s),
            ("hysteresis_s", self.hysteresis_s),
            ("hysteresis_swap_fraction", self.hysteresis_swap_fraction),
            ("max_wait_s", self.max_wait_s),
            ("starvation_margin_s", self.starvation_margin_s),
            ("batch_overhead_s", self.batch_overhead_s),
            ("reversal_window_s", self.reversal_window_s),
            ("silence_gaps", self.silence_gaps),
            ("min_silence_s", self.min_silence_s),
            ("protect_wait_fraction", self.protect_wait_fraction),
        ] {
            check(key, v, v >= 0.0, "a number, 0 or more")?;
        }
        for (key, v) in [
            ("rate_time_constant_s", self.rate_time_constant_s),
            ("backlog_time_constant_s", self.backlog_time_constant_s),
        ] {
            check(key, v, v > 0.0, "a positive number of seconds")?;
        }
        check(
            "reversal_factor",
            self.reversal_factor,
            self.reversal_factor >= 1.0,
            "1 or more",
        )?;
        for (mode, limits) in &self.modes {
            for (key, v) in [
                ("min_resident_s", limits.min_resident_s),
                ("max_wait_s", limits.max_wait_s),
            ] {
                if let Some(v) = v {
                    check(
                        &format!("modes.{mode}.{key}"),
                        v,
                        v >= 0.0,
                        "a number, 0 or more",
                    )?;
                }
            }
        }
        for (i, rule) in self.anti_inversion.iter().enumerate() {
            check(
                &format!("anti_inversion[{i}].ratio"),
                rule.ratio,
                rule.ratio > 0.0,
                "a positive number",
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod problem_tests {
    use super::*;

    #[test]
    fn a_starvation_margin_as_long_as_a_maximum_wait_is_a_problem_named_by_its_key() {
        let ok = AllocatorConfig::default();
        assert!(ok.problems("allocator").is_empty(), "1200 s > 60 s");
        let mut c = AllocatorConfig {
            max_wait_s: 60.0,
            ..AllocatorConfig::default()
        };
        c.modes.insert(
            "vision".into(),
            ModeLimits {
                min_resident_s: None,
                max_wait_s: Some(30.0),
            },
        );
        let keys: Vec<String> = c.problems("allocator").into_iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            ["allocator.max_wait_s", "allocator.modes.vision.max_wait_s"]
        );
        c.starvation_margin_s = 5.0;
        assert!(c.problems("allocator").is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_mode_limits_parse_override_the_global_ones_and_are_checked() {
        let c: AllocatorConfig = toml::from_str(
            "min_dwell_s = 200.0\nsleep = true\n[modes.think]\nmin_resident_s = 600.0\n[modes.fast]\nmax_wait_s = 300.0\n",
        )
        .expect("parses");
        assert!(c.sleep && !c.serve_resident_first);
        assert_eq!(c.min_resident_s("think"), 600.0);
        assert_eq!(c.min_resident_s("fast"), 200.0);
        assert_eq!(c.max_wait_s("fast"), 300.0);
        assert_eq!(c.max_wait_s("think"), 1200.0);
        assert_eq!(c.validate(), Ok(()));
        let bad: AllocatorConfig =
            toml::from_str("[modes.vision]\nmax_wait_s = -1.0\n").expect("parses");
        assert_eq!(
            bad.validate().map_err(|e| e.key),
            Err("modes.vision.max_wait_s".into())
        );
        assert!(toml::from_str::<AllocatorConfig>("[modes.vision]\nmax_wait = 1.0\n").is_err());
    }
}
