//! The configuration file (TOML). Unknown keys are refused with their name and position.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The queue database (relative paths are relative to the configuration file).
    #[serde(default = "default_database")]
    pub database: PathBuf,
    /// Feeder settings.
    #[serde(default)]
    pub feeder: FeederSection,
    /// One lane per model type, in priority order (Think first).
    #[serde(default, rename = "lane")]
    pub lanes: Vec<LaneSection>,
    /// The OpenAI-compatible coordinator (served by `run` when present).
    #[serde(default)]
    pub coordinator: Option<CoordinatorSection>,
    /// Which lane the shared GPU serves (when present).
    #[serde(default)]
    pub allocator: Option<AllocatorSection>,
    /// The document pipeline (run by `run` when present).
    #[serde(default)]
    pub ingest: Option<IngestSection>,
}

/// How `[ingest]` reads page images.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReaderKind {
    /// Tesseract on the CPU.
    Tesseract,
    /// An OpenAI-compatible vision model at `vision_url`.
    Openai,
}

/// `[ingest]`: PDFs from the inbox into searchable text, tables and embeddings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSection {
    /// The only directory documents are accepted from (relative: to the configuration file).
    pub inbox: PathBuf,
    /// The pipeline's database and page images (relative: to the configuration file).
    #[serde(default = "default_ingest_dir")]
    pub dir: PathBuf,
    /// `tesseract` or `openai`.
    #[serde(default = "default_reader")]
    pub reader: ReaderKind,
    /// The vision server (reader = "openai").
    #[serde(default)]
    pub vision_url: Option<String>,
    /// The vision model name.
    #[serde(default = "default_vision_model")]
    pub vision_model: String,
    /// The embeddings server (`/v1/embeddings`), e.g. the coordinator.
    pub embeddings_url: String,
    /// The embeddings model name.
    pub embeddings_model: String,
    /// Rendering resolution.
    #[serde(default = "default_dpi")]
    pub dpi: f32,
    /// Tokens per text chunk (512 for BGE-M3; 128 for MiniLM).
    #[serde(default = "default_chunk")]
    pub chunk_tokens: usize,
    /// Overlap of consecutive chunks, tokens.
    #[serde(default = "default_overlap")]
    pub chunk_overlap: usize,
    /// Delay before a failed job is tried again, seconds.
    #[serde(default = "default_retry")]
    pub retry_delay_s: u64,
}

fn default_ingest_dir() -> PathBuf {
    PathBuf::from("ingest")
}
fn default_reader() -> ReaderKind {
    ReaderKind::Tesseract
}
fn default_vision_model() -> String {
    "Qwen/Qwen2-VL-7B-Instruct".to_owned()
}
fn default_dpi() -> f32 {
    150.0
}
fn default_chunk() -> usize {
    512
}
fn default_overlap() -> usize {
    120
}
fn default_retry() -> u64 {
    30
}

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
}

/// The keys of `[coordinator]` that are the binary's, not the coordinator's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CoordinatorUpstreams {
    #[serde(default, rename = "model")]
    models: Vec<UpstreamSection>,
    #[serde(default)]
    pool: Option<PoolSection>,
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
            from_table(take_keys(&mut table, &["model", "pool"]))?;
        Ok(CoordinatorSection {
            settings: from_table(table)?,
            models: upstreams.models,
            pool: upstreams.pool,
        })
    }
}

/// Moves `keys` out of `table` into a table of their own.
fn take_keys(table: &mut toml::Table, keys: &[&str]) -> toml::Table {
    keys.iter()
        .filter_map(|k| table.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect()
}

/// A crate's settings type from the keys of a section: unknown keys are refused and a bad value
/// is named by its key (toml says "in `key`").
fn from_table<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    table: toml::Table,
) -> Result<T, E> {
    T::deserialize(toml::Value::Table(table)).map_err(E::custom)
}

