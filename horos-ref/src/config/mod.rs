//! The configuration file (TOML). Unknown keys are refused with their name and position.
//!
//! Each section is the settings type of the crate that owns its domain, which reads and checks
//! its own values: `[node]` squeueha's [`NodeSettings`](squeueha::nodes::NodeSettings),
//! `[[lane]]` and `[allocator]` horos-modes' [`LaneSettings`](horos_modes::settings::LaneSettings)
//! and [`AllocatorSettings`](horos_modes::settings::AllocatorSettings) (a lane's server
//! horos-servers'), `[gpus]` gpu-alloc's
//! [`GpusSettings`](horos_gpu_alloc::monitor::settings::GpusSettings), `[ingest]`
//! ingest-pipeline's [`IngestSettings`](ingest_pipeline::configured::IngestSettings),
//! `[queue]` squeueha's and the feeder's housekeeping (horos-feeder's `housekeeping`: retention of finished jobs
//! and answers, busy back-off), `[coordinator]` the coordinator's settings plus its upstreams (`coordinator.rs`), its
//! `[coordinator.pool]` gpu-alloc's pool settings with horos-servers' model servers. This
//! module composes them: the checks that involve several sections, and paths relative to the
//! file. The sections keep their names here (`LaneSection` is horos-modes' `LaneSettings`).

mod check;
mod coordinator;
mod secrets;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use coordinator::{CoordinatorSection, PoolSection};
pub use horos_feeder::housekeeping::QueueSettings as QueueSection;
pub use horos_gpu_alloc::monitor::settings::{GpuSource, GpusSettings as GpusSection};
pub use horos_modes::settings::{
    AllocatorSettings as AllocatorSection, LaneSettings as LaneSection,
};
pub use ingest_pipeline::configured::{IngestSettings as IngestSection, ReaderKind};
pub use secrets::Secrets;
pub use squeueha::nodes::{NodeSettings as NodeSection, host_name};

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The queue database: a SQLite file (relative paths are relative to the configuration
    /// file), or a `postgres://` URL that several nodes share.
    #[serde(default = "default_database")]
    pub database: PathBuf,
    /// This node among those sharing the database.
    #[serde(default)]
    pub node: NodeSection,
    /// The queue database's housekeeping: retention of finished jobs and answers, busy
    /// back-off.
    #[serde(default)]
    pub queue: QueueSection,
    /// Feeder settings.
    #[serde(default)]
    pub feeder: horos_feeder::FeederConfig,
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
    /// The GPUs: their source (NVML, simulated), sampling, temperature alerts, the VRAM ledger.
    #[serde(default)]
    pub gpus: GpusSection,
    /// The configuration file's directory (relative paths are relative to it).
    #[serde(skip)]
    pub config_dir: Option<PathBuf>,
    /// What its servers' logs must never show: the secrets its `${VAR}`s expanded to, the
    /// values of `[coordinator]`'s keys (see [`Secrets`]).
    #[serde(skip)]
    pub secrets: Secrets,
}

fn default_database() -> PathBuf {
    PathBuf::from("horos.db")
}

