//! `[coordinator]`, its `[[coordinator.model]]` and `[coordinator.pool]`.

use std::path::PathBuf;

use horos_servers::kinds::{self, BackendKind, Launch};
use serde::Deserialize;

use super::lane::{DockerSection, LaneSection};
use super::{from_table, take_keys};

/// `[coordinator]`: the OpenAI-compatible endpoint. Its keys are horos-coordinator's own
/// [`CoordinatorConfig`](horos_coordinator::CoordinatorConfig) (every one of them, with its
/// defaults and checks: `bind`, `max_body_bytes`, `tasks`, `allow_cloud_fallback`, ...) plus the
/// upstreams the binary adds: every lane with a `model` is an upstream of that name,
/// `[[coordinator.model]]` adds servers that no lane feeds, `[coordinator.pool]` models loaded on
/// demand. `state_path` and `watch_queues` are the binary's: the queue database and the lanes.
#[derive(Debug, Clone, Default)]
pub struct CoordinatorSection {
    /// The coordinator's own settings.
    pub settings: horos_coordinator::CoordinatorConfig,
    /// Extra upstreams.
    pub models: Vec<UpstreamSection>,
    /// Models loaded on demand and evicted for more important ones.
    pub pool: Option<PoolSection>,
    /// Also serves the control plane (`/status`, `/metrics`, `/api/*`, `/health`) here, from
    /// a thread and runtime of its own: it stays fast even while requests saturate the CPU.
    pub control_bind: Option<std::net::SocketAddr>,
}

/// The keys of `[coordinator]` that are the binary's, not the coordinator's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CoordinatorUpstreams {
    #[serde(default, rename = "model")]
    models: Vec<UpstreamSection>,
    #[serde(default)]
    pool: Option<PoolSection>,
    #[serde(default)]
    control_bind: Option<std::net::SocketAddr>,
}

impl<'de> Deserialize<'de> for CoordinatorSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        for derived in ["state_path", "watch_queues"] {
            if table.contains_key(derived) {
                return Err(serde::de::Error::custom(format!(
                    "`{derived}` is set by horos-ref (from `database` and the lanes), not in \
                     [coordinator]"
                )));
            }
        }
        let upstreams: CoordinatorUpstreams =
            from_table(take_keys(&mut table, &["model", "pool", "control_bind"]))?;
        Ok(CoordinatorSection {
            settings: from_table(table)?,
            models: upstreams.models,
            pool: upstreams.pool,
            control_bind: upstreams.control_bind,
        })
    }
}

/// `[coordinator.pool]`: gpu-alloc's model pool behind the coordinator. Each
/// `[[coordinator.pool.model]]` is a server the pool starts when a request needs it (on a port
/// of `port_min..=port_max`, on the GPUs it picks), stops when its stay-warm time is over, and
/// evicts for a more important request when memory is short. Its keys are gpu-alloc's own
/// [`PoolConfig`](horos_gpu_alloc::pool::PoolConfig) (`port_min`, `port_max`, `margin_mb`,
/// `[coordinator.pool.stay_warm]`, ...) plus the binary's: the memory budget, the ledger, the
/// servers' start time-out and the models.
#[derive(Debug, Clone)]
pub struct PoolSection {
    /// gpu-alloc's settings as written.
    pub settings: horos_gpu_alloc::pool::PoolConfig,
    /// Memory the pool may fill on each GPU, MB. Where NVML answers it caps each GPU's
    /// capacity (the driver's free memory is checked as well); without NVML it is required and
    /// is a budget the pool accounts for itself, e.g. the RAM given to CPU servers.
    pub memory_mb: Option<u64>,
    /// GPUs of the budget without NVML.
    pub gpus: u32,
    /// The VRAM ledger as written here (an older place for `[gpus] ledger`; the two may not
    /// differ). See [`Config::ledger_path`](super::Config::ledger_path).
    pub ledger: Option<PathBuf>,
    /// How long a server may take to become healthy, seconds.
    pub start_timeout_s: u64,
    /// The models.
    pub models: Vec<PooledModelSection>,
}

