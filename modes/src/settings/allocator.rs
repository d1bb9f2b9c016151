//! Which lane each GPU serves, as a configuration file writes it (`[allocator]`): the GPUs the
//! managed lanes share, the lane each serves at start, the model pool as a mode, and
//! gpu-alloc's [`AllocatorConfig`](horos_gpu_alloc::allocator::AllocatorConfig).

use std::collections::BTreeSet;

use horos_server_control::settings::{InvalidSettings, Table, from_table, take_keys};
use serde::Deserialize;

use super::lane::LaneSettings;
use crate::{POOL_MODE, PoolMode};

/// `[allocator]`: the lanes whose servers the binary runs share the GPUs `gpus`; gpu-alloc's
/// allocator decides every `tick_s` which lane each GPU serves (pending work against the swap's
/// cost, the starvation bound, anti-inversion), and a switch drains that GPU's running batch,
/// stops the leaving lane's server there and starts the other one's. Each managed lane has one
/// server instance per GPU, started only while that GPU serves it: on the `k`-th GPU it listens
/// on the lane URL's port plus `k` with `CUDA_VISIBLE_DEVICES` set to that GPU.
///
/// Its keys are gpu-alloc's own
/// [`AllocatorConfig`](horos_gpu_alloc::allocator::AllocatorConfig) (every one, with its
/// defaults and checks) plus its own: `gpus` (or `gpu` for one), and `initial`, the lane
/// each GPU serves at start (default: the managed lanes in configuration order, one per GPU,
/// starting over when there are more GPUs than lanes).
///
/// `[allocator.pool]` makes the models `[coordinator.pool]` loads on demand one more mode, named
/// [`POOL_MODE`]: a GPU given to it serves no lane, and requests waiting for room for a pooled
/// model are its demand (`initial` may name it).
#[derive(Debug, Clone, Default)]
pub struct AllocatorSettings {
    /// The GPUs the lanes share.
    pub gpus: Vec<u32>,
    /// The model pool as a mode, when `[allocator.pool]` is given.
    pub pool: Option<PoolMode>,
    /// The lane (queue) each GPU serves at start, as written (empty: the default).
    pub initial: Vec<String>,
    /// gpu-alloc's settings as written.
    pub settings: horos_gpu_alloc::allocator::AllocatorConfig,
    /// Whether `batch_overhead_s` was written (else it follows `feeder.cooldown_s`).
    batch_overhead_given: bool,
}

impl<'de> Deserialize<'de> for AllocatorSettings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Binary {
            #[serde(default)]
            gpu: Option<u32>,
            #[serde(default)]
            gpus: Option<Vec<u32>>,
            #[serde(default)]
            initial: Vec<String>,
            #[serde(default)]
            pool: Option<PoolMode>,
        }
        let mut table = Table::deserialize(d)?;
        let binary: Binary =
            from_table(take_keys(&mut table, &["gpu", "gpus", "initial", "pool"]))?;
        let gpus = match (binary.gpu, binary.gpus) {
            (Some(_), Some(_)) => {
                return Err(serde::de::Error::custom(
                    "give `gpus` (a list) or `gpu` (one), not both",
                ));
            }
            (Some(g), None) => vec![g],
            (None, Some(gs)) => gs,
            (None, None) => vec![0],
        };
        let batch_overhead_given = table.contains_key("batch_overhead_s");
        Ok(AllocatorSettings {
            gpus,
            pool: binary.pool,
            initial: binary.initial,
            settings: from_table(table)?,
            batch_overhead_given,
        })
    }
}

impl AllocatorSettings {
    /// gpu-alloc's settings, the pause between batches following the feeder's cooldown unless
    /// `batch_overhead_s` was written.
    pub fn policy(&self, cooldown_s: f64) -> horos_gpu_alloc::allocator::AllocatorConfig {
        let mut c = self.settings.clone();
        if !self.batch_overhead_given {
            c.batch_overhead_s = cooldown_s;
        }
        c
    }

