//! The mode catalogue: which modes a GPU can be switched between, with each mode's models,
//! VRAM need, swap-in cost, throughput and batch size.
//!
//! Everything derives serde with defaults so a deployment can load it from TOML or JSON.

use serde::{Deserialize, Serialize};

/// Errors found when validating a catalogue.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CatalogueError {
    /// Two modes share a name.
    #[error("mode {0:?} is defined twice")]
    DuplicateMode(String),
    /// A numeric field is out of range.
    #[error("mode {mode:?}: {field} must be positive (got {value})")]
    NotPositive {
        /// The mode concerned.
        mode: String,
        /// The field concerned.
        field: &'static str,
        /// The offending value.
        value: f64,
    },
    /// The initial assignment names a mode that the catalogue lacks.
    #[error("initial assignment names unknown mode {0:?}")]
    UnknownMode(String),
    /// The catalogue has no mode at all.
    #[error("the catalogue has no mode")]
    Empty,
}

/// One mode: a set of models served together on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModeSpec {
    /// Mode name, also the job class it serves (`think`, `fast`, `vision`, `embed`).
    pub name: String,
    /// Models loaded in this mode.
    pub models: Vec<String>,
    /// VRAM the mode needs on one GPU, in MB.
    pub vram_mb: u64,
    /// Seconds a GPU is unavailable while switching into this mode (unload + load + warm-up).
    pub swap_in_s: f64,
    /// Aggregate throughput of one GPU in this mode, in `unit`s per second.
    pub throughput_per_s: f64,
    /// Unit of work (`tokens`, `pages`, `docs`); job sizes are expressed in it.
    pub unit: String,
    /// Largest batch the feeder claims for this mode.
    pub batch_size: usize,
    /// Whether and at what cost the mode's server can be put to sleep instead of stopped.
    pub sleep: SleepSpec,
}

/// How a mode's server sleeps (vLLM's sleep mode, llama-server's `--sleep-idle-seconds`).
///
/// Level 1 moves the weights to host RAM and drops the KV cache; level 2 drops the weights
/// too. Either frees the GPU for another mode, and waking is much cheaper than a cold start.
/// Every cost left out derives from the mode's `swap_in_s` (see the accessors on
/// [`ModeSpec`]), so an existing catalogue parses unchanged and never sleeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SleepSpec {
    /// The mode's server kind can sleep (vLLM can; an encoder server usually cannot). Off by
    /// default: a server must be known to support it.
    pub can_sleep: bool,
    /// Seconds to wake from level 1 (default 2 % of `swap_in_s`, between 0.25 and 6 s: vLLM
    /// wakes a 0.6B model in 0.26 s, a 4B vision model in 0.82 s, large models in 3-6 s).
    pub wake_l1_s: Option<f64>,
    /// Seconds to wake from level 2, weights reloaded (default 4 % of `swap_in_s`, between
    /// 0.85 and 12 s; vLLM reports 0.85-2.6 s).
    pub wake_l2_s: Option<f64>,
    /// Seconds to put the server to sleep (default 1 % of `swap_in_s`, between 0.1 and 3 s).
    pub sleep_s: Option<f64>,
    /// Host RAM its weights take while asleep at level 1, MB (default: `vram_mb`).
    pub host_mb: Option<u64>,
}

/// Sleep depth: what a sleeping server keeps (the seam's type: a mode executor asks a
/// server to sleep at the level the allocator chose).
pub use horos_server_control::SleepLevel;

impl Default for ModeSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            models: Vec::new(),
            vram_mb: 0,
            swap_in_s: 60.0,
            throughput_per_s: 1.0,
            unit: "jobs".to_owned(),
            batch_size: 16,
            sleep: SleepSpec::default(),
        }
    }
}

impl ModeSpec {
    /// Seconds of GPU time one job of `size` units takes in this mode.
    pub fn service_time_s(&self, size: f64) -> f64 {
        if self.throughput_per_s > 0.0 {
            size.max(0.0) / self.throughput_per_s
        } else {
            f64::INFINITY
        }
    }