/// What to do next when the configuration file cannot be read.
fn read_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            " (name your configuration with --config FILE; horos-ref/README.md has a sample, and \
             `horos-ref demo` runs with a built-in one)"
        }
        std::io::ErrorKind::PermissionDenied => " (check the file's permissions)",
        _ => "",
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}{}", read_hint(source))]
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
    /// Reads and checks `path`, its `${VAR}`s from the environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, &|v| std::env::var(v).ok())
    }

    /// Reads and checks `path`, its `${VAR}`s read through `env`.
    pub fn load_with(path: &Path, env: &Env) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Config::parse_with(&text, env).map_err(|e| match e {
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
            if config.database.is_relative() && config.database_url().is_none() {
                config.database = dir.join(&config.database);
            }
            if let Some(r) = config.node.run_dir.as_mut().filter(|r| r.is_relative()) {
                *r = dir.join(&*r);
            }
            if let Some(ingest) = &mut config.ingest {
                for p in [&mut ingest.inbox, &mut ingest.dir] {
                    if p.is_relative() {
                        *p = dir.join(&*p);
                    }
                }
            }
            if let Some(l) = config.gpus.ledger.as_mut().filter(|l| l.is_relative()) {
                *l = dir.join(&*l);
            }
            if let Some(c) = config
                .gpus
                .alert_webhook_ca_file
                .as_mut()
                .filter(|c| c.is_relative())
            {
                *c = dir.join(&*c);
            }
            config.config_dir = Some(dir.to_path_buf());
            for l in &mut config.lanes {
                if let Some(w) = l.weights.as_mut().filter(|w| w.is_relative()) {
                    *w = dir.join(&*w);
                }
            }
            if let Some(c) = config.coordinator.as_mut() {
                for m in c.settings.manifest.values_mut() {
                    // `weights`: a pooled model's, for `template = "model"` (as relative).
                    for p in [m.template_file.as_mut(), m.weights.as_mut()] {
                        if let Some(p) = p.filter(|p| p.is_relative()) {
                            *p = dir.join(&*p);
                        }
                    }
                }
            }
            if let Some(pool) = config.coordinator.as_mut().and_then(|c| c.pool.as_mut()) {
                if let Some(l) = pool.ledger.as_mut().filter(|l| l.is_relative()) {
                    *l = dir.join(&*l);
                }
                // A `tts` model's weights is a voice name (`en-us`), not a path.
                for m in pool
                    .models
                    .iter_mut()
                    .filter(|m| m.server.backend.as_deref() != Some("tts"))
                {
                    if let Some(w) = m.weights.as_mut().filter(|w| w.is_relative()) {
                        *w = dir.join(&*w);
                    }
                }
            }
        }
        Ok(config)
    }

    /// Parses and checks a configuration text, its `${VAR}`s from the environment.
    #[cfg(test)]
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, &|v| std::env::var(v).ok())
    }

    /// Parses and checks a configuration text, its `${VAR}`s read through `env`.
    pub fn parse_with(text: &str, env: &Env) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<config>".into(),
            message: without_source(&e.to_string()),
        })?;
        config
            .complete_and_check(env)
            .map_err(|message| ConfigError::Invalid {
                path: "<config>".into(),
                message,
            })?;
        Ok(config)
    }

    /// The PostgreSQL URL when `database` is one (`postgres://` or `postgresql://`).
    pub fn database_url(&self) -> Option<&str> {
        self.database
            .to_str()
            .filter(|d| d.starts_with("postgres://") || d.starts_with("postgresql://"))
    }

    /// `database` as messages show it: a URL without its password.
    pub fn database_display(&self) -> String {
        match self.database_url() {
            Some(url) => redact_password(url),
            None => self.database.display().to_string(),
        }
    }

    /// This node's name: `[node] name`, or the host name.
    pub fn node_name(&self) -> String {
        self.node.node_name()
    }

    /// This node's runtime files: `[node] run_dir`, else `DATABASE.run` beside a SQLite
    /// database, `horos-NAME.run` beside the configuration file with a PostgreSQL one.
    pub fn run_dir(&self) -> PathBuf {
        if let Some(dir) = &self.node.run_dir {
            return dir.clone();
        }
        if self.database_url().is_none() {
            return self.database.with_extension("run");
        }
        let dir = PathBuf::from(format!("horos-{}.run", self.node_name()));
        self.config_dir
            .as_ref()
            .map_or(dir.clone(), |d| d.join(dir))
    }

    /// The VRAM ledger: `[gpus] ledger` (or `[coordinator.pool] ledger`, its older place),
    /// default `vram-ledger.db` next to the configuration file.
    pub fn ledger_path(&self) -> PathBuf {
        let pool = self.coordinator.as_ref().and_then(|c| c.pool.as_ref());
        self.gpus
            .ledger
            .clone()
            .or_else(|| pool.and_then(|p| p.ledger.clone()))
            .unwrap_or_else(|| {
                let file = PathBuf::from("vram-ledger.db");
                self.config_dir
                    .as_ref()
                    .map_or(file.clone(), |d| d.join(file))
            })
    }

    /// Fills the values that follow from others (default lane ports, the vLLM shorthand's
    /// command, the allocator's GPU) and checks each section; the error names the key.
    fn complete_and_check(&mut self, env: &Env) -> Result<(), String> {
        self.node.validate()?;
        self.queue.validate()?;
        // What the `${VAR}`s expand to, the secrets among them remembered for the logs.
        let recording = secrets::Recording::new(env);
        let expanding = |name: &str| recording.get(name);
        if let Some(db) = self.database.to_str()
            && db.contains("${")
        {
            // A password kept out of the file: `postgres://horos:${PGPASSWORD}@db/horos`.
            self.database =
                PathBuf::from(expand_env(db, &expanding).map_err(|e| format!("database: {e}"))?);
        }
        self.expand_server_env(&expanding)?;
        self.secrets = recording.into_secrets();
        if let Some(c) = &self.coordinator {
            for key in secrets::of_coordinator(&c.settings, env) {
                self.secrets.push(key);
            }
        }
        if let Some(db) = self.database.to_str()
            && db.contains("://")
            && self.database_url().is_none()
        {
            return Err(format!(
                "database `{}`: a SQLite file path or a postgres:// URL",
                redact_password(db)
            ));
        }
        horos_modes::settings::complete_lanes(&mut self.lanes)?;
        if let Some(ingest) = &self.ingest {
            ingest.validate()?;
        }
        if let Some(a) = &self.allocator {
            a.validate(&self.lanes)?;
            if a.pool.is_some()
                && self
                    .coordinator
                    .as_ref()
                    .and_then(|c| c.pool.as_ref())
                    .is_none()
            {
                return Err(
                    "[allocator.pool] gives GPUs to the models loaded on demand: it needs \
                     [coordinator.pool]"
                        .into(),
                );
            }
            a.place_lanes(&mut self.lanes);
        }
        self.give_manifest_weights()?;
        if let Some(c) = &self.coordinator {
            c.validate(&self.lanes)?;
            if let (Some(a), Some(b)) = (
                &self.gpus.ledger,
                c.pool.as_ref().and_then(|p| p.ledger.as_ref()),
            ) && a != b
            {
                return Err(format!(
                    "gpus.ledger `{}` and coordinator.pool.ledger `{}` differ: one ledger holds \
                     every booking on this machine (set gpus.ledger only)",
                    a.display(),
                    b.display()
                ));
            }
        }
        self.gpus.validate()?;
        self.check_lanes_fit_one_gpu()?;
        Ok(())
    }

    /// `${VAR}` in the servers' commands and model paths, expanded through `env` (a binary
    /// or a model kept where each machine has its own: `command = ["${HOROS_LLAMA_SERVER}",
    /// "-m", "${HOROS_SMOLLM2_GGUF}"]`): a lane's `command` and `weights`, a pooled model's
    /// `command`, `binary` and `weights`. The message names the key.
    fn expand_server_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
        let expand_all = |key: &str, args: &mut Vec<String>| -> Result<(), String> {
            for (k, a) in args.iter_mut().enumerate() {
                *a = expand_env(a, env).map_err(|e| format!("{key}[{k}]: {e}"))?;
            }
            Ok(())
        };
        let expand_path = |key: &str, p: &mut PathBuf| -> Result<(), String> {
            if let Some(t) = p.to_str().filter(|t| t.contains("${")) {
                *p = PathBuf::from(expand_env(t, env).map_err(|e| format!("{key}: {e}"))?);
            }
            Ok(())
        };
        for (i, l) in self.lanes.iter_mut().enumerate() {
            if let Some(c) = l.command.as_mut() {
                expand_all(&format!("lane[{i}].command"), c)?;
            }
            if let Some(w) = l.weights.as_mut() {
                expand_path(&format!("lane[{i}].weights"), w)?;
            }
        }
        let pool = self.coordinator.as_mut().and_then(|c| c.pool.as_mut());
        for (i, m) in pool
            .into_iter()
            .flat_map(|p| p.models.iter_mut().enumerate())
        {
            let at = format!("coordinator.pool.model[{i}]");
            expand_all(&format!("{at}.command"), &mut m.server.command)?;
            if let Some(w) = m.weights.as_mut() {
                expand_path(&format!("{at}.weights"), w)?;
            }
            if let Some(b) = m.server.binary.as_mut() {
                *b = expand_env(b, env).map_err(|e| format!("{at}.binary: {e}"))?;
            }
        }
        Ok(())
    }

    /// `template = "model"` in `[coordinator.manifest.NAME]`: the entry reads the model's own
    /// template from the `weights` of the pooled model named NAME (a `.gguf` or a model
    /// directory; the manifest crate's rule, [`ModelManifest::with_weights`]). Refused, naming
    /// the key, when no pooled model has that name or it has no weights path (none, or a `tts`
    /// model's voice). An entry that also has `template_file` is left to the manifest's check.
    ///
    /// [`ModelManifest::with_weights`]: horos_coordinator::ModelManifest::with_weights
    fn give_manifest_weights(&mut self) -> Result<(), String> {
        let Some(c) = self.coordinator.as_mut() else {
            return Ok(());
        };
        let models = c.pool.as_ref().map_or(&[][..], |p| &p.models[..]);
        for (name, m) in c
            .settings
            .manifest
            .iter_mut()
            .filter(|(_, m)| m.wants_model_template() && m.template_file.is_none())
        {
            let at = format!("coordinator.manifest.{name}.template = \"model\"");
            let Some(pooled) = models.iter().find(|p| &p.name == name) else {
                return Err(format!(
                    "{at}: no [[coordinator.pool.model]] is named `{name}` (the model's own \
                     template is read from a pooled model's weights; or name a built-in template \
                     or a template_file)"
                ));
            };
            let weights = pooled
                .weights
                .as_deref()
                .filter(|_| pooled.server.backend.as_deref() != Some("tts"));
            let Some(weights) = weights else {
                return Err(format!(
                    "{at}: the pooled model `{name}` has no weights path (a .gguf or a model \
                     directory) to read its template from"
                ));
            };
            *m = std::mem::take(m).with_weights(weights);
        }
        Ok(())
    }

    /// Under `[allocator]` a lane's server runs on one GPU per instance: a lane that books more
    /// than the smallest simulated GPU holds could never start (with NVML the sizes are known
    /// only at run time, where such a start fails with the memory it lacked).
    fn check_lanes_fit_one_gpu(&self) -> Result<(), String> {
        let Some(a) = &self.allocator else {
            return Ok(());
        };
        if self.gpus.source != GpuSource::Simulated {
            return Ok(());
        }
        let sizes: Vec<u64> = a
            .gpus
            .iter()
            .filter_map(|g| self.gpus.simulated_mb.get(*g as usize).copied())
            .collect();
        let Some(smallest) = sizes.iter().min().copied() else {
            return Ok(());
        };
        for l in self.lanes.iter().filter(|l| l.is_managed()) {
            if let Some(mb) = l.vram_mb.filter(|mb| *mb > smallest) {
                return Err(format!(
                    "lane `{}`: vram_mb = {mb} is more than a GPU of [allocator] holds \
                     ({smallest} MB): under [allocator] a lane's server runs on one GPU; serve \
                     this model from [coordinator.pool] with [allocator.pool], where it is split \
                     over the GPUs given to the pool",
                    l.queue
                ));
            }
        }
        Ok(())
    }
}

/// Reads an environment variable (`${VAR}` in the file); a test gives its own.
pub type Env = dyn Fn(&str) -> Option<String>;

/// `text` with its `${VAR}`s expanded through `env` (the message names the variable).
fn expand_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    horos_server_control::settings::expand_env(text, env).map_err(String::from)
}

/// toml's message without the values of the file's lines it quotes (a value there may be a
/// secret: the message goes to logs and to a refused reload's answer): where, the key of the
/// quoted line (`key = ...`) or its table header, and what is wrong.
fn without_source(message: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for l in message.lines() {
        let t = l.trim_start();
        if t.starts_with('|') {
            continue; // the gutter, or the caret under the fault
        }
        match t.split_once(" |") {
            Some((n, quoted)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
                let quoted = quoted.trim();
                if quoted.starts_with('[') {
                    out.push(format!("{n} | {quoted}"));
                } else if let Some((key, _)) = quoted.split_once('=') {
                    out.push(format!("{n} | {} = ...", key.trim()));
                }
            }
            _ => out.push(l.to_owned()),
        }
    }
    out.join("\n").trim_end().to_owned()
}

/// `scheme://user:password@host/...` without the password.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}
