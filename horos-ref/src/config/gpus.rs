//! `[gpus]`: where the GPUs' readings come from, how often they are sampled, the temperature
//! alert and where it is sent.

use serde::Deserialize;

use horos_gpu_alloc::monitor::SamplerConfig;
use horos_gpu_alloc::monitor::sim_fleet::TemperatureStep;

use super::{from_table, take_keys};

/// Where `[gpus]` reads the GPUs from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuSource {
    /// NVML where an NVIDIA driver answers, else no GPU (the default).
    #[default]
    Auto,
    /// NVML; `run` fails where no driver answers.
    Nvml,
    /// A simulated fleet of `simulated_mb` GPUs (machines without a GPU, demos, tests).
    Simulated,
    /// No GPU readings, no sampling.
    None,
}

/// `[gpus]`: the one view of the machine's GPUs that `run` samples every `interval_ms`
/// (gpu-alloc's `Sampler`), shows on the coordinator's `/metrics`, `/status` and
/// `/api/v1/gpus`, and hands to the model pool and the feeder's temperature pacing. Its
/// sampling keys are gpu-alloc's own
/// [`SamplerConfig`](horos_gpu_alloc::monitor::SamplerConfig) (`interval_ms`, `history_s`,
/// `[gpus.alert]` with `threshold_c` and `clear_margin_c`); the rest is the binary's: the
/// source, the simulated fleet and where alerts are sent.
#[derive(Debug, Clone)]
pub struct GpusSection {
    /// Where the readings come from.
    pub source: GpuSource,
    /// The simulated GPUs' memory, MB, one entry per GPU (`source = "simulated"`).
    pub simulated_mb: Vec<u64>,
    /// Scripted temperatures of the simulated GPUs (demos and tests of the alert).
    pub simulated_temperature: Vec<TemperatureStep>,
    /// Processes outside HOROS taking memory on the simulated GPUs (demos and tests of the
    /// memory checks).
    pub simulated_process: Vec<SimulatedProcess>,
    /// gpu-alloc's sampler settings as written.
    pub sampler: SamplerConfig,
    /// Run on each alert raised or cleared: argv, the event as JSON on stdin and in
    /// `HOROS_GPU_*` environment variables.
    pub alert_command: Vec<String>,
    /// How long the alert command may run before it is killed, seconds.
    pub alert_command_timeout_s: u64,
    /// POSTed each alert event as JSON (`http://` only).
    pub alert_webhook: Option<String>,
    /// Allows a webhook on another host than this one (loopback only by default).
    pub alert_webhook_allow_remote: bool,
    /// How long a webhook call may take, milliseconds.
    pub alert_webhook_timeout_ms: u64,
    /// The VRAM ledger, as written: the one SQLite file where every holder of GPU memory on
    /// this machine books it (lane servers, the model pool, other processes through `horos-ref
    /// lease` or the admin API). See [`Config::ledger_path`](super::Config::ledger_path).
    pub ledger: Option<std::path::PathBuf>,
}

/// `[[gpus.simulated_process]]`: memory a process outside HOROS takes on a simulated GPU,
/// from `at_ms` after start-up until `until_ms` (or the end).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatedProcess {
    /// The GPU.
    pub gpu: u32,
    /// Its memory, MB.
    pub mb: u64,
    /// When it appears, milliseconds after start-up.
    #[serde(default)]
    pub at_ms: u64,
    /// When it ends (never, when absent).
    #[serde(default)]
    pub until_ms: Option<u64>,
    /// Its name.
    #[serde(default = "default_process_name")]
    pub name: String,
}

fn default_process_name() -> String {
    "foreign".to_owned()
}

impl Default for GpusSection {
    fn default() -> Self {
        GpusSection {
            source: GpuSource::Auto,
            simulated_mb: Vec::new(),
            simulated_temperature: Vec::new(),
            simulated_process: Vec::new(),
            sampler: SamplerConfig::default(),
            alert_command: Vec::new(),
            alert_command_timeout_s: default_command_timeout(),
            alert_webhook: None,
            alert_webhook_allow_remote: false,
            alert_webhook_timeout_ms: default_webhook_timeout(),
            ledger: None,
        }
    }
}

/// The keys of `[gpus]` that are the binary's, not the sampler's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpusBinaryKeys {
    #[serde(default)]
    source: GpuSource,
    #[serde(default)]
    simulated_mb: Vec<u64>,
    #[serde(default)]
    simulated_temperature: Vec<TemperatureStep>,
    #[serde(default)]
    simulated_process: Vec<SimulatedProcess>,
    #[serde(default)]
    alert_command: Vec<String>,
    #[serde(default = "default_command_timeout")]
    alert_command_timeout_s: u64,
    #[serde(default)]
    alert_webhook: Option<String>,
    #[serde(default)]
    alert_webhook_allow_remote: bool,
    #[serde(default = "default_webhook_timeout")]
    alert_webhook_timeout_ms: u64,
    #[serde(default)]
    ledger: Option<std::path::PathBuf>,
}

