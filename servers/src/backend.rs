//! The model pool's seam: [`horos_server_control::Backend`] and `BackendFactory` for
//! processes and containers. The pool hands out the port and the GPUs at each start; the
//! model's `settings` (JSON) may override the command, image, arguments and environment.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use horos_server_control::{Backend, BackendError, BackendFactory};
use serde::{Deserialize, Serialize};

use crate::docker::{DockerConfig, DockerServer};
use crate::error::ServerError;
use crate::probe::InferenceKind;
use crate::process::{ProcessConfig, ProcessServer, sanitize};
use crate::server::ManagedServer;

/// What a backend reads from a model's `settings` (other fields are ignored: the pool and
/// other backends have their own, e.g. `actual_mb`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackendSettings {
    /// Process: replaces the template's command.
    pub command: Option<Vec<String>>,
    /// Docker: replaces the template's image.
    pub image: Option<String>,
    /// Appended to the command (process) or to the container command (Docker).
    pub args: Vec<String>,
    /// Added to the environment.
    pub env: BTreeMap<String, String>,
    /// The model name the inference probe sends (default: asked from `/v1/models`).
    pub probe_model: Option<String>,
    /// What the inference probe asks (an embedding server refuses a chat completion).
    pub probe_kind: Option<InferenceKind>,
    /// Replaces the probe's `inference_every` (0: `/health` only, for servers that answer
    /// neither chats nor embeddings, e.g. image generation).
    pub probe_inference_every: Option<u32>,
}

impl BackendSettings {
    /// Parses `settings`; `null` is the default.
    pub fn parse(settings: &serde_json::Value) -> Result<BackendSettings, ServerError> {
        if settings.is_null() {
            return Ok(BackendSettings::default());
        }
        serde_json::from_value(settings.clone())
            .map_err(|e| ServerError::Config(format!("backend settings: {e}")))
    }
}

type Build = dyn Fn(u16, &[u32], &[u64], &BackendSettings) -> Result<Arc<dyn ManagedServer>, ServerError>
    + Send
    + Sync;

/// A [`Backend`] that runs a [`ProcessServer`] or a [`DockerServer`] built at each start.
pub struct ServerBackend {
    build: Box<Build>,
    /// A std mutex, held only to clone or swap the `Arc`.
    current: Mutex<Option<Arc<dyn ManagedServer>>>,
}

impl std::fmt::Debug for ServerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBackend")
            .field("endpoint", &self.endpoint())
            .finish()
    }
}

impl ServerBackend {
    /// Processes from `template` (its `port` and `gpus` are replaced at each start).
    pub fn process(template: ProcessConfig) -> ServerBackend {
        ServerBackend {
            build: Box::new(move |port, gpus, shares_mb, s| {
                let mut c = template.clone();
                c.port = port;
                c.gpus = gpus.to_vec();
                c.tensor_split = shares_mb.to_vec();
                if let Some(cmd) = &s.command {
                    c.command = cmd.clone();
                }
                c.command.extend(s.args.iter().cloned());
                c.env.extend(s.env.clone());
                if s.probe_model.is_some() {
                    c.probe.model = s.probe_model.clone();
                }
                if let Some(kind) = s.probe_kind {
                    c.probe.kind = kind;
                }
                if let Some(n) = s.probe_inference_every {
                    c.probe.inference_every = n;
                }
                Ok(Arc::new(ProcessServer::new(c)?) as Arc<dyn ManagedServer>)
            }),
            current: Mutex::new(None),
        }
    }

    /// Containers from `template` on `docker` (its `host_port` and `gpus` are replaced at
    /// each start).
    pub fn docker(docker: bollard::Docker, template: DockerConfig) -> ServerBackend {
        ServerBackend {
            build: Box::new(move |port, gpus, shares_mb, s| {
                let mut c = template.clone();
                c.host_port = port;
                c.tensor_split = shares_mb.to_vec();
                if c.network_mode.as_deref() == Some("host") {
                    c.container_port = port;
                }
                c.gpus = gpus.to_vec();
                if let Some(image) = &s.image {
                    c.image = image.clone();
                }
                c.cmd.extend(s.args.iter().cloned());
                c.env.extend(s.env.clone());
                if s.probe_model.is_some() {
                    c.probe.model = s.probe_model.clone();
                }
                if let Some(kind) = s.probe_kind {
                    c.probe.kind = kind;
                }
                if let Some(n) = s.probe_inference_every {
                    c.probe.inference_every = n;
                }
                Ok(Arc::new(DockerServer::new(docker.clone(), c)?) as Arc<dyn ManagedServer>)
            }),
            current: Mutex::new(None),
        }
    }

