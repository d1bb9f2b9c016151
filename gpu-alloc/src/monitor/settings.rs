//! The GPUs as a configuration file describes them (a `[gpus]` section, [`GpusSettings`]):
//! where their readings come from (NVML, a simulated fleet, none), how they are sampled, where
//! temperature alerts are sent; and the monitor and sampler those settings describe
//! ([`open`], [`watch`]).

use std::sync::Arc;
use std::time::Duration;

use horos_server_control::settings::{InvalidSettings, Table, from_table, take_keys};
use serde::Deserialize;

use super::alerts::{AlertSinks, Webhook, WebhookError, WebhookUrl, with_causes};
use super::sim_fleet::{SimFleet, TemperatureStep};
use super::watch::GpuWatch;
use super::{GpuMonitor, SamplerConfig};

/// Where the GPUs' readings come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuSource {
    /// NVML where an NVIDIA driver answers, else no GPU (the default).
    #[default]
    Auto,
    /// NVML; [`open`] fails where no driver answers.
    Nvml,
    /// A simulated fleet of `simulated_mb` GPUs (machines without a GPU, demos, tests).
    Simulated,
    /// No GPU readings, no sampling.
    None,
}

/// `[gpus]`: the one view of the machine's GPUs, sampled every `interval_ms` (a [`GpuWatch`]).
/// Its sampling keys are [`SamplerConfig`]'s (`interval_ms`, `history_s`, `[gpus.alert]` with
/// `threshold_c` and `clear_margin_c`); the others name the source, the simulated fleet, where
/// alerts are sent and the VRAM ledger.
#[derive(Debug, Clone)]
pub struct GpusSettings {
    /// Where the readings come from.
    pub source: GpuSource,
    /// The simulated GPUs' memory, MB, one entry per GPU (`source = "simulated"`).
    pub simulated_mb: Vec<u64>,
    /// Scripted temperatures of the simulated GPUs (demos and tests of the alert).
    pub simulated_temperature: Vec<TemperatureStep>,
    /// Processes outside HOROS taking memory on the simulated GPUs (demos and tests of the
    /// memory checks).
    pub simulated_process: Vec<SimulatedProcess>,
    /// The sampler's settings as written.
    pub sampler: SamplerConfig,
    /// Run on each alert raised or cleared: argv, the event as JSON on stdin and in
    /// `HOROS_GPU_*` environment variables.
    pub alert_command: Vec<String>,
    /// How long the alert command may run before it is killed, seconds.
    pub alert_command_timeout_s: u64,
    /// POSTed each alert event as JSON: an `http://` or `https://` URL (the `webhook` feature
    /// of this crate; a build without it refuses the setting).
    pub alert_webhook: Option<String>,
    /// A PEM file of root certificates the webhook's https is also checked against (a private
    /// CA, a self-signed receiver), beside the Mozilla roots.
    pub alert_webhook_ca_file: Option<std::path::PathBuf>,
    /// Allows a webhook on another host than this one (loopback only by default).
    pub alert_webhook_allow_remote: bool,
    /// How long a webhook call may take, milliseconds.
    pub alert_webhook_timeout_ms: u64,
    /// The VRAM ledger, as written: the one SQLite file where every holder of GPU memory on
    /// this machine books it (lane servers, the model pool, other processes through a lease).
    pub ledger: Option<std::path::PathBuf>,
    /// Host RAM the servers put to sleep at level 1 may hold (their weights), MB, as written;
    /// absent: read from the machine ([`GpusSettings::host_memory_budget_mb`]).
    pub host_memory_mb: Option<u64>,
}

/// The host RAM kept for everything but level-1 sleepers when `host_memory_mb` is not set: a
/// quarter of the machine's memory, at least 4 GiB.
pub const HOST_MEMORY_MARGIN_MIN_MB: u64 = 4096;

/// The machine's memory (`MemTotal` of `/proc/meminfo`), MB; `None` where it cannot be read.
pub fn host_memory_total_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total_mb(&text)
}

/// `MemTotal` of a `/proc/meminfo` text, MB.
fn mem_total_mb(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}

