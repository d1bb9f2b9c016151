//! A server run as a Docker container through the engine API (bollard, local unix socket):
//! labelled, its port published on 127.0.0.1 only, GPUs as device requests, never pulled.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, LogsOptions,
    RemoveContainerOptions, StopContainerOptions,
};
use serde::{Deserialize, Serialize};

use crate::error::ServerError;
use crate::probe::{Probe, ProbeConfig};
use crate::process::sanitize;
use crate::server::{ExitInfo, Lifecycle, ManagedServer, RunState};
use crate::sleep::SleepApi;
use crate::template::Vars;

/// The label every container of this crate carries (`true`).
pub const LABEL_MANAGED: &str = "horos.managed";
/// The label with the server's name.
pub const LABEL_NAME: &str = "horos.name";
/// The label with the owner (which HOROS instance started it; see [`DockerConfig::owner`]).
pub const LABEL_OWNER: &str = "horos.owner";

/// How to run a server container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerConfig {
    /// The name (container name `horos-NAME`, or `horos-OWNER-NAME` for another owner).
    pub name: String,
    /// The image, present locally (it is never pulled), e.g. `horos/llama-server:local`.
    pub image: String,
    /// Overrides the image's entrypoint.
    pub entrypoint: Option<Vec<String>>,
    /// The command (the entrypoint's arguments); placeholders of [`Vars`] expanded, `{port}`
    /// being the container port. The server must listen on `0.0.0.0:{port}` inside.
    pub cmd: Vec<String>,
    /// Environment (values expanded).
    pub env: BTreeMap<String, String>,
    /// The port the server listens on inside the container (8000).
    pub container_port: u16,
    /// The port published on the host (8000).
    pub host_port: u16,
    /// The host address the port is published on (`127.0.0.1`: never on every interface).
    pub host_ip: String,
    /// GPUs (device ids) requested from `gpu_driver`; none: no device request.
    pub gpus: Vec<u32>,
    /// Whether `gpus` are requested as devices (true); false where the GPUs are simulated (no
    /// driver to ask): `{gpus}` still names them.
    pub request_gpus: bool,
    /// MB of the model on each of `gpus`, for `{tensor_split}` (empty: equal shares).
    pub tensor_split: Vec<u64>,
    /// The GPU driver of the device request (`nvidia`).
    pub gpu_driver: String,
    /// Bind mounts, `host:container[:ro]` (model caches).
    pub binds: Vec<String>,
    /// `/dev/shm` size, MB (vLLM's workers want more than Docker's 64 MB default).
    pub shm_size_mb: Option<u64>,
    /// Memory limit, MB (default: none); beyond it the kernel's OOM killer ends the container,
    /// which [`ManagedServer::state`] reports (`ExitInfo::oom_killed`).
    pub memory_mb: Option<u64>,
    /// Network mode; `host` shares the host's network (no publishing: the server must listen on
    /// `host_port` itself, on 127.0.0.1).
    pub network_mode: Option<String>,
    /// Owner label value (`horos`): [`DockerServer::cleanup_leftovers`] removes the managed
    /// containers of this owner only, so that two HOROS instances (or tests) never remove each
    /// other's containers.
    pub owner: String,
    /// More labels.
    pub labels: BTreeMap<String, String>,
    /// The model id, for `{model}` (default: the name).
    pub model: Option<String>,
    /// Longest wait for `/health` after a start, s (600).
    pub start_timeout_s: u64,
    /// Grace between SIGTERM and SIGKILL on stop, s (10).
    pub stop_timeout_s: u64,
    /// Health probe settings.
    pub probe: ProbeConfig,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            name: "server".to_owned(),
            image: String::new(),
            entrypoint: None,
            cmd: Vec::new(),
            env: BTreeMap::new(),
            container_port: 8000,
            host_port: 8000,
            host_ip: "127.0.0.1".to_owned(),
            gpus: Vec::new(),
            request_gpus: true,
            tensor_split: Vec::new(),
            gpu_driver: "nvidia".to_owned(),
            binds: Vec::new(),
            shm_size_mb: None,
            memory_mb: None,
            network_mode: None,
            owner: "horos".to_owned(),
            labels: BTreeMap::new(),
            model: None,
            start_timeout_s: 600,
            stop_timeout_s: 10,
            probe: ProbeConfig::default(),
        }
    }
}