/// `[coordinator.pool]`: gpu-alloc's model pool behind the coordinator. Each
/// `[[coordinator.pool.model]]` is a server the pool starts when a request needs it (on a port
/// of `port_min..=port_max`, on the GPUs it picks), stops when its stay-warm time is over, and
/// evicts for a more important request when memory is short.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// Memory the pool may fill on each GPU, MB. Where NVML answers it caps each GPU's
    /// capacity (the driver's free memory is checked as well); without NVML it is required and
    /// is a budget the pool accounts for itself, e.g. the RAM given to CPU servers.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// GPUs of the budget without NVML.
    #[serde(default = "default_pool_gpus")]
    pub gpus: u32,
    /// The VRAM ledger shared with other processes on this machine (relative: to the
    /// configuration file).
    #[serde(default = "default_ledger")]
    pub ledger: PathBuf,
    /// First port of the servers' range.
    #[serde(default = "default_port_min")]
    pub port_min: u16,
    /// Last port of the range.
    #[serde(default = "default_port_max")]
    pub port_max: u16,
    /// Safety margin per GPU, MB.
    #[serde(default = "default_margin")]
    pub margin_mb: u64,
    /// How long a server may take to become healthy, seconds.
    #[serde(default = "default_pool_start")]
    pub start_timeout_s: u64,
    /// The models.
    #[serde(rename = "model", default)]
    pub models: Vec<PooledModelSection>,
}

/// `[[coordinator.pool.model]]`: one model the pool serves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PooledModelSection {
    /// The model name clients ask for.
    pub name: String,
    /// The server's command; `{port}`, `{gpus}` and `{model}` are expanded at each start.
    pub command: Vec<String>,
    /// Memory it takes, MB (else estimated from `weights`, else from the name).
    #[serde(default)]
    pub vram_mb: Option<u64>,
    /// Its weight file or directory (GGUF ×1.1, safetensors ×1.3) for the estimate.
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

fn default_pool_gpus() -> u32 {
    1
}
fn default_ledger() -> PathBuf {
    PathBuf::from("vram-ledger.db")
}
fn default_port_min() -> u16 {
    8300
}
fn default_port_max() -> u16 {
    8399
}
fn default_margin() -> u64 {
    horos_gpu_alloc::split::DEFAULT_MARGIN_MB
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

/// `[lane.docker]`: the lane's server as a Docker container (the image is built locally; nothing
/// is pulled).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSection {
    /// The image, e.g. `horos/llama-server:local` (scripts/build_llama_image.sh).
    pub image: String,
    /// The container's command (placeholders `{port}`, `{gpus}`, `{model}` expanded).
    #[serde(default)]
    pub cmd: Vec<String>,
    /// The port the server listens on inside the container (published on 127.0.0.1 at the lane
    /// URL's port).
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

/// `[lane.vllm]`: `vllm serve MODEL --port PORT` with the seed's defaults
/// (`--gpu-memory-utilization 0.75 --max-model-len 16384 --max-num-seqs 8
/// --enable-chunked-prefill --max-num-batched-tokens 2048`), each overridable.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VllmSection {
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

impl VllmSection {
    /// The command line, serving as `served_name` on `port`.
    pub fn command(&self, port: u16, served_name: Option<&str>) -> Vec<String> {
        let mut c = vec![
            self.program.clone(),
            "serve".to_owned(),
            self.model.clone(),
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            port.to_string(),
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

/// `[lane.probe]`: health checks of the lane's server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSection {
    /// A one-token inference every N checks (0: `/health` only), so a hung engine is caught.
    pub inference_every: u32,
    /// Time-out of that inference, ms (keep it above a request's queueing time).
    pub inference_timeout_ms: u64,
    /// The model name it asks for (default: the lane's `model`, else the first of `/v1/models`).
    pub model: Option<String>,
}

impl Default for ProbeSection {
    fn default() -> Self {
        ProbeSection {
            inference_every: 1,
            inference_timeout_ms: 30_000,
            model: None,
        }
    }
}

fn default_database() -> PathBuf {
    PathBuf::from("horos.db")
}

/// `[feeder]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeederSection {
    /// Pause after each batch, seconds (the seed's 10 s).
    pub cooldown_s: f64,
    /// Sleep when no lane has work, milliseconds.
    pub idle_poll_ms: u64,
    /// When released jobs become visible again, milliseconds.
    pub release_delay_ms: u64,
    /// Health checks of every server, seconds (0: only failed batches detect a dead server).
    pub health_interval_s: f64,
    /// Pacing after each batch: `fixed` (always `cooldown_s`) or `follow` (pause only while the
    /// hottest GPU is above 75 °C, longer the hotter; `cooldown_s` when no temperature is read).
    pub thermal: ThermalKind,
}

/// `feeder.thermal`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ThermalKind {
    /// Always the same pause.
    #[default]
    Fixed,
    /// gpu-alloc's temperature-following policy, read through NVML.
    Follow,
}

impl Default for FeederSection {
    fn default() -> Self {
        FeederSection {
            cooldown_s: 10.0,
            idle_poll_ms: 200,
            release_delay_ms: 1000,
            health_interval_s: 5.0,
            thermal: ThermalKind::Fixed,
        }
    }
}

/// `[[lane]]`: a queue and its inference server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneSection {
    /// The queue (model type), e.g. `think`, `vision`.
    pub queue: String,
    /// The server's base URL. Default: `http://127.0.0.1:8002` for `think`, `:8001` for
    /// `vision` (the seed's ports); other queues must give one.
    #[serde(default)]
    pub url: String,
    /// The model name as served (the default of `submit --model`).
    #[serde(default)]
    pub model: Option<String>,
    /// Jobs per batch (8–16).
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// Refill mode: jobs claimed per round beyond the first batch (0: one batch per round).
    #[serde(default)]
    pub refill: usize,
    /// Lease of a claimed job, seconds: renewed every third of it while the job's request runs,
    /// so it bounds how soon a crashed binary's jobs come back, not how long a request may take.
    #[serde(default = "default_visibility")]
    pub visibility_s: u64,
    /// Total time budget of one request, seconds.
    #[serde(default = "default_timeout")]
    pub request_timeout_s: u64,
    /// The command that runs the server (started at start-up, restarted after a crash). Without
    /// it the server is someone else's: the feeder only checks its health.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The server as a Docker container instead of a `command`.
    #[serde(default)]
    pub docker: Option<DockerSection>,
    /// The server as `vllm serve` with the seed's arguments (a shorthand for `command`).
    #[serde(default)]
    pub vllm: Option<VllmSection>,
    /// GPUs of the server (`CUDA_VISIBLE_DEVICES` of a command; a device request of a container).
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// How long a (re)started server may take to answer `/health`, seconds.
    #[serde(default = "default_start_wait")]
    pub start_wait_s: u64,
    /// Health checks of a server the binary runs.
    #[serde(default)]
    pub probe: ProbeSection,
    /// With `[allocator]`: seconds the GPU is unavailable while switching to this lane (stop the
    /// other server, start this one, warm up).
    #[serde(default = "default_swap_in")]
    pub swap_in_s: f64,
    /// With `[allocator]`: GPU-seconds one job of this lane takes (its work estimate).
    #[serde(default = "default_job_s")]
    pub job_s: f64,
}

