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
}

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
            if !(m.swap_in_s >= 0.0 && m.swap_in_s.is_finite()) {
                return Err(CatalogueError::NotPositive {
                    mode: m.name.clone(),
                    field: "swap_in_s",
                    value: m.swap_in_s,
                });
            }
        }
        if let Some(bad) = self.initial.iter().find(|n| self.get(n).is_none()) {
            return Err(CatalogueError::UnknownMode(bad.clone()));
        }
        Ok(())
    }
}
