//! The seam between the pool and whatever serves a model: [`Backend`], its factory and its
//! error.

use std::sync::Arc;

use async_trait::async_trait;

use super::ModelSpec;

/// A backend failure.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("backend: {0}")]
pub struct BackendError(pub String);

/// A way to serve one model: a process, a container, a simulated server.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Starts serving on `port` with `gpus` (as `CUDA_VISIBLE_DEVICES`); returns once healthy.
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError>;
    /// Stops serving (the memory may take a moment to be reclaimed).
    async fn stop(&self) -> Result<(), BackendError>;
    /// `Ok(())` when healthy.
    async fn health(&self) -> Result<(), BackendError>;
    /// Base URL once started.
    fn endpoint(&self) -> Option<String>;
}

/// Creates the backend of a model.
pub trait BackendFactory: Send + Sync {
    /// A new, not yet started backend for `spec`.
    fn create(&self, spec: &ModelSpec) -> Result<Arc<dyn Backend>, BackendError>;
}