fn default_swap_in() -> f64 {
    60.0
}
fn default_job_s() -> f64 {
    1.0
}

/// `[allocator]`: the lanes whose servers the binary runs share one GPU; gpu-alloc's allocator
/// decides every `tick_s` which of them it serves (pending work against the swap's cost, the
/// starvation bound, anti-inversion), and the switch drains the running batch, stops one server
/// and starts the other. Its keys are gpu-alloc's own
/// [`AllocatorConfig`](horos_gpu_alloc::allocator::AllocatorConfig) (every one, with its
/// defaults and checks) plus `gpu`, the GPU the lanes share.
#[derive(Debug, Clone, Default)]
pub struct AllocatorSection {
    /// The GPU the lanes share (`CUDA_VISIBLE_DEVICES` of their servers).
    pub gpu: u32,
    /// gpu-alloc's settings as written.
    pub settings: horos_gpu_alloc::allocator::AllocatorConfig,
    /// Whether `batch_overhead_s` was written (else it follows `feeder.cooldown_s`).
    batch_overhead_given: bool,
}

impl<'de> Deserialize<'de> for AllocatorSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Binary {
            #[serde(default)]
            gpu: u32,
        }
        let mut table = toml::Table::deserialize(d)?;
        let binary: Binary = from_table(take_keys(&mut table, &["gpu"]))?;
        let batch_overhead_given = table.contains_key("batch_overhead_s");
        Ok(AllocatorSection {
            gpu: binary.gpu,
            settings: from_table(table)?,
            batch_overhead_given,
        })
    }
}

impl AllocatorSection {
    /// gpu-alloc's settings, the pause between batches following the feeder's cooldown unless
    /// `batch_overhead_s` was written.
    pub fn policy(&self, cooldown_s: f64) -> horos_gpu_alloc::allocator::AllocatorConfig {
        let mut c = self.settings.clone();
        if !self.batch_overhead_given {
            c.batch_overhead_s = cooldown_s;
        }
        c
    }
}