    /// With one GPU, the managed lanes that name no GPU run on it (with several, each instance
    /// is told its own GPU when it starts).
    pub fn place_lanes(&self, lanes: &mut [LaneSettings]) {
        if let [gpu] = self.gpus[..] {
            for l in lanes {
                if l.is_managed() && l.gpus.is_empty() {
                    l.gpus = vec![gpu];
                }
            }
        }
    }

    /// The lane each GPU serves at start, by queue name (`initial`, or the default).
    pub fn initial_lanes(&self, lanes: &[LaneSettings]) -> Vec<String> {
        if !self.initial.is_empty() {
            return self.initial.clone();
        }
        let managed: Vec<&LaneSettings> = lanes.iter().filter(|l| l.is_managed()).collect();
        (0..self.gpus.len())
            .filter_map(|k| managed.get(k % managed.len().max(1)))
            .map(|l| l.queue.clone())
            .collect()
    }

    /// Checks the values against the `lanes` of the same file; the message names the key
    /// (`allocator.gpus`) or the lane.
    pub fn validate(&self, lanes: &[LaneSettings]) -> Result<(), InvalidSettings> {
        self.check(lanes).map_err(InvalidSettings)
    }

    fn check(&self, lanes: &[LaneSettings]) -> Result<(), String> {
        let managed: Vec<&LaneSettings> = lanes.iter().filter(|l| l.is_managed()).collect();
        let modes = managed.len() + usize::from(self.pool.is_some());
        if modes < 2 {
            return Err(format!(
                "[allocator] needs at least two modes to switch between: lanes whose servers \
                 the binary runs (with `command`, `vllm` or `docker`), and [allocator.pool]; \
                 found {modes}"
            ));
        }
        if let Some(p) = &self.pool {
            if let Some(l) = lanes.iter().find(|l| l.queue == POOL_MODE) {
                return Err(format!(
                    "lane `{}`: with [allocator.pool] the name `{POOL_MODE}` is the model \
                     pool's mode; rename the lane",
                    l.queue
                ));
            }
            for (key, v) in [("swap_in_s", p.swap_in_s), ("job_s", p.job_s)] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!(
                        "allocator.pool.{key} = {v}: a positive number of seconds"
                    ));
                }
            }
        }
        if self.gpus.is_empty() {
            return Err("allocator.gpus is empty".into());
        }
        let distinct: BTreeSet<u32> = self.gpus.iter().copied().collect();
        if distinct.len() != self.gpus.len() {
            return Err(format!("allocator.gpus {:?} names a GPU twice", self.gpus));
        }
        if !self.initial.is_empty() {
            if self.initial.len() != self.gpus.len() {
                return Err(format!(
                    "allocator.initial names {} lane(s) for {} GPU(s): one per GPU",
                    self.initial.len(),
                    self.gpus.len()
                ));
            }
            if let Some(q) = self.initial.iter().find(|q| {
                !(managed.iter().any(|l| &l.queue == *q)
                    || (self.pool.is_some() && q.as_str() == POOL_MODE))
            }) {
                return Err(format!(
                    "allocator.initial: `{q}` is not a lane whose server the binary runs"
                ));
            }
        }
        if self.gpus.len() > 1 {
            if let Some(l) = managed.iter().find(|l| !l.gpus.is_empty()) {
                return Err(format!(
                    "lane `{}`: `gpus` is set by [allocator] (one server per GPU of \
                     allocator.gpus); remove it",
                    l.queue
                ));
            }
            // Every instance's port must be free of every other's.
            let mut ports = BTreeSet::new();
            for l in &managed {
                let base = u32::from(l.port().unwrap_or(0));
                for k in 0..self.gpus.len() as u32 {
                    let port = base + k;
                    if port > u32::from(u16::MAX) || !ports.insert(port) {
                        return Err(format!(
                            "lane `{}`: its server on the {}th GPU would listen on port {port}, \
                             which another lane's server uses (or which does not exist): with \
                             {} GPUs each managed lane takes its URL's port and the {} after it",
                            l.queue,
                            k + 1,
                            self.gpus.len(),
                            self.gpus.len() - 1
                        ));
                    }
                }
            }
        }
        self.settings
            .validate()
            .map_err(|e| format!("allocator.{e}"))
    }
}
