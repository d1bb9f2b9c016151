//! The PDF workers as a part of a deep health check ([`HealthCheck`]): unhealthy when the
//! pipeline's pool has no live worker and cannot start one (its program is gone, it dies before
//! its hello, it does not say hello in time).

use async_trait::async_trait;
use horos_server_control::{HealthCheck, Unhealthy};

use super::LatePipeline;
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::vision::VisionReader;

/// The pipeline's PDF workers, part `pdf_workers` of `/health/ready`. Healthy while the
/// pipeline is starting, and for a pipeline that reads documents in its own process.
pub struct PdfWorkersHealth<R, T, V> {
    pipeline: LatePipeline<R, T, V>,
}

impl<R, T, V> PdfWorkersHealth<R, T, V> {
    /// The PDF workers of `pipeline` (set once it has started).
    pub fn new(pipeline: LatePipeline<R, T, V>) -> Self {
        Self { pipeline }
    }
}

#[async_trait]
impl<R, T, V> HealthCheck for PdfWorkersHealth<R, T, V>
where
    R: VisionReader + 'static,
    T: TextEmbedder + 'static,
    V: VisualEmbedder + 'static,
{
    fn part(&self) -> String {
        "pdf_workers".to_owned()
    }

    async fn check(&self) -> Result<(), Unhealthy> {
        let Some(pool) = self.pipeline.get().and_then(|p| p.pdf_workers()) else {
            return Ok(());
        };
        pool.health()
            .await
            .map_err(|e| Unhealthy(format!("no PDF worker is alive or can start: {e}")))
    }
}