impl LaneSection {
    /// The port of `url` (where a managed server must listen).
    pub fn port(&self) -> Option<u16> {
        let rest = self.url.strip_prefix("http://")?;
        let authority = rest.split('/').next()?;
        authority.rsplit_once(':')?.1.parse().ok()
    }
}

fn default_batch() -> usize {
    16
}
fn default_visibility() -> u64 {
    300
}
fn default_timeout() -> u64 {
    120
}
fn default_start_wait() -> u64 {
    600
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown key or a wrong type (the message names it).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// toml's message, with the key and its line.
        message: String,
    },
    /// A value is out of range.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the key.
        message: String,
    },
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Config::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            ConfigError::Invalid { message, .. } => ConfigError::Invalid {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })?;
        if let Some(dir) = path.parent() {
            if config.database.is_relative() {
                config.database = dir.join(&config.database);
            }
            if let Some(ingest) = &mut config.ingest {
                for p in [&mut ingest.inbox, &mut ingest.dir] {
                    if p.is_relative() {
                        *p = dir.join(&*p);
                    }
                }
            }
            if let Some(pool) = config.coordinator.as_mut().and_then(|c| c.pool.as_mut()) {
                if pool.ledger.is_relative() {
                    pool.ledger = dir.join(&pool.ledger);
                }
                for m in &mut pool.models {
                    if let Some(w) = m.weights.as_mut().filter(|w| w.is_relative()) {
                        *w = dir.join(&*w);
                    }
                }
            }
        }
        Ok(config)
    }

    /// Parses and checks a configuration text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<config>".into(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        config
            .complete_and_check()
            .map_err(|message| ConfigError::Invalid {
                path: "<config>".into(),
                message,
            })?;
        Ok(config)
    }

    /// Fills the values that follow from others (default lane ports, the vLLM shorthand's
    /// command, the allocator's GPU) and checks each section; the error names the key.
    fn complete_and_check(&mut self) -> Result<(), String> {
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            lane.complete(i)?;
        }
        self.feeder.validate()?;
        let mut queues = std::collections::HashSet::new();
        for (i, lane) in self.lanes.iter().enumerate() {
            if !queues.insert(lane.queue.as_str()) {
                return Err(format!("lane[{i}].queue `{}` is used twice", lane.queue));
            }
            lane.validate(i)?;
        }
        if let Some(ingest) = &self.ingest {
            ingest.validate()?;
        }
        if let Some(a) = &self.allocator {
            a.validate(&self.lanes)?;
            for l in &mut self.lanes {
                if l.is_managed() && l.gpus.is_empty() {
                    l.gpus = vec![a.gpu];
                }
            }
        }
        if let Some(c) = &self.coordinator {
            c.validate(&self.lanes)?;
        }
        Ok(())
    }
}

impl FeederSection {
    fn validate(&self) -> Result<(), String> {
        if !(0.0..=3600.0).contains(&self.cooldown_s) {
            return Err(format!(
                "feeder.cooldown_s = {} is not between 0 and 3600",
                self.cooldown_s
            ));
        }
        if !(0.0..=86_400.0).contains(&self.health_interval_s) {
            return Err(format!(
                "feeder.health_interval_s = {} is not between 0 and 86400",
                self.health_interval_s
            ));
        }
        Ok(())
    }
}

impl LaneSection {
    /// Whether the binary runs this lane's server.
    pub fn is_managed(&self) -> bool {
        self.command.is_some() || self.docker.is_some()
    }

    /// The default URL of `think` and `vision`; `[lane.vllm]` turned into a `command`.
    fn complete(&mut self, i: usize) -> Result<(), String> {
        if self.url.is_empty() {
            self.url = match self.queue.as_str() {
                "think" => "http://127.0.0.1:8002".to_owned(),
                "vision" => "http://127.0.0.1:8001".to_owned(),
                other => {
                    return Err(format!(
                        "lane[{i}] (`{other}`) needs a `url` (only think and vision have default ports)"
                    ));
                }
            };
        }
        if let Some(v) = &self.vllm {
            if self.is_managed() {
                return Err(format!(
                    "lane[{i}]: give one of `command`, `docker`, `vllm`"
                ));
            }
            let Some(port) = self.port() else {
                return Err(format!(
                    "lane[{i}].url `{}` needs an explicit port for a server the binary runs",
                    self.url
                ));
            };
            self.command = Some(v.command(port, self.model.as_deref()));
        }
        Ok(())
    }

