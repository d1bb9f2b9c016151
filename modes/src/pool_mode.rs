//! A model pool (gpu-alloc's, loading models on demand) as one more mode of the allocator's
//! plan. A GPU given to the pool serves no lane, so the pool can place models in
//! all of its memory; the requests waiting for room for a pooled model (a gateway's, as a
//! [`Demand`]) are the mode's demand, weighed against the lanes' backlogs by the same
//! allocator. Leaving the pool, a GPU first waits for the requests its models are serving, then
//! unloads its idle models so the lane's server finds the room it books.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use horos_gpu_alloc::pool::{ModelPool, SlotState};
use horos_server_control::{ControlError, Demand, Gate, ModeServer};
use serde::Deserialize;

use crate::{Instance, ModeLane};

/// The name of the model pool's mode in the allocator's plan (no lane may take it).
pub const POOL_MODE: &str = "pool";

/// The model pool as one of the modes the GPUs are given to (`[allocator.pool]` in horos-ref's
/// configuration): what a switch to it costs, and what a waiting request weighs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolMode {
    /// GPU-unavailable seconds of a switch to the pool: about a pooled model's load (30).
    #[serde(default = "default_pool_swap_in_s")]
    pub swap_in_s: f64,
    /// GPU-seconds a waiting request is counted as (10).
    #[serde(default = "default_pool_job_s")]
    pub job_s: f64,
}

fn default_pool_swap_in_s() -> f64 {
    30.0
}

fn default_pool_job_s() -> f64 {
    10.0
}

/// How often a GPU leaving the pool looks whether its models still serve a request.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// The pool's mode, one instance per GPU of `gpus`, its demand the requests waiting for room.
pub fn mode_lane(
    pool: &ModelPool,
    gpus: &[u32],
    demand: Arc<dyn Demand>,
    mode: &PoolMode,
) -> ModeLane {
    // The pool places models only on the GPUs the allocator gives it (where its owner did not
    // confine it at construction already).
    pool.confine_to_given_gpus();
    let instances = gpus
        .iter()
        .map(|&gpu| {
            let on = Arc::new(PoolOnGpu {
                pool: pool.clone(),
                gpu,
                open: AtomicBool::new(false),
            });
            Instance {
                gate: on.clone(),
                server: on,
            }
        })
        .collect();
    ModeLane {
        queue: POOL_MODE.to_owned(),
        instances,
        swap_in_s: mode.swap_in_s,
        job_s: mode.job_s,
        batch_size: 1,
        demand: Some(demand),
        keep_warm: None,
        sleep: horos_gpu_alloc::catalogue::SleepSpec::default(),
    }
}

/// The pool on one GPU: its gate (busy while a pooled model there serves a request or loads)
/// and its "server" (nothing to start; stopping unloads the idle models placed there).
struct PoolOnGpu {
    pool: ModelPool,
    gpu: u32,
    open: AtomicBool,
}

impl PoolOnGpu {
    /// Whether a model on this GPU serves a request, or a load (whose placement is not known
    /// yet) is in progress.
    fn busy(&self) -> bool {
        self.pool.slots().iter().any(|s| {
            let here = s.shares.iter().any(|sh| sh.gpu == self.gpu);
            (here && s.active > 0) || s.state == SlotState::Loading && (here || s.shares.is_empty())
        })
    }
}

#[async_trait]
impl Gate for PoolOnGpu {
    fn open(&self) {
        self.pool.give_gpu(self.gpu);
        self.open.store(true, Ordering::SeqCst);
    }

    fn close(&self) {
        // No load or wake is placed here from now on; the models here are `stop`'s to unload.
        self.pool.take_gpu(self.gpu);
        self.open.store(false, Ordering::SeqCst);
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    fn is_busy(&self) -> bool {
        self.busy()
    }

    async fn wait_idle(&self) {
        while self.busy() {
            tokio::time::sleep(IDLE_POLL).await;
        }
    }
}

#[async_trait]
impl ModeServer for PoolOnGpu {
    async fn start(&self) -> Result<(), ControlError> {
        // The leaving lane's server has stopped and released its booking: the pool's waiting
        // requests find the room when they next look (every second).
        tracing::info!(gpu = self.gpu, "GPU given to the model pool");
        Ok(())
    }

    async fn stop(&self) -> Result<(), ControlError> {
        // Idle models placed here make room for the lane's server, pinned ones too (they are
        // loaded again on the pool's GPUs); one that took a request meanwhile stays, and the
        // lane's start then waits or fails and is retried. At most one round per model: one
        // loaded again meanwhile is the lane start's to evict.
        self.pool.take_gpu(self.gpu);
        for _ in 0..self.pool.slots().len() {
            match self.pool.evacuate_one_idle(&[self.gpu]).await {
                Some(model) => {
                    tracing::info!(gpu = self.gpu, model = %model, "pooled model unloaded: the GPU leaves the pool");
                }
                None => break,
            }
        }
        Ok(())
    }
}
