//! The settings of a server as a configuration file writes them: a container
//! ([`DockerSettings`]), the `vllm serve` shorthand ([`VllmSettings`]), a lane's health checks
//! ([`lane_probe_defaults`], [`deserialize_lane_probe`]) and the server of a pooled model
//! ([`ModelServerSettings`]: its command, or a kind of the registry, or a container, turned into
//! the [`BackendSettings`](crate::BackendSettings) the pool's factory reads).

use std::collections::BTreeMap;
use std::path::Path;

use horos_server_control::settings::{InvalidSettings, Problem, Table, from_table};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::kinds::{self, BackendKind, KindArgs, Launch, ModelRole};
use crate::probe::ProbeConfig;

/// A server as a Docker container (the image is built locally; nothing is pulled): a lane's
/// `[lane.docker]`, a pooled model's `docker` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSettings {
    /// The image, e.g. `horos/llama-server:local` (scripts/build_llama_image.sh).
    pub image: String,
    /// The container's command (placeholders `{port}`, `{gpus}`, `{model}` expanded).
    #[serde(default)]
    pub cmd: Vec<String>,
    /// The port the server listens on inside the container (published on 127.0.0.1 at the lane
    /// URL's port, or at the port the model pool hands out).
    #[serde(default = "default_container_port")]
    pub container_port: u16,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Bind mounts `host:container[:ro]`.
    #[serde(default)]
    pub binds: Vec<String>,
    /// Memory limit, MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
}

fn default_container_port() -> u16 {
    8000
}

/// `vllm serve MODEL --port PORT` with HOROS's defaults (`--gpu-memory-utilization 0.75
/// --max-model-len 16384 --max-num-seqs 8 --enable-chunked-prefill --max-num-batched-tokens
/// 2048`), each overridable: a lane's `[lane.vllm]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmSettings {
    /// The model (Hugging Face id or local directory).
    pub model: String,
    /// The program.
    #[serde(default = "default_vllm_program")]
    pub program: String,
    /// `--gpu-memory-utilization`.
    #[serde(default = "default_gpu_util")]
    pub gpu_memory_utilization: f64,
    /// `--max-model-len`.
    #[serde(default = "default_max_len")]
    pub max_model_len: u32,
    /// `--max-num-seqs` (the feeder's batch size should match it, or be twice it with refill).
    #[serde(default = "default_max_seqs")]
    pub max_num_seqs: u32,
    /// `--enable-chunked-prefill`.
    #[serde(default = "default_true")]
    pub chunked_prefill: bool,
    /// `--max-num-batched-tokens`.
    #[serde(default = "default_batched_tokens")]
    pub max_num_batched_tokens: u32,
    /// More arguments, appended.
    #[serde(default)]
    pub args: Vec<String>,
}

fn default_vllm_program() -> String {
    "vllm".to_owned()
}
fn default_gpu_util() -> f64 {
    0.75
}
fn default_max_len() -> u32 {
    16384
}
fn default_max_seqs() -> u32 {
    8
}
fn default_true() -> bool {
    true
}
fn default_batched_tokens() -> u32 {
    2048
}

impl VllmSettings {
    /// The command line, serving as `served_name` on the server's `{port}` (expanded when it
    /// starts: one lane may run an instance per GPU, each on its own port).
    pub fn command(&self, served_name: Option<&str>) -> Vec<String> {
        let mut c = vec![
            self.program.clone(),
            "serve".to_owned(),
            self.model.clone(),
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            "{port}".to_owned(),
            "--gpu-memory-utilization".to_owned(),
            self.gpu_memory_utilization.to_string(),
            "--max-model-len".to_owned(),
            self.max_model_len.to_string(),
            "--max-num-seqs".to_owned(),
            self.max_num_seqs.to_string(),
            "--max-num-batched-tokens".to_owned(),
            self.max_num_batched_tokens.to_string(),
        ];
        if self.chunked_prefill {
            c.push("--enable-chunked-prefill".to_owned());
        }
        if let Some(name) = served_name {
            c.push("--served-model-name".to_owned());
            c.push(name.to_owned());
        }
        c.extend(self.args.iter().cloned());
        c
    }
}

