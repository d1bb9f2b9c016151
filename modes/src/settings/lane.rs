//! A lane's settings as a configuration file writes them (`[[lane]]`): its queue, the feeder's
//! batch settings, its server (a `command`, `[lane.vllm]`, `[lane.docker]`, `[lane.probe]`)
//! and what the allocator needs to weigh it.

use horos_gpu_alloc::plan::{Fit, VramDemand};
use horos_server_control::settings::{CheckScope, InvalidSettings, Problem, port_problem};
use horos_servers::ProbeConfig;
use horos_servers::discover::{command_problems, model_path_problem};
use horos_servers::settings::{
    DockerSettings, VllmSettings, deserialize_lane_probe, lane_probe_defaults,
};
use serde::Deserialize;

/// `[[lane]]`: a queue and its inference server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneSettings {
    /// The queue (model type), e.g. `think`, `vision`.
    pub queue: String,
    /// The server's base URL. Default: `http://127.0.0.1:8002` for `think`, `:8001` for
    /// `vision` (HOROS's usual ports); other queues must give one.
    #[serde(default)]
    pub url: String,
    /// The model name as served (the default of `submit --model`).
    #[serde(default)]
    pub model: Option<String>,
    /// Claims a job submitted to the lane gets before it is dead-lettered, 1 to 1000
    /// (default: the queue's, squeueha's 5).
    #[serde(default)]
    pub max_attempts: Option<u32>,
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
    pub docker: Option<DockerSettings>,
    /// The server as `vllm serve` with HOROS's default arguments (a shorthand for `command`).
    #[serde(default)]
    pub vllm: Option<VllmSettings>,
    /// GPUs of the server (`CUDA_VISIBLE_DEVICES` of a command; a device request of a container).
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// How long a (re)started server may take to answer `/health`, seconds.
    #[serde(default = "default_start_wait")]
    pub start_wait_s: u64,
    /// Health checks of a server the binary runs.
    #[serde(
        default = "lane_probe_defaults",
        deserialize_with = "deserialize_lane_probe"
    )]
    pub probe: ProbeConfig,
    /// With `[allocator]`: seconds the GPU is unavailable while switching to this lane (stop the
    /// other server, start this one, warm up).
    #[serde(default = "default_swap_in")]
    pub swap_in_s: f64,
    /// With `[allocator]`: GPU-seconds one job of this lane takes (its work estimate).
    #[serde(default = "default_job_s")]
    pub job_s: f64,
    /// With `[allocator]`: seconds the lane stays served after a request through the
    /// coordinator for its model ends (its last GPU is not switched away meanwhile, unless
    /// another lane would starve); a request's `keep_alive` replaces it. 0: the allocator
    /// decides alone.
    #[serde(default)]
    pub stay_warm_s: f64,
    /// GPU memory the server takes, MB, booked in the VRAM ledger while it runs (else estimated
    /// from `weights`, else from the model file the command names, else from the model's name).
    #[serde(default)]
    pub vram_mb: Option<u64>,
    /// The server's weight file or directory, for the VRAM estimate (a GGUF header's weights
    /// and attention cache, else the files' sizes).
    #[serde(default)]
    pub weights: Option<std::path::PathBuf>,
    /// `[lane.sleep]`, with `[allocator]` and its `sleep` on: whether the lane's server is put
    /// to sleep when its GPU leaves it instead of stopped, and woken instead of started
    /// (`can_sleep`; the server must be started to sleep too: vLLM with
    /// `--enable-sleep-mode` and `VLLM_SERVER_DEV_MODE=1`, llama-server with
    /// `--sleep-idle-seconds`, else it is stopped), and what a sleep and a wake cost before they
    /// are measured (`sleep_s`, `wake_l1_s`, `wake_l2_s`, `host_mb`).
    #[serde(default)]
    pub sleep: horos_gpu_alloc::catalogue::SleepSpec,
}

fn default_swap_in() -> f64 {
    60.0
}
fn default_job_s() -> f64 {
    1.0
}

impl LaneSettings {
    /// The port of `url` (where a managed server must listen).
    pub fn port(&self) -> Option<u16> {
        let rest = self.url.strip_prefix("http://")?;
        let authority = rest.split('/').next()?;
        authority.rsplit_once(':')?.1.parse().ok()
    }