    /// The server of the current start (to supervise it, or for a status page).
    pub fn current(&self) -> Option<Arc<dyn ManagedServer>> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    fn take(&self) -> Option<Arc<dyn ManagedServer>> {
        self.current.lock().ok().and_then(|mut c| c.take())
    }
}

#[async_trait]
impl Backend for ServerBackend {
    async fn start(
        &self,
        port: u16,
        gpus: &[u32],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        self.start_split(port, gpus, &[], settings).await
    }

    async fn start_split(
        &self,
        port: u16,
        gpus: &[u32],
        shares_mb: &[u64],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        if let Some(old) = self.take() {
            old.stop().await.map_err(BackendError::from)?;
        }
        let settings = BackendSettings::parse(settings).map_err(BackendError::from)?;
        let server = (self.build)(port, gpus, shares_mb, &settings).map_err(BackendError::from)?;
        if let Ok(mut c) = self.current.lock() {
            *c = Some(server.clone());
        }
        if let Err(e) = server.start().await {
            self.take();
            return Err(BackendError::from(e));
        }
        Ok(())
    }

    async fn stop(&self) -> Result<(), BackendError> {
        match self.take() {
            Some(server) => server.stop().await.map_err(BackendError::from),
            None => Ok(()),
        }
    }

    async fn health(&self) -> Result<(), BackendError> {
        match self.current() {
            Some(server) => server.check().await.map_err(BackendError::from),
            None => Err(BackendError::NotRunning("not started".into())),
        }
    }

    fn endpoint(&self) -> Option<String> {
        self.current().map(|s| s.url())
    }
}

/// Creates a process backend per model: the template with the model's id as name and
/// `{model}`, and (with a `run_dir`) its pidfile and log file there as `ID.pid` / `ID.log`.
#[derive(Debug, Clone)]
pub struct ProcessBackendFactory {
    /// The template.
    pub template: ProcessConfig,
    /// Where pidfiles and logs go (default: the template's settings).
    pub run_dir: Option<PathBuf>,
}

impl BackendFactory for ProcessBackendFactory {
    fn create(
        &self,
        model_id: &str,
        _settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let mut c = self.template.clone();
        c.name = model_id.to_owned();
        if c.model.is_none() {
            c.model = Some(model_id.to_owned());
        }
        if let Some(dir) = &self.run_dir {
            let file = sanitize(model_id);
            c.pidfile = Some(dir.join(format!("{file}.pid")));
            c.log_path = Some(dir.join(format!("{file}.log")));
        }
        Ok(Arc::new(ServerBackend::process(c)))
    }
}

/// Creates a container backend per model: the template with the model's id as name (container
/// `horos-ID`) and `{model}`.
#[derive(Debug, Clone)]
pub struct DockerBackendFactory {
    /// The engine.
    pub docker: bollard::Docker,
    /// The template.
    pub template: DockerConfig,
}

impl BackendFactory for DockerBackendFactory {
    fn create(
        &self,
        model_id: &str,
        _settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let mut c = self.template.clone();
        c.name = model_id.to_owned();
        if c.model.is_none() {
            c.model = Some(model_id.to_owned());
        }
        Ok(Arc::new(ServerBackend::docker(self.docker.clone(), c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_ignores_foreign_fields() {
        let s = BackendSettings::parse(&serde_json::json!({
            "args": ["--max-model-len", "4096"], "actual_mb": 1234, "env": {"A": "1"},
            "probe_kind": "embedding"
        }))
        .unwrap();
        assert_eq!(s.probe_kind, Some(InferenceKind::Embedding));
        assert_eq!(s.args, ["--max-model-len", "4096"]);
        assert_eq!(s.env["A"], "1");
        assert_eq!(
            BackendSettings::parse(&serde_json::Value::Null).unwrap(),
            BackendSettings::default()
        );
        assert!(BackendSettings::parse(&serde_json::json!({"args": 3})).is_err());
    }
}