/// Connects to the local Docker engine: `socket`, else `DOCKER_HOST` when it is a `unix://`
/// address, else `/var/run/docker.sock`; the API version is negotiated down to the engine's
/// (an engine older than the client refuses a newer version).
pub async fn connect_docker(socket: Option<&str>) -> Result<Docker, ServerError> {
    let from_env = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| h.starts_with("unix://"));
    let path = socket
        .map(str::to_owned)
        .or(from_env)
        .unwrap_or_else(|| "/var/run/docker.sock".to_owned());
    let docker = Docker::connect_with_unix(&path, 120, bollard::API_DEFAULT_VERSION)?;
    Ok(docker.negotiate_version().await?)
}

fn mb_to_bytes(mb: u64) -> i64 {
    i64::try_from(mb.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX)
}

fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// A server container.
#[derive(Debug)]
pub struct DockerServer {
    docker: Docker,
    config: DockerConfig,
    container: String,
    cmd: Vec<String>,
    env: Vec<String>,
    url: String,
    probe: Probe,
    lifecycle: Lifecycle,
    /// The current container's id (a std mutex, never held across an `.await`).
    id: Mutex<Option<String>>,
}

impl DockerServer {
    /// A server for `config` on `docker` (not started: call [`ManagedServer::start`]).
    pub fn new(docker: Docker, config: DockerConfig) -> Result<DockerServer, ServerError> {
        if config.image.is_empty() {
            return Err(ServerError::Config(format!("{}: no image", config.name)));
        }
        if config.host_port == 0 || config.container_port == 0 {
            return Err(ServerError::Config(format!(
                "{}: port 0 (the URL must be known before the start: pick a port)",
                config.name
            )));
        }
        let host_net = config.network_mode.as_deref() == Some("host");
        let port = if host_net {
            config.host_port
        } else {
            config.container_port
        };
        let vars = Vars {
            port,
            host_port: config.host_port,
            gpus: config.gpus.clone(),
            name: config.name.clone(),
            model: config.model.clone().unwrap_or_else(|| config.name.clone()),
            tensor_split: config.tensor_split.clone(),
        };
        let cmd = vars.expand_all(&config.cmd);
        let env = config
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", vars.expand(v)))
            .collect();
        let host = if config.host_ip == "0.0.0.0" {
            "127.0.0.1"
        } else {
            &config.host_ip
        };
        let url = format!("http://{host}:{}", config.host_port);
        let probe = Probe::new(&url, config.probe.clone().for_command(&config.cmd))?;
        let container = if config.owner == "horos" {
            format!("horos-{}", sanitize(&config.name))
        } else {
            format!(
                "horos-{}-{}",
                sanitize(&config.owner),
                sanitize(&config.name)
            )
        };
        Ok(DockerServer {
            docker,
            container,
            cmd,
            env,
            url,
            probe,
            lifecycle: Lifecycle::default(),
            id: Mutex::new(None),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    /// The container's name.
    pub fn container_name(&self) -> &str {
        &self.container
    }

    /// The current container's id.
    pub fn container_id(&self) -> Option<String> {
        self.id.lock().ok().and_then(|g| g.clone())
    }

    /// The engine connection.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The creation request (labels, published port, device requests).
    pub fn create_body(&self) -> ContainerCreateBody {
        let mut labels: HashMap<String, String> = self
            .config
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(LABEL_MANAGED.to_owned(), "true".to_owned());
        labels.insert(LABEL_NAME.to_owned(), self.config.name.clone());
        labels.insert(LABEL_OWNER.to_owned(), self.config.owner.clone());
        let host_net = self.config.network_mode.as_deref() == Some("host");
        let port_key = format!("{}/tcp", self.config.container_port);
        let (exposed, bindings) = if host_net {
            (None, None)
        } else {
            let binding = PortBinding {
                host_ip: Some(self.config.host_ip.clone()),
                host_port: Some(self.config.host_port.to_string()),
            };
            (
                Some(vec![port_key.clone()]),
                Some(HashMap::from([(port_key, Some(vec![binding]))])),
            )
        };
        let device_requests =
            (self.config.request_gpus && !self.config.gpus.is_empty()).then(|| {
                vec![DeviceRequest {
                    driver: Some(self.config.gpu_driver.clone()),
                    device_ids: Some(self.config.gpus.iter().map(u32::to_string).collect()),
                    capabilities: Some(vec![vec!["gpu".to_owned()]]),
                    ..DeviceRequest::default()
                }]
            });
        ContainerCreateBody {
            image: Some(self.config.image.clone()),
            entrypoint: self.config.entrypoint.clone(),
            cmd: (!self.cmd.is_empty()).then(|| self.cmd.clone()),
            env: (!self.env.is_empty()).then(|| self.env.clone()),
            labels: Some(labels),
            exposed_ports: exposed,
            stop_timeout: Some(self.config.stop_timeout_s as i64),
            host_config: Some(HostConfig {
                port_bindings: bindings,
                device_requests,
                binds: (!self.config.binds.is_empty()).then(|| self.config.binds.clone()),
                shm_size: self.config.shm_size_mb.map(mb_to_bytes),
                memory: self.config.memory_mb.map(mb_to_bytes),
                // No swap beyond the limit: an engine swapping is as good as hung.
                memory_swap: self.config.memory_mb.map(mb_to_bytes),
                network_mode: self.config.network_mode.clone(),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        }
    }

    /// Removes the containers this crate labelled for this server's owner
    /// ([`DockerConfig::owner`]) that an earlier run left behind (running or not), except this
    /// server's current one. Returns their names.
    pub async fn cleanup_leftovers(&self) -> Result<Vec<String>, ServerError> {
        let keep = self.container_id();
        remove_managed(&self.docker, &self.config.owner, keep.as_deref()).await
    }

    /// The last `lines` lines of the container's output.
    pub async fn log_tail(&self, lines: usize) -> String {
        use futures_core::Stream;
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: lines.to_string(),
            ..LogsOptions::default()
        };
        let stream = self.docker.logs(&self.container, Some(options));
        let mut stream = std::pin::pin!(stream);
        let mut out = String::new();
        while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
            match item {
                Ok(chunk) => out.push_str(&chunk.to_string()),
                Err(_) => break,
            }
            if out.len() > 16 * 1024 {
                break;
            }
        }
        out.trim().to_owned()
    }

    async fn remove_container(&self) -> Result<(), ServerError> {
        let options = RemoveContainerOptions {
            force: true,
            ..RemoveContainerOptions::default()
        };
        match self
            .docker
            .remove_container(&self.container, Some(options))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // 409: a removal already in progress (e.g. after a kill with auto-removal).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn start_locked(&self) -> Result<(), ServerError> {
        // A fresh container each time: a restart after a crash starts from the image, and a
        // container of an earlier run with this name is replaced.
        self.remove_container().await?;
        if let Ok(mut id) = self.id.lock() {
            *id = None;
        }
        let options = CreateContainerOptions {
            name: Some(self.container.clone()),
            ..CreateContainerOptions::default()
        };
        let created = match self
            .docker
            .create_container(Some(options), self.create_body())
            .await
        {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => {
                return Err(ServerError::Docker(format!(
                    "image {} not found locally (images are never pulled; build it, e.g. \
                     scripts/build_llama_image.sh): {e}",
                    self.config.image
                )));
            }
            Err(e) => return Err(e.into()),
        };
        if let Ok(mut id) = self.id.lock() {
            *id = Some(created.id.clone());
        }
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let _ = self.remove_container().await;
            return Err(e.into());
        }
        self.lifecycle.bump();
        tracing::info!(server = %self.config.name, container = %self.container, "started");
        let waited = Duration::from_secs(self.config.start_timeout_s);
        let deadline = tokio::time::Instant::now() + waited;
        let mut pause = Duration::from_millis(50);
        loop {
            if let RunState::Exited(info) = self.state().await {
                let _ = self.remove_container().await;
                return Err(ServerError::NotRunning(format!(
                    "{} exited at start-up: {info}",
                    self.config.name
                )));
            }
            let last = match self.probe.health().await {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                let _ = self.remove_container().await;
                return Err(ServerError::StartTimeout { waited, last });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

/// Removes every container labelled [`LABEL_MANAGED`] with owner `owner`, except `keep` (an
/// id). Returns the removed containers' names.
pub async fn remove_managed(
    docker: &Docker,
    owner: &str,
    keep: Option<&str>,
) -> Result<Vec<String>, ServerError> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![
            format!("{LABEL_MANAGED}=true"),
            format!("{LABEL_OWNER}={owner}"),
        ],
    )]);
    let options = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..ListContainersOptions::default()
    };
    let mut removed = Vec::new();
    for c in docker.list_containers(Some(options)).await? {
        let Some(id) = c.id else { continue };
        if keep == Some(id.as_str()) {
            continue;
        }
        let name = c
            .names
            .and_then(|n| n.first().map(|n| n.trim_start_matches('/').to_owned()))
            .unwrap_or_else(|| id.clone());
        let options = RemoveContainerOptions {
            force: true,
            ..RemoveContainerOptions::default()
        };
        match docker.remove_container(&id, Some(options)).await {
            Ok(()) => {
                tracing::warn!(container = %name, "removed a leftover container");
                removed.push(name);
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

#[async_trait]
impl ManagedServer for DockerServer {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    fn probe(&self) -> &Probe {
        &self.probe
    }

    fn generation(&self) -> u64 {
        self.lifecycle.generation()
    }

    /// From its command, a sleep or a wake given its start time-out.
    fn sleep_api(&self) -> Option<SleepApi> {
        SleepApi::for_command(
            &self.cmd,
            Duration::from_secs(self.config.start_timeout_s.max(1)),
        )
    }

    async fn start(&self) -> Result<(), ServerError> {
        let _guard = self.lifecycle.lock.lock().await;
        self.start_locked().await
    }

    async fn stop(&self) -> Result<(), ServerError> {
        let _guard = self.lifecycle.lock.lock().await;
        let options = StopContainerOptions {
            t: Some(self.config.stop_timeout_s.min(i32::MAX as u64) as i32),
            ..StopContainerOptions::default()
        };
        match self
            .docker
            .stop_container(&self.container, Some(options))
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            // 304: already stopped.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => {}
            Err(e) => return Err(e.into()),
        }
        self.remove_container().await?;
        if let Ok(mut id) = self.id.lock() {
            *id = None;
        }
        tracing::info!(server = %self.config.name, container = %self.container, "stopped");
        Ok(())
    }

    async fn state(&self) -> RunState {
        let inspected = self
            .docker
            .inspect_container(&self.container, None::<InspectContainerOptions>)
            .await;
        let info = match inspected {
            Ok(info) => info,
            Err(e) if is_not_found(&e) => {
                return if self.container_id().is_some() {
                    RunState::Exited(ExitInfo {
                        detail: "the container is gone".into(),
                        ..ExitInfo::default()
                    })
                } else {
                    RunState::NotStarted
                };
            }
            Err(e) => {
                // An engine hiccup is no reason to restart a server that may be fine.
                tracing::warn!(server = %self.config.name, error = %e, "cannot inspect the container");
                return RunState::Unknown(format!("cannot inspect the container: {e}"));
            }
        };
        let state = info.state.unwrap_or_default();
        if state.running == Some(true) && state.restarting != Some(true) {
            return RunState::Running;
        }
        let mut detail = state.error.unwrap_or_default();
        let tail = self.log_tail(20).await;
        if !tail.is_empty() {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            detail.push_str("last output: ");
            detail.push_str(&tail);
        }
        RunState::Exited(ExitInfo {
            code: state.exit_code,
            signal: None,
            oom_killed: state.oom_killed == Some(true),
            detail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that is never used to call (bollard checks only that the socket path exists).
    fn offline_docker() -> Docker {
        let path = std::env::temp_dir().join("horos-servers-offline.sock");
        std::fs::write(&path, b"").unwrap();
        Docker::connect_with_unix(path.to_str().unwrap(), 5, bollard::API_DEFAULT_VERSION).unwrap()
    }

    fn server(config: DockerConfig) -> DockerServer {
        DockerServer::new(offline_docker(), config).unwrap()
    }

    #[test]
    fn body_has_labels_loopback_port_and_gpus() {
        let s = server(DockerConfig {
            name: "think".into(),
            image: "img".into(),
            cmd: vec!["--port".into(), "{port}".into()],
            container_port: 8080,
            host_port: 18002,
            gpus: vec![0, 1],
            owner: "test".into(),
            ..DockerConfig::default()
        });
        assert_eq!(s.container_name(), "horos-test-think");
        assert_eq!(s.url(), "http://127.0.0.1:18002");
        let b = s.create_body();
        assert_eq!(b.cmd.unwrap(), ["--port", "8080"]);
        let labels = b.labels.unwrap();
        assert_eq!(labels[LABEL_MANAGED], "true");
        assert_eq!(labels[LABEL_NAME], "think");
        assert_eq!(labels[LABEL_OWNER], "test");
        let hc = b.host_config.unwrap();
        let binding = &hc.port_bindings.unwrap()["8080/tcp"].clone().unwrap()[0];
        assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(binding.host_port.as_deref(), Some("18002"));
        let dr = &hc.device_requests.unwrap()[0];
        assert_eq!(dr.driver.as_deref(), Some("nvidia"));
        assert_eq!(dr.device_ids.clone().unwrap(), ["0", "1"]);
    }

    #[test]
    fn host_network_publishes_nothing_and_uses_the_host_port() {
        let s = server(DockerConfig {
            name: "x".into(),
            image: "img".into(),
            cmd: vec!["{port}".into()],
            host_port: 18003,
            network_mode: Some("host".into()),
            ..DockerConfig::default()
        });
        assert_eq!(s.container_name(), "horos-x");
        let b = s.create_body();
        assert_eq!(b.cmd.unwrap(), ["18003"]);
        assert!(b.exposed_ports.is_none());
        assert!(b.host_config.unwrap().device_requests.is_none());
    }

    #[test]
    fn simulated_gpus_are_named_but_not_requested() {
        let s = server(DockerConfig {
            name: "x".into(),
            image: "img".into(),
            cmd: vec!["--gpus".into(), "{gpus}".into()],
            gpus: vec![1],
            request_gpus: false,
            ..DockerConfig::default()
        });
        let b = s.create_body();
        assert_eq!(b.cmd.unwrap(), ["--gpus", "1"]);
        assert!(b.host_config.unwrap().device_requests.is_none());
    }

    #[test]
    fn no_image_or_port_zero_is_a_config_error() {
        assert!(DockerServer::new(offline_docker(), DockerConfig::default()).is_err());
        let zero = DockerConfig {
            image: "img".into(),
            host_port: 0,
            ..DockerConfig::default()
        };
        assert!(DockerServer::new(offline_docker(), zero).is_err());
    }
}