/// The level-1 budget on a machine with `total_mb` of memory: all of it less a margin of a
/// quarter, at least [`HOST_MEMORY_MARGIN_MIN_MB`] (0 on a machine smaller than the margin).
pub fn default_host_memory_mb(total_mb: u64) -> u64 {
    total_mb.saturating_sub((total_mb / 4).max(HOST_MEMORY_MARGIN_MIN_MB))
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

impl Default for GpusSettings {
    fn default() -> Self {
        GpusSettings {
            source: GpuSource::Auto,
            simulated_mb: Vec::new(),
            simulated_temperature: Vec::new(),
            simulated_process: Vec::new(),
            sampler: SamplerConfig::default(),
            alert_command: Vec::new(),
            alert_command_timeout_s: default_command_timeout(),
            alert_webhook: None,
            alert_webhook_ca_file: None,
            alert_webhook_allow_remote: false,
            alert_webhook_timeout_ms: default_webhook_timeout(),
            ledger: None,
            host_memory_mb: None,
        }
    }
}

/// The keys of `[gpus]` that are not the sampler's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnKeys {
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
    alert_webhook_ca_file: Option<std::path::PathBuf>,
    #[serde(default)]
    alert_webhook_allow_remote: bool,
    #[serde(default = "default_webhook_timeout")]
    alert_webhook_timeout_ms: u64,
    #[serde(default)]
    ledger: Option<std::path::PathBuf>,
    #[serde(default)]
    host_memory_mb: Option<u64>,
}

fn default_command_timeout() -> u64 {
    30
}
fn default_webhook_timeout() -> u64 {
    2000
}

const OWN_KEYS: [&str; 12] = [
    "ledger",
    "host_memory_mb",
    "simulated_process",
    "source",
    "simulated_mb",
    "simulated_temperature",
    "alert_command",
    "alert_command_timeout_s",
    "alert_webhook",
    "alert_webhook_ca_file",
    "alert_webhook_allow_remote",
    "alert_webhook_timeout_ms",
];

impl<'de> Deserialize<'de> for GpusSettings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = Table::deserialize(d)?;
        let b: OwnKeys = from_table(take_keys(&mut table, &OWN_KEYS))?;
        Ok(GpusSettings {
            source: b.source,
            simulated_mb: b.simulated_mb,
            simulated_temperature: b.simulated_temperature,
            simulated_process: b.simulated_process,
            sampler: from_table(table)?,
            alert_command: b.alert_command,
            alert_command_timeout_s: b.alert_command_timeout_s,
            alert_webhook: b.alert_webhook,
            alert_webhook_ca_file: b.alert_webhook_ca_file,
            alert_webhook_allow_remote: b.alert_webhook_allow_remote,
            alert_webhook_timeout_ms: b.alert_webhook_timeout_ms,
            ledger: b.ledger,
            host_memory_mb: b.host_memory_mb,
        })
    }
}

impl GpusSettings {
    /// Host RAM level-1 sleepers may hold, MB: `host_memory_mb` as written, else the machine's
    /// memory less a margin ([`default_host_memory_mb`]); 0 (nothing sleeps at level 1) where
    /// the machine's memory cannot be read.
    pub fn host_memory_budget_mb(&self) -> u64 {
        self.host_memory_mb
            .unwrap_or_else(|| host_memory_total_mb().map_or(0, default_host_memory_mb))
    }

    /// The webhook's URL, checked (see [`GpusSettings::validate`]): an `http://` or `https://`
    /// URL with a host and nothing that splits a header, on this machine unless
    /// `alert_webhook_allow_remote`, in a build that has the webhook's client.
    pub fn webhook(&self) -> Result<Option<WebhookUrl>, InvalidSettings> {
        let Some(url) = &self.alert_webhook else {
            if self.alert_webhook_ca_file.is_some() {
                return Err(InvalidSettings(
                    "gpus.alert_webhook_ca_file is for a webhook: set gpus.alert_webhook".into(),
                ));
            }
            return Ok(None);
        };
        let w = WebhookUrl::parse(url).map_err(|e| {
            InvalidSettings(format!(
                "gpus.alert_webhook {url:?} {e}: expected {}",
                e.expected()
            ))
        })?;
        if !w.is_loopback() && !self.alert_webhook_allow_remote {
            return Err(InvalidSettings(format!(
                "gpus.alert_webhook `{url}` is not on this machine (127.0.0.1, localhost, [::1]); \
                 set gpus.alert_webhook_allow_remote = true to send alerts elsewhere"
            )));
        }
        if !Webhook::BUILT {
            return Err(InvalidSettings(format!(
                "gpus.alert_webhook: {}",
                WebhookError::NotBuilt
            )));
        }
        Ok(Some(w))
    }

    /// Checks the values; the message names the key (`gpus.interval_ms`).
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        self.check().map_err(InvalidSettings)?;
        self.webhook().map(|_| ())
    }

    fn check(&self) -> Result<(), String> {
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
        Ok(())
    }
}

