//! What the pool is told: models ([`ModelSpec`]), categories and their stay-warm times,
//! settings ([`PoolConfig`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::estimate::ModelFacts;
use crate::split;

/// Model category (selects the default stay-warm time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Text LLM.
    #[default]
    Llm,
    /// Vision-language model.
    Vision,
    /// Image generation.
    Diffusion,
    /// Embedding / reranking.
    Embedding,
    /// Text to speech (`/v1/audio/speech`).
    Speech,
    /// Anything else.
    Other,
}

/// Per-category stay-warm times, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StayWarm {
    /// Diffusion (900).
    pub diffusion_s: u64,
    /// LLM (300).
    pub llm_s: u64,
    /// Vision (60).
    pub vision_s: u64,
    /// Embedding (300).
    pub embedding_s: u64,
    /// Speech (120: a speech model is small and loads in seconds, so it gives its memory back
    /// sooner than an LLM).
    pub speech_s: u64,
    /// Other (300).
    pub other_s: u64,
}

impl Default for StayWarm {
    fn default() -> Self {
        Self {
            diffusion_s: 900,
            llm_s: 300,
            vision_s: 60,
            embedding_s: 300,
            speech_s: 120,
            other_s: 300,
        }
    }
}

impl StayWarm {
    /// The time for a category.
    pub fn for_category(&self, c: Category) -> Duration {
        Duration::from_secs(match c {
            Category::Diffusion => self.diffusion_s,
            Category::Llm => self.llm_s,
            Category::Vision => self.vision_s,
            Category::Embedding => self.embedding_s,
            Category::Speech => self.speech_s,
            Category::Other => self.other_s,
        })
    }
}

/// A model the pool may load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSpec {
    /// Model id (the key of its slot).
    pub id: String,
    /// Category.
    pub category: Category,
    /// Never evicted nor unloaded by the stay-warm timer.
    pub pin: bool,
    /// Overrides the category's stay-warm time, seconds.
    pub stay_warm_s: Option<u64>,
    /// What the estimation chain knows (`facts.name` defaults to the id when empty).
    pub facts: ModelFacts,
    /// Backend settings passed to [`Backend::start`](super::Backend::start).
    pub settings: serde_json::Value,
    /// Seconds a cold load is expected to take before the pool has measured one (the prior of
    /// its swap costs; 60 when absent). Wake and sleep priors derive from it as for a mode
    /// ([`crate::catalogue::SleepSpec`]).
    pub swap_in_s: Option<f64>,
}

/// Pool settings.
///
/// Every key has a default and an unknown key is refused, so this can be a configuration
/// file's section as it is; [`validate`](Self::validate) checks the ranges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// First port of the range.
    pub port_min: u16,
    /// Last port of the range (inclusive).
    pub port_max: u16,
    /// Wait after stopping a victim before re-checking free memory, ms (2000).
    pub reclaim_delay_ms: u64,
    /// How many times to wait for memory the ledger already shows free before giving up (3).
    pub reclaim_checks: u32,
    /// Safety margin per GPU, MB (512).
    pub margin_mb: u64,
    /// Stay-warm times.
    pub stay_warm: StayWarm,
    /// Lease time to live, seconds (renewed by [`ModelPool::maintain`](super::ModelPool::maintain)) (120).
    pub lease_ttl_s: u64,
    /// Put a model to sleep instead of stopping it, where its server can sleep (vLLM started
    /// with `--enable-sleep-mode`, llama-server with `--sleep-idle-seconds`), when it is
    /// evicted or its stay-warm time runs out, at the level its measured costs and the host
    /// RAM left choose (true).
    pub sleep: bool,
    /// Seconds a model stays asleep before it is stopped (1800).
    pub stay_asleep_s: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            port_min: 8300,
            port_max: 8399,
            reclaim_delay_ms: 2000,
            reclaim_checks: 3,
            margin_mb: split::DEFAULT_MARGIN_MB,
            stay_warm: StayWarm::default(),
            lease_ttl_s: 120,
            sleep: true,
            stay_asleep_s: 1800,
        }
    }
}

/// A [`PoolConfig`] value out of its range, named by its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct InvalidPoolConfig {
    /// The setting, e.g. `port_min`.
    pub key: &'static str,
    /// Its value as given.
    pub value: u64,
    /// What it must be.
    pub expected: &'static str,
}

impl PoolConfig {
    /// Checks the ranges; the error names the first key out of range.
    pub fn validate(&self) -> Result<(), InvalidPoolConfig> {
        if self.port_min == 0 || self.port_min > self.port_max {
            return Err(InvalidPoolConfig {
                key: "port_min",
                value: u64::from(self.port_min),
                expected: "a port from 1 to port_max",
            });
        }
        if self.lease_ttl_s == 0 {
            return Err(InvalidPoolConfig {
                key: "lease_ttl_s",
                value: 0,
                expected: "at least 1 second",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn settings_refuse_unknown_keys_and_bad_ranges() {
        let c: PoolConfig =
            serde_json::from_value(serde_json::json!({"port_min": 9000, "port_max": 9010}))
                .unwrap();
        c.validate().unwrap();
        let e = serde_json::from_value::<PoolConfig>(serde_json::json!({"port": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("port"), "{e}");
        let e = serde_json::from_value::<PoolConfig>(serde_json::json!({"stay_warm": {"llm": 5}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("llm"), "{e}");
        let bad = PoolConfig {
            port_min: 9000,
            port_max: 8000,
            ..PoolConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "port_min");
    }
}
