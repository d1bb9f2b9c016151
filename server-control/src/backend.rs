//! A model pool's view of a server: serve one model on given GPUs and a port.

use std::sync::Arc;

use async_trait::async_trait;

use crate::SleepLevel;
use crate::error::BackendError;

/// A way to serve one model: a process, a container, a simulated server.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Starts serving on `port` with `gpus` (as `CUDA_VISIBLE_DEVICES`), with the model's
    /// `settings` (backend-specific JSON; `null` for none); returns once healthy.
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError>;
    /// Starts serving one model split over `gpus`, `shares_mb[i]` MB of it on `gpus[i]` (a
    /// backend that can split a model tells its server the shares, e.g. llama-server's
    /// `--tensor-split`); the default ignores the shares and calls [`Backend::start`].
    async fn start_split(
        &self,
        port: u16,
        gpus: &[u32],
        shares_mb: &[u64],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        let _ = shares_mb;
        self.start(port, gpus, settings).await
    }
    /// Stops serving (the memory may take a moment to be reclaimed).
    async fn stop(&self) -> Result<(), BackendError>;
    /// `Ok(())` when healthy.
    async fn health(&self) -> Result<(), BackendError>;
    /// Base URL once started.
    fn endpoint(&self) -> Option<String>;

    /// Whether [`Backend::sleep`] and [`Backend::wake`] can work for the server started
    /// (its kind and command support sleeping). `false` by default.
    fn can_sleep(&self) -> bool {
        false
    }

    /// Puts the started server to sleep at `level` and returns once it sleeps (its GPU memory
    /// freed, its process kept). [`BackendError::Unsupported`] by default; on any error it may
    /// still be awake: stop it.
    async fn sleep(&self, level: SleepLevel) -> Result<(), BackendError> {
        let _ = level;
        Err(BackendError::Unsupported(
            "this backend cannot sleep".into(),
        ))
    }

    /// Wakes it from a [`Backend::sleep`] and returns once it serves again.
    /// [`BackendError::Unsupported`] by default; on any error its state is unknown: stop it
    /// and start it again.
    async fn wake(&self) -> Result<(), BackendError> {
        Err(BackendError::Unsupported(
            "this backend cannot sleep".into(),
        ))
    }
}

/// Creates the backend of a model.
pub trait BackendFactory: Send + Sync {
    /// A new, not yet started backend for the model `model_id`, whose `settings` are the ones
    /// later passed to [`Backend::start`].
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError>;
}

#[async_trait]
impl<T: Backend + ?Sized> Backend for Arc<T> {
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        (**self).start(port, gpus, settings).await
    }
    async fn start_split(
        &self,
        port: u16,
        gpus: &[u32],
        shares_mb: &[u64],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        (**self).start_split(port, gpus, shares_mb, settings).await
    }
    async fn stop(&self) -> Result<(), BackendError> {
        (**self).stop().await
    }
    async fn health(&self) -> Result<(), BackendError> {
        (**self).health().await
    }
    fn endpoint(&self) -> Option<String> {
        (**self).endpoint()
    }
    fn can_sleep(&self) -> bool {
        (**self).can_sleep()
    }
    async fn sleep(&self, level: SleepLevel) -> Result<(), BackendError> {
        (**self).sleep(level).await
    }
    async fn wake(&self) -> Result<(), BackendError> {
        (**self).wake().await
    }
}

impl<T: BackendFactory + ?Sized> BackendFactory for Arc<T> {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        (**self).create(model_id, settings)
    }
}