    /// Whether the mode's server can be put to sleep.
    pub fn can_sleep(&self) -> bool {
        self.sleep.can_sleep
    }

    /// Seconds to wake the mode's server from `level` (configured, else derived from
    /// `swap_in_s`; never more than `swap_in_s`).
    pub fn wake_s(&self, level: SleepLevel) -> f64 {
        let (given, share, lo, hi) = match level {
            SleepLevel::One => (self.sleep.wake_l1_s, 0.02, 0.25, 6.0),
            SleepLevel::Two => (self.sleep.wake_l2_s, 0.04, 0.85, 12.0),
        };
        given
            .unwrap_or_else(|| (share * self.swap_in_s).clamp(lo, hi))
            .min(self.swap_in_s)
            .max(0.0)
    }

    /// Seconds to put the mode's server to sleep (configured, else derived from `swap_in_s`).
    pub fn sleep_s(&self) -> f64 {
        self.sleep
            .sleep_s
            .unwrap_or_else(|| (0.01 * self.swap_in_s).clamp(0.1, 3.0))
            .max(0.0)
    }

    /// Host RAM the mode's weights take asleep at level 1, MB.
    pub fn host_mb(&self) -> u64 {
        self.sleep.host_mb.unwrap_or(self.vram_mb)
    }
}

/// The set of modes and the initial mode of each GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Catalogue {
    /// The modes.
    pub modes: Vec<ModeSpec>,
    /// Initial mode per GPU index (its length is the GPU count used by the simulator).
    pub initial: Vec<String>,
}

impl Default for Catalogue {
    /// A four-GPU reference deployment: Think (Qwen3-32B, ~60 tok/s, 180 s swap), Fast
    /// (Qwen3-8B, ~140 tok/s), Vision (Qwen2-VL-7B + ColQwen2, ~3 pages/s, 70 s swap) and
    /// Embed (BGE-M3 + reranker, ~1000 docs/s). The Fast and Embed swap costs, 60 s and 20 s,
    /// are assumptions (an 8B vLLM start and a small encoder load), not measurements.
    /// Think, Fast and Vision are vLLM servers and can sleep (costs derived from `swap_in_s`);
    /// Embed's encoder server cannot.
    fn default() -> Self {
        let mode =
            |name: &str, models: &[&str], vram_mb, swap_in_s, tput, unit: &str, batch| ModeSpec {
                name: name.to_owned(),
                models: models.iter().map(|m| (*m).to_owned()).collect(),
                vram_mb,
                swap_in_s,
                throughput_per_s: tput,
                unit: unit.to_owned(),
                batch_size: batch,
                sleep: SleepSpec {
                    can_sleep: name != "embed",
                    ..SleepSpec::default()
                },
            };
        Self {
            modes: vec![
                mode(
                    "think",
                    &["Qwen/Qwen3-32B-AWQ"],
                    24_576,
                    180.0,
                    60.0,
                    "tokens",
                    8,
                ),
                mode(
                    "fast",
                    &["Qwen/Qwen3-8B"],
                    24_576,
                    60.0,
                    140.0,
                    "tokens",
                    16,
                ),
                mode(
                    "vision",
                    &["Qwen/Qwen2-VL-7B-Instruct", "vidore/colqwen2-v1.0"],
                    24_576,
                    70.0,
                    3.0,
                    "pages",
                    16,
                ),
                mode(
                    "embed",
                    &["BAAI/bge-m3", "jinaai/jina-reranker-v2-base-multilingual"],
                    6_144,
                    20.0,
                    1000.0,
                    "docs",
                    16,
                ),
            ],
            initial: vec![
                "think".into(),
                "fast".into(),
                "vision".into(),
                "embed".into(),
            ],
        }
    }
}