fn default_command_timeout() -> u64 {
    30
}
fn default_webhook_timeout() -> u64 {
    2000
}

const BINARY_KEYS: [&str; 10] = [
    "ledger",
    "simulated_process",
    "source",
    "simulated_mb",
    "simulated_temperature",
    "alert_command",
    "alert_command_timeout_s",
    "alert_webhook",
    "alert_webhook_allow_remote",
    "alert_webhook_timeout_ms",
];

impl<'de> Deserialize<'de> for GpusSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let b: GpusBinaryKeys = from_table(take_keys(&mut table, &BINARY_KEYS))?;
        Ok(GpusSection {
            source: b.source,
            simulated_mb: b.simulated_mb,
            simulated_temperature: b.simulated_temperature,
            simulated_process: b.simulated_process,
            sampler: from_table(table)?,
            alert_command: b.alert_command,
            alert_command_timeout_s: b.alert_command_timeout_s,
            alert_webhook: b.alert_webhook,
            alert_webhook_allow_remote: b.alert_webhook_allow_remote,
            alert_webhook_timeout_ms: b.alert_webhook_timeout_ms,
            ledger: b.ledger,
        })
    }
}

pub use horos_gpu_alloc::monitor::alerts::WebhookUrl;

impl GpusSection {
    /// The webhook, checked (see [`GpusSection::validate`]).
    pub fn webhook(&self) -> Result<Option<WebhookUrl>, String> {
        let Some(url) = &self.alert_webhook else {
            return Ok(None);
        };
        let w = WebhookUrl::parse(url).map_err(|e| format!("gpus.alert_webhook {e}"))?;
        if !w.is_loopback() && !self.alert_webhook_allow_remote {
            return Err(format!(
                "gpus.alert_webhook `{url}` is not on this machine (127.0.0.1, localhost, [::1]); \
                 set gpus.alert_webhook_allow_remote = true to send alerts elsewhere"
            ));
        }
        Ok(Some(w))
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        self.sampler.validate().map_err(|e| format!("gpus.{e}"))?;
        match self.source {
            GpuSource::Simulated => {
                if self.simulated_mb.is_empty() || self.simulated_mb.contains(&0) {
                    return Err(
                        "gpus.simulated_mb: source = \"simulated\" needs the GPUs' sizes in MB, \
                         each at least 1 (e.g. simulated_mb = [24000, 24000])"
                            .into(),
                    );
                }
                for (i, p) in self.simulated_process.iter().enumerate() {
                    if p.gpu as usize >= self.simulated_mb.len()
                        || p.mb == 0
                        || p.until_ms.is_some_and(|u| u <= p.at_ms)
                    {
                        return Err(format!(
                            "gpus.simulated_process[{i}]: gpu must be one of simulated_mb's ({} \
                             GPU(s)), mb at least 1, until_ms after at_ms",
                            self.simulated_mb.len()
                        ));
                    }
                }
                for (i, s) in self.simulated_temperature.iter().enumerate() {
                    if s.gpu as usize >= self.simulated_mb.len()
                        || !s.temperature_c.is_finite()
                        || !(-50.0..=200.0).contains(&s.temperature_c)
                    {
                        return Err(format!(
                            "gpus.simulated_temperature[{i}]: gpu must be one of simulated_mb's \
                             ({} GPU(s)) and temperature_c between -50 and 200",
                            self.simulated_mb.len()
                        ));
                    }
                }
            }
            _ => {
                if !self.simulated_mb.is_empty()
                    || !self.simulated_temperature.is_empty()
                    || !self.simulated_process.is_empty()
                {
                    return Err(
                        "gpus.simulated_mb / simulated_temperature / simulated_process are only \
                         for source = \"simulated\""
                            .into(),
                    );
                }
            }
        }
        if self.alert_command.first().is_some_and(|c| c.is_empty()) {
            return Err("gpus.alert_command: the program is empty".into());
        }
        if self.alert_command_timeout_s == 0 || self.alert_webhook_timeout_ms == 0 {
            return Err(
                "gpus.alert_command_timeout_s / alert_webhook_timeout_ms must be at least 1".into(),
            );
        }
        self.webhook().map(|_| ())
    }
}