    fn validate(&self, i: usize) -> Result<(), String> {
        if self.queue.is_empty() {
            return Err(format!("lane[{i}].queue is empty"));
        }
        if !(1..=1024).contains(&self.batch_size) {
            return Err(format!(
                "lane[{i}].batch_size = {} is not between 1 and 1024",
                self.batch_size
            ));
        }
        if !self.url.starts_with("http://") {
            return Err(format!(
                "lane[{i}].url `{}` is not an http:// URL",
                self.url
            ));
        }
        if self.command.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(format!("lane[{i}].command is empty"));
        }
        if self.command.is_some() && self.docker.is_some() {
            return Err(format!("lane[{i}]: give `command` or `docker`, not both"));
        }
        if self.is_managed() && self.port().is_none() {
            return Err(format!(
                "lane[{i}].url `{}` needs an explicit port for a server the binary runs",
                self.url
            ));
        }
        if self.docker.as_ref().is_some_and(|d| d.image.is_empty()) {
            return Err(format!("lane[{i}].docker.image is empty"));
        }
        if !(self.swap_in_s.is_finite()
            && self.swap_in_s >= 0.0
            && self.job_s.is_finite()
            && self.job_s > 0.0)
        {
            return Err(format!("lane[{i}]: swap_in_s must be >= 0 and job_s > 0"));
        }
        Ok(())
    }
}

impl IngestSection {
    fn validate(&self) -> Result<(), String> {
        if !(self.dpi.is_finite() && (10.0..=1200.0).contains(&self.dpi)) {
            return Err(format!(
                "ingest.dpi = {} is not between 10 and 1200",
                self.dpi
            ));
        }
        if self.chunk_tokens == 0 || self.chunk_overlap >= self.chunk_tokens {
            return Err(format!(
                "ingest.chunk_overlap = {} must be below ingest.chunk_tokens = {} (> 0)",
                self.chunk_overlap, self.chunk_tokens
            ));
        }
        if self.reader == ReaderKind::Openai && self.vision_url.is_none() {
            return Err("ingest.vision_url is needed with ingest.reader = \"openai\"".into());
        }
        Ok(())
    }
}

impl AllocatorSection {
    fn validate(&self, lanes: &[LaneSection]) -> Result<(), String> {
        let managed = lanes.iter().filter(|l| l.is_managed()).count();
        if managed < 2 {
            return Err(format!(
                "[allocator] needs at least two lanes whose servers the binary runs (with \
                 `command`, `vllm` or `docker`); found {managed}"
            ));
        }
        self.settings
            .validate()
            .map_err(|e| format!("allocator.{e}"))
    }
}