impl GpusSettings {
    /// The GPUs' sizes as these settings see them, MB (index = GPU): `simulated_mb`, or what
    /// NVML reads now (`auto`, `nvml`); `None` where no GPU is read (`none`, or no driver).
    pub fn sizes_mb(&self) -> Option<Vec<u64>> {
        match self.source {
            GpuSource::Simulated => Some(self.simulated_mb.clone()),
            GpuSource::None => None,
            GpuSource::Auto | GpuSource::Nvml => {
                let gpus = nvml_gpus();
                (!gpus.is_empty()).then(|| gpus.into_iter().map(|(_, mb)| mb).collect())
            }
        }
    }
}

/// The GPUs NVML reads on this machine now: each one's name and memory, MB (index = GPU);
/// empty where no NVIDIA driver answers (or the crate is built without `nvml`). Blocking.
pub fn nvml_gpus() -> Vec<(String, u64)> {
    #[cfg(feature = "nvml")]
    {
        match super::nvml::NvmlMonitor::new().and_then(|m| m.sample()) {
            Ok(samples) => samples
                .into_iter()
                .map(|s| (s.name, s.memory_total_mb))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "no GPU read by NVML");
                Vec::new()
            }
        }
    }
    #[cfg(not(feature = "nvml"))]
    {
        Vec::new()
    }
}

/// Why [`open`] has no monitor where `source = "nvml"` asks for one.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// NVML does not answer.
    #[error("gpus.source = \"nvml\": {0}")]
    Nvml(String),
    /// The NVML probe's task failed.
    #[error("gpus.source = \"nvml\": the NVML probe failed: {0}")]
    Probe(String),
}

/// The GPUs' monitor as `settings` say: NVML (required with `source = "nvml"`, where it answers
/// with `auto`), a simulated fleet (its scripted processes started on the current tokio
/// runtime), or none.
pub async fn open(settings: &GpusSettings) -> Result<Option<Arc<dyn GpuMonitor>>, OpenError> {
    match settings.source {
        GpuSource::None => Ok(None),
        GpuSource::Simulated => {
            let fleet = Arc::new(
                SimFleet::with_sizes(&settings.simulated_mb)
                    .with_temperature_script(settings.simulated_temperature.clone())
                    .servers_take_what_they_book(),
            );
            tracing::info!(gpus = settings.simulated_mb.len(), "simulated GPU fleet");
            for p in &settings.simulated_process {
                tokio::spawn(simulate_process(Arc::downgrade(&fleet), p.clone()));
            }
            Ok(Some(fleet))
        }
        GpuSource::Nvml | GpuSource::Auto => open_nvml(settings.source).await,
    }
}

#[cfg(feature = "nvml")]
async fn open_nvml(source: GpuSource) -> Result<Option<Arc<dyn GpuMonitor>>, OpenError> {
    match tokio::task::spawn_blocking(super::nvml::NvmlMonitor::new).await {
        Ok(Ok(monitor)) => Ok(Some(Arc::new(monitor))),
        Ok(Err(e)) if source == GpuSource::Nvml => Err(OpenError::Nvml(e.to_string())),
        Ok(Err(e)) => {
            tracing::info!(error = %e, "no GPU readings (NVML unavailable)");
            Ok(None)
        }
        Err(e) if source == GpuSource::Nvml => Err(OpenError::Probe(e.to_string())),
        Err(e) => {
            tracing::warn!(error = %e, "NVML probe failed");
            Ok(None)
        }
    }
}

#[cfg(not(feature = "nvml"))]
async fn open_nvml(source: GpuSource) -> Result<Option<Arc<dyn GpuMonitor>>, OpenError> {
    const NOT_BUILT: &str = "horos-gpu-alloc was built without its `nvml` feature";
    if source == GpuSource::Nvml {
        return Err(OpenError::Nvml(NOT_BUILT.to_owned()));
    }
    tracing::info!(error = NOT_BUILT, "no GPU readings (NVML unavailable)");
    Ok(None)
}

/// A `[[gpus.simulated_process]]`: its memory taken on the fleet from `at_ms` to `until_ms`.
async fn simulate_process(fleet: std::sync::Weak<SimFleet>, p: SimulatedProcess) {
    let key = format!("process:{}", p.name);
    tokio::time::sleep(Duration::from_millis(p.at_ms)).await;
    let Some(f) = fleet.upgrade() else { return };
    match f.load(p.gpu, &key, p.mb, None) {
        Ok(()) => {
            tracing::info!(gpu = p.gpu, mb = p.mb, name = %p.name, "simulated process takes GPU memory")
        }
        Err(e) => tracing::warn!(gpu = p.gpu, error = %e, "simulated process not placed"),
    }
    drop(f);
    let Some(until) = p.until_ms else { return };
    tokio::time::sleep(Duration::from_millis(until.saturating_sub(p.at_ms))).await;
    if let Some(f) = fleet.upgrade() {
        let _ = f.unload(p.gpu, &key);
        tracing::info!(gpu = p.gpu, name = %p.name, "simulated process ends");
    }
}