/// The keys of `[coordinator.pool]` that are the binary's, not the pool's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolBinaryKeys {
    #[serde(default)]
    memory_mb: Option<u64>,
    #[serde(default = "default_pool_gpus")]
    gpus: u32,
    #[serde(default)]
    ledger: Option<PathBuf>,
    #[serde(default = "default_pool_start")]
    start_timeout_s: u64,
    #[serde(rename = "model", default)]
    models: Vec<PooledModelSection>,
}

impl<'de> Deserialize<'de> for PoolSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let binary: PoolBinaryKeys = from_table(take_keys(
            &mut table,
            &["memory_mb", "gpus", "ledger", "start_timeout_s", "model"],
        ))?;
        Ok(PoolSection {
            settings: from_table(table)?,
            memory_mb: binary.memory_mb,
            gpus: binary.gpus,
            ledger: binary.ledger,
            start_timeout_s: binary.start_timeout_s,
            models: binary.models,
        })
    }
}

/// `[[coordinator.pool.model]]`: one model the pool serves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PooledModelSection {
    /// The model name clients ask for.
    pub name: String,
    /// The server's command; `{port}`, `{gpus}` and `{model}` are expanded at each start.
    /// Without one, `backend` builds it.
    #[serde(default)]
    pub command: Vec<String>,
    /// A kind of server of horos-servers' registry (`llama-server`, `vllm`, `diffusers`) that
    /// builds the command from `weights` (instead of `command`), or `docker`: a container of
    /// the user's own (`docker`).
    #[serde(default)]
    pub backend: Option<String>,
    /// The server as a Docker container of an image built locally (never pulled), the `docker`
    /// kind (`backend = "docker"` may be left out): its port published on 127.0.0.1 at the
    /// port the pool hands out, the GPUs the pool picks requested as devices (where NVML reads
    /// them). Started, health-checked, evicted and booked in the VRAM ledger like any pooled
    /// model.
    #[serde(default)]
    pub docker: Option<DockerSection>,
    /// The request paths the server serves (`/v1/chat/completions`, ...); default: its kind's
    /// (the `docker` kind: every path the coordinator forwards); without a kind, every path is
    /// forwarded. A request for another path is refused before the model is loaded.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// The path its health check asks (default: its kind's, `/health`).
    #[serde(default)]
    pub health_path: Option<String>,
    /// The backend's executable (default: the kind's own name, found on `PATH`).
    #[serde(default)]
    pub binary: Option<String>,
    /// Memory it takes, MB (else estimated from `weights`, else from the name).
    #[serde(default)]
    pub vram_mb: Option<u64>,
    /// Its weight file or directory for the estimate: a GGUF file's header (weights and
    /// attention cache), else the files' sizes (GGUF ×1.1, safetensors ×1.3).
    #[serde(default)]
    pub weights: Option<PathBuf>,
    /// `llm`, `vision`, `diffusion`, `embedding` or `other` (selects the stay-warm time).
    #[serde(default)]
    pub category: horos_gpu_alloc::pool::Category,
    /// Never evicted nor unloaded when idle.
    #[serde(default)]
    pub pin: bool,
    /// Overrides the category's stay-warm time, seconds.
    #[serde(default)]
    pub stay_warm_s: Option<u64>,
    /// Added to the server's environment.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