impl CoordinatorSection {
    fn validate(&self, lanes: &[LaneSection]) -> Result<(), String> {
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
        if p.port_min == 0 || p.port_min > p.port_max {
            return Err(format!(
                "coordinator.pool: port_min = {} .. port_max = {} is not a range of ports",
                p.port_min, p.port_max
            ));
        }
        if p.memory_mb == Some(0) || p.gpus == 0 {
            return Err("coordinator.pool: memory_mb and gpus must be at least 1".into());
        }
        let mut names = std::collections::HashSet::new();
        for (i, m) in p.models.iter().enumerate() {
            if m.name.is_empty() || m.command.is_empty() {
                return Err(format!(
                    "coordinator.pool.model[{i}]: needs a name and a command"
                ));
            }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_and_lanes() {
        let c = Config::parse(
            "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\n\n[[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8001\"\nbatch_size = 8\n",
        )
        .unwrap();
        assert_eq!(c.database, PathBuf::from("horos.db"));
        assert_eq!(c.feeder.cooldown_s, 10.0);
        assert_eq!(c.lanes.len(), 2);
        assert_eq!((c.lanes[0].batch_size, c.lanes[1].batch_size), (16, 8));
        assert!(c.lanes[0].command.is_none());
        assert_eq!(c.feeder.thermal, ThermalKind::Fixed);
        let c = Config::parse("[feeder]\nthermal = \"follow\"\n").unwrap();
        assert_eq!(c.feeder.thermal, ThermalKind::Follow);
        let e = Config::parse("[feeder]\nthermal = \"hot\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hot"), "{e}");
    }

    #[test]
    fn an_unknown_key_is_named() {
        let e = Config::parse("[feeder]\ncooldown = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cooldown") && e.contains("unknown field"), "{e}");
        let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatchsize = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("batchsize"), "{e}");
        let e = Config::parse("databse = \"x.db\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("databse"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatch_size = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lane[0].batch_size"), "{e}");
        let e = Config::parse("[feeder]\ncooldown_s = \"ten\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cooldown_s"), "{e}");
        let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"https://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lane[0].url"), "{e}");
        let e = Config::parse(
            "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\ncommand = [\"a\"]\n[lane.docker]\nimage = \"i\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not both"), "{e}");
        let e = Config::parse("[coordinator]\nmax_body_bytes = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("coordinator.max_body_bytes"), "{e}");
        let e = Config::parse("[coordinator]\nbind = \"nowhere\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bind"), "{e}");
    }

    #[test]
    fn ingest_section_values_are_checked() {
        let base = "[ingest]\ninbox = \"in\"\nembeddings_url = \"http://127.0.0.1:1\"\nembeddings_model = \"m\"\n";
        let c = Config::parse(base).unwrap();
        let i = c.ingest.unwrap();
        assert_eq!(
            (i.reader, i.dpi, i.chunk_tokens),
            (ReaderKind::Tesseract, 150.0, 512)
        );
        let e = Config::parse(&format!("{base}dpi = 0.5\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ingest.dpi"), "{e}");
        let e = Config::parse(&format!("{base}reader = \"openai\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ingest.vision_url"), "{e}");
        let e = Config::parse(&format!("{base}reader = \"paper\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("paper"), "{e}");
    }

    #[test]
    fn vllm_shorthand_and_default_ports() {
        let c = Config::parse(
            "[[lane]]\nqueue = \"think\"\nmodel = \"q\"\n[lane.vllm]\nmodel = \"Qwen/Qwen3-32B\"\nmax_num_seqs = 16\n\
             [[lane]]\nqueue = \"vision\"\n",
        )
        .unwrap();
        assert_eq!(c.lanes[0].url, "http://127.0.0.1:8002");
        assert_eq!(c.lanes[1].url, "http://127.0.0.1:8001");
        let cmd = c.lanes[0].command.clone().unwrap().join(" ");
        assert_eq!(
            cmd,
            "vllm serve Qwen/Qwen3-32B --host 127.0.0.1 --port 8002 --gpu-memory-utilization 0.75 \
             --max-model-len 16384 --max-num-seqs 16 --max-num-batched-tokens 2048 \
             --enable-chunked-prefill --served-model-name q"
        );
        let e = Config::parse("[[lane]]\nqueue = \"ocr\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lane[0]") && e.contains("url"), "{e}");
        let e = Config::parse(
            "[[lane]]\nqueue = \"think\"\ncommand = [\"x\"]\n[lane.vllm]\nmodel = \"m\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("one of"), "{e}");
    }

    #[test]
    fn allocator_section_needs_two_managed_lanes_and_sets_their_gpu() {
        let lane = |q: &str, port: u16| {
            format!(
                "[[lane]]\nqueue = \"{q}\"\nurl = \"http://127.0.0.1:{port}\"\ncommand = [\"srv\"]\n"
            )
        };
        let two = format!(
            "[allocator]\ngpu = 1\ntick_s = 2\n{}{}",
            lane("think", 8002),
            lane("vision", 8001)
        );
        let c = Config::parse(&two).unwrap();
        assert_eq!(c.lanes[0].gpus, [1]);
        assert_eq!((c.lanes[1].swap_in_s, c.lanes[1].job_s), (60.0, 1.0));
        let p = c.allocator.unwrap().policy(7.0);
        assert_eq!((p.tick_s, p.batch_overhead_s), (2.0, 7.0));
        let e = Config::parse(&format!("[allocator]\n{}", lane("think", 8002)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least two lanes"), "{e}");
        let e = Config::parse(&two.replace("tick_s = 2", "tick_s = 0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("allocator.tick_s"), "{e}");
        let e = Config::parse(&format!("{two}job_s = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("job_s"), "{e}");
    }

    #[test]
    fn pool_section_defaults_and_checks() {
        let base = "[coordinator]\n[coordinator.pool]\nmemory_mb = 1000\n\
                    [[coordinator.pool.model]]\nname = \"a\"\ncommand = [\"srv\", \"--port\", \"{port}\"]\n\
                    category = \"embedding\"\nstay_warm_s = 5\n";
        let c = Config::parse(base).unwrap();
        let p = c.coordinator.unwrap().pool.unwrap();
        assert_eq!((p.port_min, p.port_max, p.gpus), (8300, 8399, 1));
        assert_eq!(p.ledger, PathBuf::from("vram-ledger.db"));
        assert_eq!(
            p.models[0].category,
            horos_gpu_alloc::pool::Category::Embedding
        );
        assert_eq!(p.models[0].stay_warm_s, Some(5));
        let twice = format!("{base}[[coordinator.pool.model]]\nname = \"a\"\ncommand = [\"x\"]\n");
        let e = Config::parse(&twice).unwrap_err().to_string();
        assert!(e.contains("served twice"), "{e}");
        let e =
            Config::parse(&base.replace("memory_mb = 1000", "port_min = 9000\nport_max = 8000"))
                .unwrap_err()
                .to_string();
        assert!(e.contains("port_min"), "{e}");
        let e = Config::parse(&base.replace("[\"srv\", \"--port\", \"{port}\"]", "[]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a name and a command"), "{e}");
        let e = Config::parse(&base.replace("category = \"embedding\"", "category = \"sound\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sound"), "{e}");
    }

    #[test]
    fn coordinator_and_allocator_sections_are_their_crates_settings() {
        let c = Config::parse(
            "[coordinator]\nallow_cloud_fallback = false\nupstream_timeout_s = 30\n\
             [coordinator.tasks.extract]\nmodels = [\"big\", \"small\"]\npin_primary = true\n\
             [coordinator.load_s]\nbig = 90\n",
        )
        .unwrap();
        let co = c.coordinator.unwrap();
        assert!(!co.settings.allow_cloud_fallback);
        assert_eq!(co.settings.upstream_timeout_s, 30.0);
        assert_eq!(co.settings.tasks["extract"].models, ["big", "small"]);
        assert!(co.settings.tasks["extract"].pin_primary);
        assert_eq!(co.settings.load_s["big"], 90.0);
        let e = Config::parse("[coordinator]\nmax_inflight = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_inflight"), "{e}");
        let e = Config::parse("[coordinator]\nstate_path = \"x.db\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("state_path") && e.contains("set by horos-ref"),
            "{e}"
        );
        let e = Config::parse("[coordinator.tasks.t]\nmodels = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("coordinator.tasks.t.models"), "{e}");

        let lanes = "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\ncommand = [\"a\"]\n\
                     [[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8001\"\ncommand = [\"b\"]\n";
        let c = Config::parse(&format!(
            "[allocator]\nreversal_factor = 5\n[[allocator.anti_inversion]]\ntarget = \"vision\"\n\
             other = \"think\"\nmax_target_jobs = 1\nratio = 4\n{lanes}"
        ))
        .unwrap();
        let a = c.allocator.unwrap();
        let p = a.policy(7.0);
        assert_eq!((p.reversal_factor, p.batch_overhead_s), (5.0, 7.0));
        assert_eq!(p.anti_inversion[0].target, "vision");
        let c = Config::parse(&format!("[allocator]\nbatch_overhead_s = 2\n{lanes}")).unwrap();
        assert_eq!(c.allocator.unwrap().policy(7.0).batch_overhead_s, 2.0);
        let e = Config::parse(&format!("[allocator]\nhorizon = 3\n{lanes}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("horizon"), "{e}");
    }

    #[test]
    fn docker_probe_and_coordinator_sections() {
        let c = Config::parse(
            "[coordinator]\nbind = \"127.0.0.1:9999\"\n[[coordinator.model]]\nname = \"m\"\nurl = \"http://127.0.0.1:1\"\n\
             [[lane]]\nqueue = \"t\"\nurl = \"http://127.0.0.1:8002/\"\n[lane.docker]\nimage = \"horos/llama-server:local\"\n\
             cmd = [\"--port\", \"{port}\"]\n[lane.probe]\ninference_every = 3\n",
        )
        .unwrap();
        let lane = &c.lanes[0];
        assert_eq!(lane.port(), Some(8002));
        assert_eq!(lane.docker.as_ref().unwrap().container_port, 8000);
        assert_eq!(lane.probe.inference_every, 3);
        let co = c.coordinator.unwrap();
        assert_eq!(co.settings.bind.port(), 9999);
        assert_eq!(co.models[0].name, "m");
        let e = Config::parse(
            "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n[lane.probe]\nevery = 1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("every"), "{e}");
    }
}