impl Catalogue {
    /// Looks a mode up by name.
    pub fn get(&self, name: &str) -> Option<&ModeSpec> {
        self.modes.iter().find(|m| m.name == name)
    }

    /// Mode names in catalogue order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.modes.iter().map(|m| m.name.as_str())
    }

    /// Swap-in cost of a mode (0 for an unknown mode).
    pub fn swap_in_s(&self, name: &str) -> f64 {
        self.get(name).map_or(0.0, |m| m.swap_in_s)
    }

    /// Checks names are unique, numbers positive and the initial assignment known.
    pub fn validate(&self) -> Result<(), CatalogueError> {
        if self.modes.is_empty() {
            return Err(CatalogueError::Empty);
        }
        for (i, m) in self.modes.iter().enumerate() {
            if self.modes[..i].iter().any(|o| o.name == m.name) {
                return Err(CatalogueError::DuplicateMode(m.name.clone()));
            }
            let checks = [
                ("throughput_per_s", m.throughput_per_s),
                ("batch_size", m.batch_size as f64),
            ];
            for (field, value) in checks {
                if !(value > 0.0 && value.is_finite()) {
                    return Err(CatalogueError::NotPositive {
                        mode: m.name.clone(),
                        field,
                        value,
                    });
                }
            }
            let costs = [
                ("swap_in_s", Some(m.swap_in_s)),
                ("sleep.wake_l1_s", m.sleep.wake_l1_s),
                ("sleep.wake_l2_s", m.sleep.wake_l2_s),
                ("sleep.sleep_s", m.sleep.sleep_s),
            ];
            for (field, value) in costs {
                if let Some(value) = value
                    && !(value >= 0.0 && value.is_finite())
                {
                    return Err(CatalogueError::NotPositive {
                        mode: m.name.clone(),
                        field,
                        value,
                    });
                }
            }
        }
        if let Some(bad) = self.initial.iter().find(|n| self.get(n).is_none()) {
            return Err(CatalogueError::UnknownMode(bad.clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_without_a_sleep_section_parses_and_never_sleeps() {
        let m: ModeSpec = toml::from_str("name = \"think\"\nswap_in_s = 180.0\nvram_mb = 24576\n")
            .expect("parses");
        assert!(!m.can_sleep());
        assert!((m.wake_s(SleepLevel::One) - 3.6).abs() < 1e-9);
        assert!((m.wake_s(SleepLevel::Two) - 7.2).abs() < 1e-9);
        assert!((m.sleep_s() - 1.8).abs() < 1e-9);
        assert_eq!(m.host_mb(), 24_576);
    }

    #[test]
    fn sleep_costs_are_bounded_and_configurable() {
        let m: ModeSpec = toml::from_str(
            "name = \"big\"\nswap_in_s = 600.0\n[sleep]\ncan_sleep = true\nwake_l2_s = 2.6\nhost_mb = 1000\n",
        )
        .expect("parses");
        assert!(m.can_sleep());
        assert_eq!(m.wake_s(SleepLevel::One), 6.0); // 2 % of 600 s, capped at 6 s
        assert_eq!(m.wake_s(SleepLevel::Two), 2.6);
        assert_eq!(m.host_mb(), 1000);
        let small = ModeSpec {
            swap_in_s: 0.5,
            ..ModeSpec::default()
        };
        // Never dearer than a cold start.
        assert_eq!(small.wake_s(SleepLevel::Two), 0.5);
        let bad = Catalogue {
            modes: vec![ModeSpec {
                name: "x".into(),
                sleep: SleepSpec {
                    wake_l1_s: Some(-1.0),
                    ..SleepSpec::default()
                },
                ..ModeSpec::default()
            }],
            initial: vec![],
        };
        assert!(matches!(
            bad.validate(),
            Err(CatalogueError::NotPositive {
                field: "sleep.wake_l1_s",
                ..
            })
        ));
        assert!(toml::from_str::<ModeSpec>("[sleep]\nwake_s = 1.0\n").is_err());
    }
}