impl PooledModelSection {
    /// Its backend kind: `backend`, or `docker` for a model with a `docker` table; `None`: a
    /// command of its own.
    pub fn kind(&self) -> Option<&'static BackendKind> {
        match (&self.backend, &self.docker) {
            (Some(name), _) => kinds::kind(name),
            (None, Some(_)) => kinds::kind("docker"),
            (None, None) => None,
        }
    }

    /// The request paths its server serves: its own `paths`, else its kind's; `None`: not
    /// declared (every request is forwarded).
    pub fn paths(&self) -> Option<Vec<String>> {
        self.paths.clone().or_else(|| {
            self.kind()
                .filter(|k| !k.paths.is_empty())
                .map(|k| k.paths.iter().map(|p| (*p).to_owned()).collect())
        })
    }

    /// Checks the model's server settings (the `i`-th model).
    fn validate(&self, i: usize) -> Result<(), String> {
        let at = format!("coordinator.pool.model[{i}]");
        // Exactly one of a command of its own and a kind.
        let kinded = self.backend.is_some() || self.docker.is_some();
        if self.name.is_empty() || self.command.is_empty() != kinded {
            return Err(format!(
                "{at}: needs a name and either a command or a backend (a kind, or a docker image)"
            ));
        }
        if let Some(b) = &self.backend
            && kinds::kind(b).is_none()
        {
            return Err(format!(
                "{at}.backend `{b}` is not one of {:?}",
                kinds::kind_names()
            ));
        }
        match self.kind().map(|k| (k.name, k.launch)) {
            Some((name, Launch::Process { .. })) => {
                if self.docker.is_some() {
                    return Err(format!(
                        "{at}: a docker table runs the model in a container: not with backend `{name}`"
                    ));
                }
                if self.weights.is_none() {
                    return Err(format!(
                        "{at}: backend `{name}` needs weights (a GGUF file, a model directory or name)"
                    ));
                }
            }
            Some((name, Launch::Container)) => {
                let Some(d) = &self.docker else {
                    return Err(format!(
                        "{at}: backend `{name}` needs a docker table with its image"
                    ));
                };
                if d.image.is_empty() {
                    return Err(format!("{at}.docker.image is empty"));
                }
                if self.binary.is_some() {
                    return Err(format!(
                        "{at}: binary is for a kind run as a process, not a container"
                    ));
                }
            }
            None => {}
        }
        if let Some(paths) = &self.paths
            && (paths.is_empty() || paths.iter().any(|p| !p.starts_with('/')))
        {
            return Err(format!(
                "{at}.paths: request paths, each beginning with `/` (at least one)"
            ));
        }
        if self
            .health_path
            .as_ref()
            .is_some_and(|p| !p.starts_with('/'))
        {
            return Err(format!("{at}.health_path must begin with `/`"));
        }
        Ok(())
    }
}

fn default_pool_gpus() -> u32 {
    1
}
fn default_pool_start() -> u64 {
    600
}

/// `[[coordinator.model]]`: a model served at a fixed URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    /// The model name clients ask for.
    pub name: String,
    /// The server's base URL.
    pub url: String,
}

impl CoordinatorSection {
    pub(super) fn validate(&self, lanes: &[LaneSection]) -> Result<(), String> {
        self.settings
            .validate()
            .map_err(|e| format!("coordinator.{e}"))?;
        for (i, m) in self.models.iter().enumerate() {
            if m.name.is_empty() || !m.url.starts_with("http://") {
                return Err(format!(
                    "coordinator.model[{i}]: needs a name and an http:// url"
                ));
            }
        }
        let Some(p) = &self.pool else {
            return Ok(());
        };
        p.settings
            .validate()
            .map_err(|e| format!("coordinator.pool.{e}"))?;
        if p.memory_mb == Some(0) || p.gpus == 0 {
            return Err("coordinator.pool: memory_mb and gpus must be at least 1".into());
        }
        let mut names = std::collections::HashSet::new();
        for (i, m) in p.models.iter().enumerate() {
            m.validate(i)?;
            let elsewhere = self.models.iter().any(|s| s.name == m.name)
                || lanes.iter().any(|l| l.model.as_deref() == Some(&m.name));
            if !names.insert(m.name.as_str()) || elsewhere {
                return Err(format!(
                    "coordinator.pool.model[{i}]: `{}` is served twice",
                    m.name
                ));
            }
        }
        Ok(())
    }
}
