//! A simulated backend over a [`SimFleet`], for tests and demos.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::monitor::sim_fleet::SimFleet;

use super::{Backend, BackendError, BackendFactory};
use crate::catalogue::SleepLevel;

/// A backend factory over a [`SimFleet`]: starting a model allocates its VRAM (the
/// `actual_mb` setting, else `default_mb`) split evenly over its GPUs; stopping frees it
/// after `reclaim_ms` (as CUDA does). A model whose settings say `"can_sleep": true` sleeps
/// (its VRAM freed at once, the server kept) and wakes (allocated again on the same GPUs);
/// `"wake_fails": true` makes every wake fail, `"sleep_fails": true` every sleep; `"load_ms"` and `"wake_ms"` make a start and a
/// wake take that long (0 by default). For tests and demos.
#[derive(Debug, Clone)]
pub struct SimBackendFactory {
    fleet: Arc<SimFleet>,
    /// MB a model takes when its settings carry no `actual_mb`.
    pub default_mb: u64,
    /// Delay before a stopped model's memory is freed, ms.
    pub reclaim_ms: u64,
}

impl SimBackendFactory {
    /// A factory over a fleet.
    pub fn new(fleet: Arc<SimFleet>, default_mb: u64, reclaim_ms: u64) -> Self {
        Self {
            fleet,
            default_mb,
            reclaim_ms,
        }
    }
}

struct SimBackend {
    fleet: Arc<SimFleet>,
    key: String,
    mb: u64,
    reclaim_ms: u64,
    endpoint: Mutex<Option<String>>,
    can_sleep: bool,
    wake_fails: bool,
    sleep_fails: bool,
    load: Duration,
    wake: Duration,
    /// GPUs of the current start.
    gpus: Mutex<Vec<u32>>,
}

impl SimBackend {
    fn allocate(&self, gpus: &[u32]) -> Result<(), BackendError> {
        let n = gpus.len() as u64;
        for (i, &g) in gpus.iter().enumerate() {
            let part = self.mb / n + u64::from((i as u64) < self.mb % n);
            if let Err(e) = self.fleet.load(g, &self.key, part, None) {
                self.fleet.unload_everywhere(&self.key);
                return Err(BackendError::StartFailed(e.to_string()));
            }
        }
        Ok(())
    }
}

impl BackendFactory for SimBackendFactory {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let mb = settings
            .get("actual_mb")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(self.default_mb);
        let flag = |k: &str| settings.get(k).and_then(serde_json::Value::as_bool) == Some(true);
        let ms = |k: &str| {
            Duration::from_millis(
                settings
                    .get(k)
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0),
            )
        };
        Ok(Arc::new(SimBackend {
            fleet: Arc::clone(&self.fleet),
            key: model_id.to_owned(),
            mb,
            reclaim_ms: self.reclaim_ms,
            endpoint: Mutex::new(None),
            can_sleep: flag("can_sleep"),
            wake_fails: flag("wake_fails"),
            sleep_fails: flag("sleep_fails"),
            load: ms("load_ms"),
            wake: ms("wake_ms"),
            gpus: Mutex::new(Vec::new()),
        }))
    }
}

#[async_trait]
impl Backend for SimBackend {
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        _settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        if gpus.is_empty() {
            return Err(BackendError::Config("no GPU".into()));
        }
        tokio::time::sleep(self.load).await;
        self.allocate(gpus)?;
        *self.gpus.lock().unwrap_or_else(|e| e.into_inner()) = gpus.to_vec();
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(format!("http://127.0.0.1:{port}"));
        Ok(())
    }

    async fn stop(&self) -> Result<(), BackendError> {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let fleet = Arc::clone(&self.fleet);
        let key = self.key.clone();
        let delay = Duration::from_millis(self.reclaim_ms);
        if delay.is_zero() {
            fleet.unload_everywhere(&key);
        } else {
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                fleet.unload_everywhere(&key);
            });
        }
        Ok(())
    }

    async fn health(&self) -> Result<(), BackendError> {
        if self
            .endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            Ok(())
        } else {
            Err(BackendError::NotRunning("not started".into()))
        }
    }

    fn endpoint(&self) -> Option<String> {
        self.endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn can_sleep(&self) -> bool {
        self.can_sleep
    }

    async fn sleep(&self, _level: SleepLevel) -> Result<(), BackendError> {
        if !self.can_sleep {
            return Err(BackendError::Unsupported("started without sleep".into()));
        }
        if self.sleep_fails {
            return Err(BackendError::Unhealthy("sleep failed (scripted)".into()));
        }
        self.fleet.unload_everywhere(&self.key);
        Ok(())
    }

    async fn wake(&self) -> Result<(), BackendError> {
        if self.wake_fails {
            return Err(BackendError::Unhealthy("wake failed (scripted)".into()));
        }
        tokio::time::sleep(self.wake).await;
        let gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.allocate(&gpus)
    }
}
