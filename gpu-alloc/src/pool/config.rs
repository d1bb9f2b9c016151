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
    /// Anything else.
    Other,
}

/// Per-category stay-warm times, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StayWarm {
    /// Diffusion (900).
    pub diffusion_s: u64,
    /// LLM (300).
    pub llm_s: u64,
    /// Vision (60).
    pub vision_s: u64,
    /// Embedding (300).
    pub embedding_s: u64,
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
}

/// Pool settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
        }
    }
}
