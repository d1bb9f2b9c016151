//! The model pool's seam: [`horos_server_control::Backend`] and `BackendFactory` for
//! processes and containers. The pool hands out the port and the GPUs at each start; the
//! model's `settings` (JSON) may override the command, image, arguments, environment and health
//! check; [`PoolBackendFactory`] runs the models whose settings name an image as containers and
//! the others as processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use horos_server_control::{Backend, BackendError, BackendFactory, SleepLevel};
use serde::{Deserialize, Serialize};

use crate::docker::{DockerConfig, DockerServer};
use crate::error::ServerError;
use crate::probe::{InferenceKind, ProbeConfig};
use crate::process::{ProcessConfig, ProcessServer, sanitize};
use crate::server::ManagedServer;

/// What a backend reads from a model's `settings` (other fields are ignored: the pool and
/// other backends have their own, e.g. `actual_mb`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackendSettings {
    /// Process: replaces the template's command.
    pub command: Option<Vec<String>>,
    /// Docker: replaces the template's image. [`PoolBackendFactory`] runs a model with one as a
    /// container.
    pub image: Option<String>,
    /// Docker: the port the server listens on inside the container (replaces the template's).
    pub container_port: Option<u16>,
    /// Docker: bind mounts `host:container[:ro]`, added to the template's.
    pub binds: Vec<String>,
    /// Docker: the container's memory limit, MB (replaces the template's).
    pub memory_mb: Option<u64>,
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
    /// Replaces the probe's health path (`/health`).
    pub health_path: Option<String>,
}

impl BackendSettings {
    /// Applies the probe's settings to `probe`.
    fn apply_probe(&self, probe: &mut ProbeConfig) {
        if self.probe_model.is_some() {
            probe.model.clone_from(&self.probe_model);
        }
        if let Some(kind) = self.probe_kind {
            probe.kind = kind;
        }
        if let Some(n) = self.probe_inference_every {
            probe.inference_every = n;
        }
        if let Some(path) = &self.health_path {
            probe.health_path.clone_from(path);
        }
    }
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
                s.apply_probe(&mut c.probe);
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
                if let Some(p) = s
                    .container_port
                    .filter(|_| c.network_mode.as_deref() != Some("host"))
                {
                    c.container_port = p;
                }
                if s.memory_mb.is_some() {
                    c.memory_mb = s.memory_mb;
                }
                c.binds.extend(s.binds.iter().cloned());
                c.cmd.extend(s.args.iter().cloned());
                c.env.extend(s.env.clone());
                s.apply_probe(&mut c.probe);
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

    /// Where the running server's command says it can sleep ([`crate::SleepApi`]).
    fn can_sleep(&self) -> bool {
        self.current().and_then(|s| s.sleep_api()).is_some()
    }

    async fn sleep(&self, level: SleepLevel) -> Result<(), BackendError> {
        let (server, api) = self.sleeper()?;
        api.sleep(server.probe(), level)
            .await
            .map_err(BackendError::from)
    }

    async fn wake(&self) -> Result<(), BackendError> {
        let (server, api) = self.sleeper()?;
        api.wake(server.probe()).await.map_err(BackendError::from)
    }
}

impl ServerBackend {
    /// The running server and the way it sleeps.
    fn sleeper(&self) -> Result<(Arc<dyn ManagedServer>, crate::SleepApi), BackendError> {
        let server = self
            .current()
            .ok_or_else(|| BackendError::NotRunning("not started".into()))?;
        let api = server.sleep_api().ok_or_else(|| {
            BackendError::Unsupported(format!("{}: its command cannot sleep", server.name()))
        })?;
        Ok((server, api))
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

impl ProcessBackendFactory {
    /// Where the server of `model_id` writes its output, with `run_dir` as the factory's.
    pub fn log_path(run_dir: &Path, model_id: &str) -> PathBuf {
        run_dir.join(format!("{}.log", sanitize(model_id)))
    }
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
            c.pidfile = Some(dir.join(format!("{}.pid", sanitize(model_id))));
            c.log_path = Some(Self::log_path(dir, model_id));
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

/// Processes and containers in one pool: a model whose settings name an `image`
/// ([`BackendSettings::image`]) runs as a container of `docker`'s template, the others as
/// processes of `process`' template.
#[derive(Debug, Clone)]
pub struct PoolBackendFactory {
    /// The processes.
    pub process: ProcessBackendFactory,
    /// The containers; `None`: no engine (a model with an image is refused).
    pub docker: Option<DockerBackendFactory>,
}

impl BackendFactory for PoolBackendFactory {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let parsed = BackendSettings::parse(settings).map_err(BackendError::from)?;
        match (&parsed.image, &self.docker) {
            (None, _) => self.process.create(model_id, settings),
            (Some(_), Some(docker)) => docker.create(model_id, settings),
            (Some(image), None) => Err(BackendError::from(ServerError::Config(format!(
                "{model_id} runs in a container of {image}, but no Docker engine is connected"
            )))),
        }
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

    #[test]
    fn a_container_settings_override_the_probe_and_the_container() {
        let s = BackendSettings::parse(&serde_json::json!({
            "image": "mine:local", "container_port": 9000, "binds": ["/m:/m:ro"],
            "memory_mb": 512, "health_path": "/ready", "probe_inference_every": 0
        }))
        .unwrap();
        let mut probe = ProbeConfig::default();
        s.apply_probe(&mut probe);
        assert_eq!(
            (probe.health_path.as_str(), probe.inference_every),
            ("/ready", 0)
        );
        assert_eq!(s.container_port, Some(9000));
        assert_eq!(s.binds, ["/m:/m:ro"]);
    }

    /// A model with an image is a container: refused without an engine, never run as a process.
    #[test]
    fn the_pool_factory_runs_a_model_with_an_image_in_a_container() {
        let factory = PoolBackendFactory {
            process: ProcessBackendFactory {
                template: ProcessConfig::default(),
                run_dir: None,
            },
            docker: None,
        };
        let container = serde_json::json!({"image": "mine:local"});
        let err = factory.create("boxed", &container).err().unwrap();
        assert!(
            err.to_string().contains("no Docker engine is connected"),
            "{err}"
        );
        assert!(
            factory
                .create("plain", &serde_json::json!({"command": ["srv"]}))
                .is_ok()
        );
        assert!(
            factory
                .create("bad", &serde_json::json!({"image": 3}))
                .is_err()
        );
    }
}