/// Samples `monitor` as `settings` say, its alerts sent to their command and webhook.
pub fn watch(
    settings: &GpusSettings,
    monitor: Arc<dyn GpuMonitor>,
) -> Result<GpuWatch, InvalidSettings> {
    let sinks = AlertSinks {
        command: settings.alert_command.clone(),
        command_timeout: Duration::from_secs(settings.alert_command_timeout_s),
        webhook: settings
            .webhook()?
            .map(|url| {
                let timeout = Duration::from_millis(settings.alert_webhook_timeout_ms);
                Webhook::new(url, settings.alert_webhook_ca_file.as_deref(), timeout)
            })
            .transpose()
            .map_err(|e| {
                let key = match e {
                    WebhookError::CaFile { .. } | WebhookError::NoCertificate { .. } => {
                        "gpus.alert_webhook_ca_file"
                    }
                    _ => "gpus.alert_webhook",
                };
                InvalidSettings(format!("{key}: {}", with_causes(&e)))
            })?,
    };
    Ok(GpuWatch::start(monitor, settings.sampler.clone(), sinks))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use horos_server_control::settings::BadUrl;

    /// The `[gpus]` section of `text`, read and checked.
    fn gpus(text: &str) -> Result<GpusSettings, String> {
        let mut file: Table = text.parse().map_err(|e| format!("{e}"))?;
        let section = match file.remove("gpus") {
            Some(toml::Value::Table(t)) => t,
            _ => Table::new(),
        };
        let s: GpusSettings =
            from_table(section).map_err(|e: serde::de::value::Error| e.to_string())?;
        s.validate()?;
        Ok(s)
    }

    #[test]
    fn gpus_section_defaults_sampler_keys_and_checks() {
        let c = gpus("").unwrap();
        assert_eq!(c.source, GpuSource::Auto);
        assert_eq!(c.sampler.interval_ms, 1000);
        assert_eq!(c.sampler.alert.threshold_c, 80.0);
        let c = gpus(
            "[gpus]\nsource = \"simulated\"\nsimulated_mb = [24000, 16000]\ninterval_ms = 50\n\
             history_s = 60\nalert_command = [\"notify\", \"--now\"]\n\
             [gpus.alert]\nthreshold_c = 85.0\nclear_margin_c = 3.0\n\
             [[gpus.simulated_temperature]]\ngpu = 1\nat_ms = 500\ntemperature_c = 90.0\n",
        )
        .unwrap();
        assert_eq!(c.simulated_mb, vec![24_000, 16_000]);
        assert_eq!(c.sampler.interval_ms, 50);
        assert_eq!(c.sampler.history_s, 60);
        assert_eq!(c.sampler.alert.threshold_c, 85.0);
        assert_eq!(c.simulated_temperature[0].at_ms, 500);
        for (text, needle) in [
            ("[gpus]\nintervall_ms = 5\n", "intervall_ms"),
            ("[gpus]\nsource = \"cuda\"\n", "source"),
            ("[gpus]\ninterval_ms = 0\n", "gpus.interval_ms"),
            (
                "[gpus.alert]\nthreshold_c = 500.0\n",
                "gpus.alert.threshold_c",
            ),
            ("[gpus]\nsource = \"simulated\"\n", "gpus.simulated_mb"),
            ("[gpus]\nsimulated_mb = [1000]\n", "only for source"),
            (
                "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000]\n\
                 [[gpus.simulated_temperature]]\ngpu = 1\nat_ms = 0\ntemperature_c = 90.0\n",
                "gpus.simulated_temperature[0]",
            ),
            (
                "[gpus]\nalert_webhook = \"http://example.com/hook\"\n",
                "alert_webhook_allow_remote",
            ),
            (
                "[gpus]\nalert_webhook = \"ftp://127.0.0.1/\"\n",
                "not an http:// or https:// URL",
            ),
            (
                "[gpus]\nalert_webhook = \"http://127.0.0.1/a\\r\\nX-Evil: 1\"\n",
                "gpus.alert_webhook \"http://127.0.0.1/a\\r\\nX-Evil: 1\" holds a control",
            ),
            (
                "[gpus]\nalert_webhook_ca_file = \"ca.pem\"\n",
                "gpus.alert_webhook_ca_file",
            ),
            ("[gpus]\nalert_command = [\"\"]\n", "gpus.alert_command"),
            (
                "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000]\n\
                 [[gpus.simulated_process]]\ngpu = 1\nmb = 10\n",
                "gpus.simulated_process[0]",
            ),
            (
                "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000]\n\
                 [[gpus.simulated_process]]\ngpu = 0\nmb = 10\nat_ms = 5\nuntil_ms = 5\n",
                "until_ms after at_ms",
            ),
            (
                "[gpus]\n[[gpus.simulated_process]]\ngpu = 0\nmb = 10\n",
                "only for source",
            ),
        ] {
            let e = gpus(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    /// A URL with CR/LF or another scheme than http(s) is refused, typed, before anything runs.
    #[test]
    fn a_webhook_url_that_could_split_a_header_or_is_not_http_is_refused_typed() {
        assert!(matches!(
            WebhookUrl::parse("http://127.0.0.1/a\r\nX-Evil: 1"),
            Err(BadUrl::ControlOrSpace)
        ));
        assert!(matches!(
            WebhookUrl::parse("ftp://127.0.0.1/"),
            Err(BadUrl::Scheme)
        ));
        assert!(matches!(
            WebhookUrl::parse("https://user:pw@127.0.0.1/"),
            Err(BadUrl::UserInfo)
        ));
        assert!(
            WebhookUrl::parse("http://[::1]:8080")
                .unwrap()
                .is_loopback()
        );
    }

    #[cfg(feature = "webhook")]
    #[test]
    fn a_webhook_is_http_or_https_with_its_port_and_elsewhere_only_when_allowed() {
        let c = gpus(
            "[gpus]\nalert_webhook = \"https://localhost:9443/hook\"\n\
             alert_webhook_ca_file = \"/etc/horos/ca.pem\"\n",
        )
        .unwrap();
        let w = c.webhook().unwrap().unwrap();
        assert_eq!(
            (w.uri().port_u16(), w.uri().path(), w.to_string()),
            (Some(9443), "/hook", "https://localhost:9443".to_owned())
        );
        let c = gpus(
            "[gpus]\nalert_webhook = \"http://10.0.0.2:80/h\"\nalert_webhook_allow_remote = true\n",
        )
        .unwrap();
        assert!(!c.webhook().unwrap().unwrap().is_loopback());
        // The CA file is read when the webhook is built: one that is absent names its key.
        let Err(e) = watch(
            &c_with_ca("/nonexistent/ca.pem"),
            Arc::new(SimFleet::new(1, 1000)),
        ) else {
            panic!("an absent CA file is refused");
        };
        assert!(
            e.0.starts_with("gpus.alert_webhook_ca_file: cannot use the CA file"),
            "{e}"
        );
    }

    #[cfg(feature = "webhook")]
    fn c_with_ca(ca: &str) -> GpusSettings {
        gpus(&format!(
            "[gpus]\nalert_webhook = \"http://127.0.0.1:9/\"\nalert_webhook_ca_file = \"{ca}\"\n"
        ))
        .unwrap()
    }

    #[cfg(not(feature = "webhook"))]
    #[test]
    fn a_build_without_the_webhook_client_refuses_a_webhook() {
        let e = gpus("[gpus]\nalert_webhook = \"http://127.0.0.1:9000/hook\"\n").unwrap_err();
        assert!(e.contains("`webhook` feature"), "{e}");
    }

    #[test]
    fn the_host_memory_budget_is_as_written_else_the_machine_less_a_margin() {
        let c = gpus("[gpus]\nhost_memory_mb = 12000\n").unwrap();
        assert_eq!(c.host_memory_budget_mb(), 12000);
        assert_eq!(
            mem_total_mb("MemTotal:       65536000 kB\nMemFree: 1 kB\n"),
            Some(64000)
        );
        assert_eq!(mem_total_mb("MemFree: 1 kB\n"), None);
        // A quarter kept, at least 4 GiB.
        assert_eq!(default_host_memory_mb(64_000), 48_000);
        assert_eq!(default_host_memory_mb(8_000), 8_000 - 4096);
        assert_eq!(default_host_memory_mb(2_000), 0);
        let unset = gpus("[gpus]\n").unwrap();
        assert_eq!(unset.host_memory_mb, None);
        if let Some(total) = host_memory_total_mb() {
            assert_eq!(unset.host_memory_budget_mb(), default_host_memory_mb(total));
        }
    }
}