    /// The URL of the lane's instance on the `slot`-th GPU of `[allocator]`: its port plus
    /// `slot` (the URL as written for the first, or for a lane outside the allocator).
    pub fn instance_url(&self, slot: usize) -> String {
        let (Some(port), Some(rest)) = (self.port(), self.url.strip_prefix("http://")) else {
            return self.url.clone();
        };
        if slot == 0 {
            return self.url.clone();
        }
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, format!("/{p}")),
            None => (rest, String::new()),
        };
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let port = u32::from(port) + slot as u32;
        format!("http://{host}:{port}{path}")
    }

    /// The name of the lane's instance on the `slot`-th GPU `gpu` (its pidfile, log and
    /// container name): the queue for the first.
    pub fn instance_name(&self, slot: usize, gpu: u32) -> String {
        if slot == 0 {
            self.queue.clone()
        } else {
            format!("{}-gpu{gpu}", self.queue)
        }
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

impl LaneSettings {
    /// What the VRAM estimate of the lane's server starts from: `vram_mb`, its weights
    /// (`weights`, or the existing file after `-m` / `--model` in its command, or the vLLM
    /// model when it is a local directory), its model's name.
    pub fn vram_facts(&self) -> horos_gpu_alloc::estimate::ModelFacts {
        let named = self.command.as_ref().and_then(|c| {
            c.windows(2)
                .find(|w| matches!(w[0].as_str(), "-m" | "--model" | "serve"))
                .map(|w| std::path::PathBuf::from(&w[1]))
                .filter(|p| p.exists())
        });
        horos_gpu_alloc::estimate::ModelFacts {
            name: self
                .vllm
                .as_ref()
                .map(|v| v.model.clone())
                .or_else(|| self.model.clone())
                .unwrap_or_else(|| self.queue.clone()),
            explicit_mb: self.vram_mb,
            metadata_mb: None,
            path: self.weights.clone().or(named),
        }
    }

    /// What `horos-ref check` finds wrong on this machine with the `i`-th lane, as far as
    /// `scope` looks: a port of its `instances` servers taken (one per GPU of `[allocator]`, at
    /// its URL's port + k; 1 otherwise), its command's program or model file missing, its
    /// `weights` missing.
    pub fn problems(&self, i: usize, instances: usize, scope: CheckScope) -> Vec<Problem> {
        let mut problems = Vec::new();
        if scope.ports
            && self.is_managed()
            && let Some(port) = self.port()
        {
            let slots = u16::try_from(instances.max(1)).unwrap_or(u16::MAX);
            for p in (0..slots).filter_map(|slot| port.checked_add(slot)) {
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], p));
                problems.extend(port_problem(&format!("lane[{i}].url"), addr));
            }
        }
        if scope.files {
            if let Some(c) = &self.command {
                problems.extend(command_problems(&format!("lane[{i}].command"), c));
            }
            if let Some(w) = self.weights.as_deref().and_then(std::path::Path::to_str) {
                problems.extend(model_path_problem(&format!("lane[{i}].weights"), w));
            }
        }
        problems
    }

    /// The lane's server's memory for the VRAM plan ([`plan`](horos_gpu_alloc::plan)):
    /// `vram_mb`, else its estimate ([`vram_facts`](Self::vram_facts)); on its `gpus` at once,
    /// or on one of `switched` at a time when the allocator switches it. `None` for a server
    /// someone else runs, or one whose size nothing tells.
    pub fn vram_demand(&self, i: usize, switched: Option<&[u32]>) -> Option<VramDemand> {
        if !self.is_managed() {
            return None;
        }
        let mb = horos_gpu_alloc::estimate::estimate(&self.vram_facts())
            .ok()?
            .mb;
        let (key, fit) = match switched {
            Some(gpus) => ("vram_mb", Fit::Each(gpus.to_vec())),
            None if !self.gpus.is_empty() => ("gpus", Fit::On(self.gpus.clone())),
            None => return None,
        };
        let key = if self.vram_mb.is_some() {
            "vram_mb"
        } else {
            key
        };
        Some(VramDemand {
            key: format!("lane[{i}].{key}"),
            mb,
            fit,
        })
    }

    /// Whether the binary runs this lane's server.
    pub fn is_managed(&self) -> bool {
        self.command.is_some() || self.docker.is_some()
    }

    /// The default URL of `think` and `vision`; `[lane.vllm]` turned into a `command` (the
    /// `i`-th lane of the file, as the message names it).
    pub fn complete(&mut self, i: usize) -> Result<(), InvalidSettings> {
        self.fill(i).map_err(InvalidSettings)
    }

    fn fill(&mut self, i: usize) -> Result<(), String> {
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
            if self.port().is_none() {
                return Err(format!(
                    "lane[{i}].url `{}` needs an explicit port for a server the binary runs",
                    self.url
                ));
            }
            self.command = Some(v.command(self.model.as_deref()));
        }
        Ok(())
    }

    /// Checks the values of the `i`-th lane; the message names the key (`lane[0].batch_size`).
    pub fn validate(&self, i: usize) -> Result<(), InvalidSettings> {
        self.check(i).map_err(InvalidSettings)
    }

    fn check(&self, i: usize) -> Result<(), String> {
        if self.queue.is_empty() {
            return Err(format!("lane[{i}].queue is empty"));
        }
        if !(1..=1024).contains(&self.batch_size) {
            return Err(format!(
                "lane[{i}].batch_size = {} is not between 1 and 1024",
                self.batch_size
            ));
        }
        if let Some(n) = self.max_attempts.filter(|n| !(1..=1000).contains(n)) {
            return Err(format!(
                "lane[{i}].max_attempts = {n} is not between 1 and 1000"
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
            && self.job_s > 0.0
            && self.stay_warm_s.is_finite()
            && self.stay_warm_s >= 0.0)
        {
            return Err(format!(
                "lane[{i}]: swap_in_s and stay_warm_s must be >= 0 and job_s > 0"
            ));
        }
        Ok(())
    }
}
