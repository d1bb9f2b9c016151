//! What `run` starts, as one value: [`RunningSystem::shutdown`] stops all of it, in the reverse
//! order of start-up, whether the run ended normally or a later part failed to start.

use std::time::Duration;

use horos_coordinator::Coordinator;
use horos_gpu_alloc::pool::PoolUpstream;
use ingest_pipeline::pipeline::Running;
use tokio::task::JoinHandle;

use crate::ingest::RefPipeline;
use crate::servers::LaneServer;

/// The parts of a running system; each is `None` (or empty) until started.
#[derive(Default)]
pub struct RunningSystem {
    /// Lane servers the binary runs (started, or waiting for the allocator).
    pub servers: Vec<LaneServer>,
    /// The OpenAI-compatible endpoint.
    pub coordinator: Option<Coordinator>,
    /// The coordinator's on-demand models (their servers are stopped at shutdown).
    pub model_pool: Option<PoolUpstream>,
    /// The document pipeline's workers.
    pub pipeline: Option<(RefPipeline, Running)>,
    /// The allocator's executor (ends when the stop signal is sent).
    pub allocator: Option<JoinHandle<()>>,
    /// `[gpus]`' sampler and alert delivery (stopped last: the other parts read it).
    pub gpus: Option<horos_gpu_alloc::monitor::watch::GpuWatch>,
}

/// How long the coordinator may take to finish the requests in flight at shutdown.
const COORDINATOR_GRACE: Duration = Duration::from_secs(10);

impl RunningSystem {
    /// Stops everything that was started: the allocator's step in progress finishes (bounded by
    /// the servers' start time-out), then the pipeline's workers, the coordinator (hands its
    /// async jobs back), the pool's servers, and the lanes' servers. Failures are logged: a
    /// shutdown always goes to its end.
    pub async fn shutdown(self) {
        if let Some(task) = self.allocator {
            let _ = task.await;
        }
        if let Some((_pipeline, running)) = self.pipeline {
            running.shutdown().await;
        }
        if let Some(c) = self.coordinator {
            c.shutdown(COORDINATOR_GRACE).await;
        }
        if let Some(p) = &self.model_pool {
            p.pool().unload_all().await;
        }
        for s in &self.servers {
            if let Err(e) = s.stop().await {
                tracing::warn!(server = s.name(), error = %e, "stopping the server failed");
            }
        }
        drop(self.gpus);
    }
}