/// A lane's health checks (`[lane.probe]`): [`ProbeConfig`] as it is (every key of it:
/// `inference_every`, `inference_timeout_ms`, `health_timeout_ms`, `kind`, `model`, `prompt`),
/// with the lane's own defaults where the section is silent: an inference on every check, 30 s
/// to answer it (a lane's server is often saturated, and the probe queues behind its batch).
pub fn lane_probe_defaults() -> ProbeConfig {
    ProbeConfig {
        inference_every: 1,
        inference_timeout_ms: 30_000,
        ..ProbeConfig::default()
    }
}

/// Reads `[lane.probe]`: the keys written over [`lane_probe_defaults`] (a `deserialize_with`).
pub fn deserialize_lane_probe<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<ProbeConfig, D::Error> {
    let written = Table::deserialize(d)?;
    let mut table = Table::try_from(lane_probe_defaults()).map_err(serde::de::Error::custom)?;
    table.extend(written);
    from_table(table)
}

/// The server of a model loaded on demand by a model pool: a command of its own, a kind of the
/// registry ([`kinds`]) that builds the command from the model's weights, or a container of
/// the user's own (the `docker` kind). The model's other keys (its name, weights, category) are
/// the pool's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelServerSettings {
    /// The server's command; `{port}`, `{gpus}` and `{model}` are expanded at each start.
    /// Without one, `backend` builds it.
    #[serde(default)]
    pub command: Vec<String>,
    /// A kind of server of the registry (`llama-server`, `vllm`, `diffusers`, `tts`) that builds the
    /// command from the model's weights (instead of `command`), or `docker`: a container of the
    /// user's own (`docker`).
    #[serde(default)]
    pub backend: Option<String>,
    /// The server as a Docker container of an image built locally (never pulled), the `docker`
    /// kind (`backend = "docker"` may be left out): its port published on 127.0.0.1 at the
    /// port the pool hands out, the GPUs the pool picks requested as devices (where NVML reads
    /// them). Started, health-checked, evicted and booked in the VRAM ledger like any pooled
    /// model.
    #[serde(default)]
    pub docker: Option<DockerSettings>,
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
    /// Added to the server's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl ModelServerSettings {
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

    /// Checks the server of the model `name` with `weights`; `at` names it in the message
    /// (`coordinator.pool.model[0]`).
    pub fn validate(
        &self,
        at: &str,
        name: &str,
        weights: Option<&Path>,
    ) -> Result<(), InvalidSettings> {
        self.check(at, name, weights).map_err(InvalidSettings)
    }

    fn check(&self, at: &str, name: &str, weights: Option<&Path>) -> Result<(), String> {
        // Exactly one of a command of its own and a kind.
        let kinded = self.backend.is_some() || self.docker.is_some();
        if name.is_empty() || self.command.is_empty() != kinded {
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
                if weights.is_none() {
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

    /// What is missing on this machine for the server of the model `name` with `weights`
    /// (`at` names it: `coordinator.pool.model[0]`): its command's program and model file
    /// ([`command_problems`](crate::discover::command_problems)), or its kind's executable
    /// (`binary`, else the kind's own name on `PATH`) and its weights where they are a path.
    pub fn problems(&self, at: &str, weights: Option<&Path>) -> Vec<Problem> {
        if !self.command.is_empty() {
            return crate::discover::command_problems(&format!("{at}.command"), &self.command);
        }
        let mut problems = Vec::new();
        if let Some(Launch::Process { binary, .. }) = self.kind().map(|k| k.launch) {
            let program = self.binary.as_deref().unwrap_or(binary);
            if crate::discover::program_path(program, std::env::var_os("PATH").as_deref()).is_none()
            {
                let key = if self.binary.is_some() {
                    format!("{at}.binary")
                } else {
                    format!("{at}.backend")
                };
                problems.push(crate::discover::program_problem(&key, program));
            }
            // A `tts` model's weights is a voice name, never a path.
            if self.backend.as_deref() != Some("tts")
                && let Some(w) = weights.and_then(Path::to_str)
            {
                problems.extend(crate::discover::model_path_problem(
                    &format!("{at}.weights"),
                    w,
                ));
            }
        }
        problems
    }

    /// The backend settings the pool's factory reads
    /// ([`BackendSettings`](crate::BackendSettings)) for a model in `role` with `weights`: its
    /// command (its own, or its kind's for its weights, the kind's files in `kind_dir`) or its
    /// container, its environment, and its health check (the kind's, the model's health path).
    pub fn backend_settings(
        &self,
        role: ModelRole,
        weights: Option<&Path>,
        kind_dir: &str,
    ) -> Value {
        let kind = self.kind();
        // What the health check's inference asks (none: the health path only, e.g. an image
        // worker): the kind's, else what the model's role answers.
        let probe = kind.map_or_else(|| kinds::by_role(role), |k| k.probe(role));
        let mut settings = json!({
            "env": self.env,
            "probe_kind": probe.unwrap_or_default(),
            "probe_inference_every": if probe.is_none() { Some(0) } else { None },
            "health_path": self.health_path.as_deref().or(kind.map(|k| k.health.path)),
        });
        let server = match (kind.map(|k| k.launch), &self.docker) {
            (Some(Launch::Container), Some(d)) => {
                let mut env = d.env.clone();
                env.extend(self.env.clone());
                json!({
                    "image": d.image,
                    "args": d.cmd,
                    "env": env,
                    "container_port": d.container_port,
                    "binds": d.binds,
                    "memory_mb": d.memory_mb,
                })
            }
            // A backend kind of the registry builds the command the model did not write.
            (Some(Launch::Process { binary, command }), _) if self.command.is_empty() => {
                json!({"command": command(&KindArgs {
                    binary: self.binary.as_deref().unwrap_or(binary),
                    weights: &weights
                        .map(|w| w.display().to_string())
                        .unwrap_or_default(),
                    role,
                    dir: kind_dir,
                })})
            }
            _ => json!({"command": self.command}),
        };
        if let (Some(all), Value::Object(server)) = (settings.as_object_mut(), server) {
            all.extend(server);
        }
        settings
    }
}

/// The owner label of this system's containers (`horos.owner`), which scopes the clean-up of
/// the containers an earlier run left ([`DockerServer::cleanup_leftovers`](crate::DockerServer::cleanup_leftovers),
/// [`remove_managed`](crate::remove_managed)) to one queue database, so two HOROS instances on
/// one machine never remove each other's containers. `database`: a SQLite file (its canonical
/// path counts), or with `shared = Some((url, node))` a database several nodes share, where each
/// node's containers are its own. Eight hex digits, the same for the same database and node.
pub fn container_owner(database: &Path, shared: Option<(&str, &str)>) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match shared {
        Some(url_and_node) => url_and_node.hash(&mut h),
        None => std::fs::canonicalize(database)
            .unwrap_or_else(|_| database.to_path_buf())
            .hash(&mut h),
    }
    format!("{:08x}", h.finish() as u32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::PathBuf;

    use super::*;
    use crate::{BackendSettings, InferenceKind};

    /// A pooled model's server from its keys, checked as the pool checks it (`weights` is the
    /// pool's key, taken out first).
    fn model(toml: &str) -> Result<(ModelServerSettings, Option<PathBuf>), String> {
        let mut table: Table = toml.parse().map_err(|e| format!("{e}"))?;
        let weights = table
            .remove("weights")
            .and_then(|w| w.as_str().map(PathBuf::from));
        let server: ModelServerSettings =
            from_table(table).map_err(|e: toml::de::Error| e.to_string())?;
        server.validate("coordinator.pool.model[0]", "m", weights.as_deref())?;
        Ok((server, weights))
    }

    fn parsed(toml: &str, role: ModelRole) -> BackendSettings {
        let (m, weights) = model(toml).unwrap();
        BackendSettings::parse(&m.backend_settings(role, weights.as_deref(), "/run/kinds")).unwrap()
    }

    /// A container model's settings name its image (so the factory runs it as a container),
    /// its command, port, mounts and environment (the model's over the container's), and its
    /// own health path.
    #[test]
    fn the_containers_owner_is_one_database_and_node() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("horos.db");
        std::fs::write(&db, b"").unwrap();
        let owner = container_owner(&db, None);
        assert_eq!(owner.len(), 8);
        assert!(owner.chars().all(|c| c.is_ascii_hexdigit()), "{owner}");
        // The same file by another path: the same owner.
        let other_path = dir.path().join(".").join("horos.db");
        assert_eq!(container_owner(&other_path, None), owner);
        assert_ne!(container_owner(&dir.path().join("other.db"), None), owner);
        // A shared database: each node's own.
        let url = "postgres://db/horos";
        let a = container_owner(Path::new(url), Some((url, "a")));
        assert_eq!(a, container_owner(Path::new(url), Some((url, "a"))));
        assert_ne!(a, container_owner(Path::new(url), Some((url, "b"))));
        // The label is stable across releases (containers of an earlier run are found).
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (url, "a".to_owned()).hash(&mut h);
        assert_eq!(a, format!("{:08x}", h.finish() as u32));
    }

    #[test]
    fn a_container_models_settings_name_its_image_and_health_path() {
        let s = parsed(
            "health_path = \"/v1/models\"\nenv = { A = \"model\" }\n[docker]\nimage = \"mine:local\"\n\
             cmd = [\"--port\", \"{port}\"]\ncontainer_port = 9000\nbinds = [\"/m:/m:ro\"]\n\
             env = { A = \"container\", B = \"container\" }\n",
            ModelRole::Generate,
        );
        assert_eq!(s.image.as_deref(), Some("mine:local"));
        assert_eq!(s.command, None);
        assert_eq!(s.args, ["--port", "{port}"]);
        assert_eq!(s.container_port, Some(9000));
        assert_eq!(s.binds, ["/m:/m:ro"]);
        assert_eq!(
            (s.env["A"].as_str(), s.env["B"].as_str()),
            ("model", "container")
        );
        assert_eq!(s.health_path.as_deref(), Some("/v1/models"));
        assert_eq!(s.probe_kind, Some(InferenceKind::Chat));
    }

    /// A kind decides the health check: the image worker's is its health path alone, an
    /// embedding model of llama-server is asked for an embedding.
    #[test]
    fn the_kind_decides_the_health_check() {
        let s = parsed(
            "backend = \"diffusers\"\nweights = \"/p\"\n",
            ModelRole::Image,
        );
        assert_eq!(s.probe_inference_every, Some(0));
        assert_eq!(s.health_path.as_deref(), Some("/health"));
        let command = s.command.unwrap();
        assert_eq!(command[1], "/run/kinds/diffusers_worker.py");
        assert_eq!(s.image, None);
        let s = parsed(
            "backend = \"llama-server\"\nweights = \"/q.gguf\"\n",
            ModelRole::Embed,
        );
        assert_eq!(s.probe_kind, Some(InferenceKind::Embedding));
        assert_eq!(s.probe_inference_every, None);
        let s = parsed("command = [\"srv\", \"{port}\"]\n", ModelRole::Generate);
        assert_eq!(s.command.unwrap(), ["srv", "{port}"]);
        assert_eq!(s.health_path, None);
        assert_eq!(s.probe_kind, Some(InferenceKind::Chat));
        // The speech worker: its health path only, its default voice from the weights.
        let s = parsed(
            "backend = \"tts\"\nweights = \"en-us\"\n",
            ModelRole::Speech,
        );
        assert_eq!(s.probe_inference_every, Some(0));
        let command = s.command.unwrap();
        assert_eq!(command[1], "/run/kinds/tts_worker.py");
        assert_eq!(command.last().map(String::as_str), Some("en-us"));
        // A command of its own serving images is not asked for a chat either.
        let s = parsed("command = [\"srv\"]\n", ModelRole::Image);
        assert_eq!(s.probe_inference_every, Some(0));
    }

    /// A pooled model names a command, a backend kind of the registry (with weights), or a
    /// container (the `docker` kind, with its image); not two of them and not none.
    #[test]
    fn a_pooled_model_names_a_command_or_a_backend_kind() {
        let (m, _) = model("backend = \"llama-server\"\nweights = \"/m/q.gguf\"\n").unwrap();
        assert_eq!(m.backend.as_deref(), Some("llama-server"));
        assert_eq!(m.kind().unwrap().name, "llama-server");
        model("command = [\"srv\"]\n").unwrap();
        // A container of the user's own: the docker kind, with or without `backend = "docker"`.
        let (m, _) =
            model("docker = { image = \"mine:local\", cmd = [\"--port\", \"{port}\"] }\n").unwrap();
        assert_eq!(m.kind().unwrap().name, "docker");
        assert_eq!(m.docker.as_ref().unwrap().container_port, 8000);
        let (m, _) = model(
            "backend = \"docker\"\npaths = [\"/v1/embeddings\"]\nhealth_path = \"/ready\"\n\
             [docker]\nimage = \"mine:local\"\n",
        )
        .unwrap();
        assert_eq!(m.paths().unwrap(), ["/v1/embeddings"]);
        assert_eq!(m.health_path.as_deref(), Some("/ready"));
        for (model_toml, want) in [
            ("", "either a command or a backend"),
            (
                "command = [\"srv\"]\nbackend = \"vllm\"\nweights = \"w\"\n",
                "either a command or a backend",
            ),
            (
                "command = [\"srv\"]\ndocker = { image = \"x\" }\n",
                "either a command or a backend",
            ),
            ("backend = \"tgi\"\nweights = \"w\"\n", "is not one of"),
            ("backend = \"vllm\"\n", "needs weights"),
            ("backend = \"docker\"\n", "needs a docker table"),
            (
                "backend = \"vllm\"\nweights = \"w\"\ndocker = { image = \"x\" }\n",
                "not with backend `vllm`",
            ),
            ("docker = { image = \"\" }\n", "docker.image is empty"),
            (
                "docker = { image = \"x\" }\nbinary = \"/bin/x\"\n",
                "binary is for a kind run as a process",
            ),
            (
                "docker = { image = \"x\", pull = true }\n",
                "unknown field `pull`",
            ),
            ("command = [\"srv\"]\npaths = [\"v1/chat\"]\n", "paths"),
            ("command = [\"srv\"]\npaths = []\n", "paths"),
            (
                "command = [\"srv\"]\nhealth_path = \"ready\"\n",
                "health_path",
            ),
        ] {
            let e = model(model_toml).unwrap_err();
            assert!(e.contains(want), "{model_toml}: {e}");
        }
        let e = ModelServerSettings {
            command: vec!["srv".into()],
            ..ModelServerSettings::default()
        }
        .validate("at", "", None)
        .unwrap_err();
        assert!(e.to_string().contains("needs a name"), "{e}");
    }

    /// The request paths a pooled model serves: its kind's (the image worker's: images only),
    /// its own where it declares them, none declared for a command of its own.
    #[test]
    fn a_pooled_model_serves_its_kinds_paths_or_its_own() {
        let paths = |toml: &str| model(toml).unwrap().0.paths();
        assert_eq!(
            paths("backend = \"diffusers\"\nweights = \"/p\"\n").unwrap(),
            ["/v1/images/generations"]
        );
        assert_eq!(paths("command = [\"srv\"]\n"), None);
        assert_eq!(
            paths("command = [\"srv\"]\npaths = [\"/v1/chat/completions\"]\n").unwrap(),
            ["/v1/chat/completions"]
        );
        // A container of the user's own declares nothing (a llama-server image serves
        // /completion too): every request goes to it unless its `paths` narrow them.
        assert_eq!(paths("[docker]\nimage = \"img\"\n"), None);
    }

    /// The vLLM shorthand's command, and a lane's probe defaults under the keys written.
    #[test]
    fn vllm_command_and_lane_probe_defaults() {
        let v: VllmSettings = from_table::<_, toml::de::Error>(
            "model = \"Qwen/Qwen3-32B\"\nmax_num_seqs = 16\n"
                .parse::<Table>()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            v.command(Some("q")).join(" "),
            "vllm serve Qwen/Qwen3-32B --host 127.0.0.1 --port {port} --gpu-memory-utilization 0.75 \
             --max-model-len 16384 --max-num-seqs 16 --max-num-batched-tokens 2048 \
             --enable-chunked-prefill --served-model-name q"
        );
        #[derive(Deserialize)]
        struct Lane {
            #[serde(deserialize_with = "deserialize_lane_probe")]
            probe: ProbeConfig,
        }
        let lane: Lane = from_table::<_, toml::de::Error>(
            "[probe]\ninference_every = 3\n".parse::<Table>().unwrap(),
        )
        .unwrap();
        assert_eq!(lane.probe.inference_every, 3);
        assert_eq!(lane.probe.inference_timeout_ms, 30_000);
        assert_eq!(lane.probe.health_timeout_ms, 5000);
        let e =
            from_table::<Lane, toml::de::Error>("[probe]\nevery = 1\n".parse::<Table>().unwrap())
                .err()
                .unwrap();
        assert!(e.to_string().contains("every"), "{e}");
    }
}
