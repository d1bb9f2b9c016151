//! `[allocator]`.

use serde::Deserialize;

use super::lane::LaneSection;
use super::{from_table, take_keys};

/// `[allocator]`: the lanes whose servers the binary runs share one GPU; gpu-alloc's allocator
/// decides every `tick_s` which of them it serves (pending work against the swap's cost, the
/// starvation bound, anti-inversion), and the switch drains the running batch, stops one server
/// and starts the other. Its keys are gpu-alloc's own
/// [`AllocatorConfig`](horos_gpu_alloc::allocator::AllocatorConfig) (every one, with its
/// defaults and checks) plus `gpu`, the GPU the lanes share.
#[derive(Debug, Clone, Default)]
pub struct AllocatorSection {
    /// The GPU the lanes share (`CUDA_VISIBLE_DEVICES` of their servers).
    pub gpu: u32,
    /// gpu-alloc's settings as written.
    pub settings: horos_gpu_alloc::allocator::AllocatorConfig,
    /// Whether `batch_overhead_s` was written (else it follows `feeder.cooldown_s`).
    batch_overhead_given: bool,
}

impl<'de> Deserialize<'de> for AllocatorSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Binary {
            #[serde(default)]
            gpu: u32,
        }
        let mut table = toml::Table::deserialize(d)?;
        let binary: Binary = from_table(take_keys(&mut table, &["gpu"]))?;
        let batch_overhead_given = table.contains_key("batch_overhead_s");
        Ok(AllocatorSection {
            gpu: binary.gpu,
            settings: from_table(table)?,
            batch_overhead_given,
        })
    }
}

impl AllocatorSection {
    /// gpu-alloc's settings, the pause between batches following the feeder's cooldown unless
    /// `batch_overhead_s` was written.
    pub fn policy(&self, cooldown_s: f64) -> horos_gpu_alloc::allocator::AllocatorConfig {
        let mut c = self.settings.clone();
        if !self.batch_overhead_given {
            c.batch_overhead_s = cooldown_s;
        }
        c
    }
}

impl AllocatorSection {
    pub(super) fn validate(&self, lanes: &[LaneSection]) -> Result<(), String> {
        let managed = lanes.iter().filter(|l| l.is_managed()).count();
        if managed < 2 {
            return Err(format!(
                "[allocator] needs at least two lanes whose servers the binary runs (with \
                 `command`, `vllm` or `docker`); found {managed}"
            ));
        }
        self.settings
            .validate()
            .map_err(|e| format!("allocator.{e}"))
    }
}
