//! The pool as a configuration file describes it (`[coordinator.pool]` in the reference
//! binary): [`PoolSettings`], [`PoolConfig`] plus the memory budget, the ledger, the servers'
//! start time-out and the models ([`PooledModelSettings`]). A model's server keys are another
//! crate's (the `S` of both types, e.g. horos-servers' `ModelServerSettings`): the pool reads
//! its own keys of a model and hands the rest to `S`.
//!
//! What follows from them when the pool is set up: the monitor it measures memory on
//! ([`PoolSettings::monitor`]: the GPUs read, else the memory budget as a simulated fleet), the
//! ledger with the budget as each GPU's capacity ([`PoolSettings::open_ledger`]), and the pinned
//! models loaded at start ([`PoolSettings::preload_pinned`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use horos_server_control::settings::{InvalidSettings, Problem, Table, from_table, take_keys};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::config::{Category, ModelSpec, PoolConfig};
use super::upstream::PoolUpstream;
use crate::estimate::ModelFacts;
use crate::ledger::{LedgerError, VramLedger};
use crate::monitor::sim_fleet::SimFleet;
use crate::monitor::{GpuMonitor, MonitorError};

/// The model pool's settings. Each model is a server the pool starts when a request needs it
/// (on a port of `port_min..=port_max`, on the GPUs it picks), stops when its stay-warm time
/// is over, and evicts for a more important request when memory is short. Its keys are
/// [`PoolConfig`]'s (`port_min`, `port_max`, `margin_mb`, `[stay_warm]`, ...) plus the memory
/// budget, the ledger, the servers' start time-out and the models (`[[model]]`).
#[derive(Debug, Clone)]
pub struct PoolSettings<S> {
    /// The pool's settings as written.
    pub settings: PoolConfig,
    /// Memory the pool may fill on each GPU, MB. Where NVML answers it caps each GPU's
    /// capacity (the driver's free memory is checked as well); without NVML it is required and
    /// is a budget the pool accounts for itself, e.g. the RAM given to CPU servers.
    pub memory_mb: Option<u64>,
    /// GPUs of the budget without NVML.
    pub gpus: u32,
    /// The VRAM ledger as written here (in the reference binary, an older place for `[gpus]
    /// ledger`; the two may not differ).
    pub ledger: Option<PathBuf>,
    /// How long a server may take to become healthy, seconds.
    pub start_timeout_s: u64,
    /// The models.
    pub models: Vec<PooledModelSettings<S>>,
}

/// The keys of the pool's section that are not [`PoolConfig`]'s.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(bound = "S: DeserializeOwned")]
struct OwnKeys<S> {
    #[serde(default)]
    memory_mb: Option<u64>,
    #[serde(default = "default_pool_gpus")]
    gpus: u32,
    #[serde(default)]
    ledger: Option<PathBuf>,
    #[serde(default = "default_pool_start")]
    start_timeout_s: u64,
    #[serde(rename = "model", default = "Vec::new")]
    models: Vec<PooledModelSettings<S>>,
}

fn default_pool_gpus() -> u32 {
    1
}
fn default_pool_start() -> u64 {
    600
}

impl<'de, S: DeserializeOwned> Deserialize<'de> for PoolSettings<S> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = Table::deserialize(d)?;
        let own: OwnKeys<S> = from_table(take_keys(
            &mut table,
            &["memory_mb", "gpus", "ledger", "start_timeout_s", "model"],
        ))?;
        Ok(PoolSettings {
            settings: from_table(table)?,
            memory_mb: own.memory_mb,
            gpus: own.gpus,
            ledger: own.ledger,
            start_timeout_s: own.start_timeout_s,
            models: own.models,
        })
    }
}

impl<S> PoolSettings<S> {
    /// Checks the pool's own values (each model's server is its `S`'s to check); the message
    /// names the key (`coordinator.pool.port_min`).
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        self.settings
            .validate()
            .map_err(|e| InvalidSettings(format!("coordinator.pool.{e}")))?;
        if self.memory_mb == Some(0) || self.gpus == 0 {
            return Err(InvalidSettings(
                "coordinator.pool: memory_mb and gpus must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

impl<S> PoolSettings<S> {
    /// The ports of `port_min..=port_max` that something else holds now: a [`Problem`] of
    /// `coordinator.pool.port_min` when any is (the pool's servers would fail to start there).
    pub fn port_problems(&self) -> Vec<Problem> {
        let busy: Vec<u16> = (self.settings.port_min..=self.settings.port_max)
            .filter(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_err())
            .collect();
        if busy.is_empty() {
            return Vec::new();
        }
        vec![Problem::new(
            "coordinator.pool.port_min",
            format!(
                "ports {busy:?} of {}..={} are in use",
                self.settings.port_min, self.settings.port_max
            ),
            "stop what holds them, or move port_min / port_max to a free range",
        )]
    }

    /// The pinned models' memory, for the VRAM plan ([`plan`](crate::plan)): each pinned
    /// model's `vram_mb`, else its estimate from `weights` and name.
    pub fn pinned_demands(&self) -> Vec<crate::plan::VramDemand> {
        self.models
            .iter()
            .enumerate()
            .filter(|(_, m)| m.pin)
            .filter_map(|(i, m)| {
                let facts = ModelFacts {
                    name: m.name.clone(),
                    explicit_mb: m.vram_mb,
                    metadata_mb: None,
                    path: m.weights.clone(),
                };
                let mb = crate::estimate::estimate(&facts).ok()?.mb;
                Some(crate::plan::VramDemand {
                    key: format!("coordinator.pool.model[{i}].vram_mb"),
                    mb,
                    fit: crate::plan::Fit::Pool,
                })
            })
            .collect()
    }
}

impl<S> PoolSettings<S> {
    /// What the pool measures memory on: `gpus`, the GPUs' monitor where they are read (the
    /// same object the sampler reads); without it `memory_mb` is a budget accounted over `gpus`
    /// simulated GPUs (the servers' memory is not measured), required then.
    pub fn monitor(
        &self,
        gpus: Option<Arc<dyn GpuMonitor>>,
    ) -> Result<Arc<dyn GpuMonitor>, PoolSetupError> {
        match (gpus, self.memory_mb) {
            (Some(monitor), _) => Ok(monitor),
            (None, Some(mb)) => Ok(Arc::new(SimFleet::new(self.gpus, mb))),
            (None, None) => Err(PoolSetupError::NoBudget),
        }
    }

    /// The VRAM ledger at `path` with `monitor`'s GPUs registered, each GPU's capacity capped
    /// at `memory_mb` where it is given (the pool may fill no more).
    pub fn open_ledger(
        &self,
        path: &Path,
        monitor: &dyn GpuMonitor,
    ) -> Result<VramLedger, PoolSetupError> {
        let fail = |source| PoolSetupError::Ledger {
            path: path.to_path_buf(),
            source,
        };
        let ledger = VramLedger::open(path).map_err(fail)?;
        ledger.register_from(monitor).map_err(fail)?;
        if let Some(cap) = self.memory_mb {
            for s in monitor.sample()? {
                ledger
                    .set_capacity(s.index, cap.min(s.memory_total_mb))
                    .map_err(fail)?;
            }
        }
        Ok(ledger)
    }

    /// Loads the pinned models into `pool` at start, each on a task of its own (the rest of the
    /// system does not wait for them; a request for one meanwhile waits for its load as usual).
    /// A pinned model is the most important request: it may take the room of idle ones. In a
    /// pool confined to the GPUs an allocator gives it ([`ModelPool::confine_to_given_gpus`]),
    /// one that finds no room yet (before the allocator's first plan is carried out) or fails to
    /// start is tried again after a back-off from 1 s to 60 s, until it is loaded; elsewhere a
    /// failure is logged once. Each task ends then.
    ///
    /// [`ModelPool::confine_to_given_gpus`]: super::ModelPool::confine_to_given_gpus The outcomes are logged; the tasks are returned (dropping them lets them run).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn preload_pinned(&self, pool: &PoolUpstream) -> Vec<tokio::task::JoinHandle<()>> {
        use horos_server_control::UpstreamPool;
        self.models
            .iter()
            .filter(|m| m.pin)
            .map(|m| {
                let (pool, name) = (pool.clone(), m.name.clone());
                tokio::spawn(async move {
                    let mut backoff = std::time::Duration::from_secs(1);
                    for failures in 1u32.. {
                        // Most important: a pinned model may take the room of idle ones.
                        match pool.acquire(&name, i32::MIN).await {
                            Ok(lease) => {
                                drop(lease);
                                tracing::info!(model = %name, "pinned model loaded at start");
                                return;
                            }
                            // Outside a confined pool the room is what it is: one try.
                            Err(e) if pool.pool().given_gpus().is_none() => {
                                tracing::warn!(model = %name, error = %e, "pinned model not loaded");
                                return;
                            }
                            Err(e) => {
                                if failures == 1 || failures.is_power_of_two() {
                                    tracing::warn!(model = %name, error = %e, failures, "pinned model not loaded yet: trying again");
                                }
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(std::time::Duration::from_secs(60));
                            }
                        }
                    }
                })
            })
            .collect()
    }
}

/// Why the pool's monitor or ledger cannot be set up from its settings.
#[derive(Debug, thiserror::Error)]
pub enum PoolSetupError {
    /// No GPU is read and no memory budget is given.
    #[error(
        "coordinator.pool: no GPU is read here (NVML unavailable, or [gpus] source = \"none\"); \
         give memory_mb (the memory budget of the pool's servers)"
    )]
    NoBudget,
    /// The ledger cannot be opened or written.
    #[error("VRAM ledger {}: {source}", path.display())]
    Ledger {
        /// The ledger's file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: LedgerError,
    },
    /// The GPUs cannot be read.
    #[error(transparent)]
    Monitor(#[from] MonitorError),
}

/// One model the pool serves (`[[coordinator.pool.model]]`): the pool's keys of it, and its
/// server (`S`, from every other key).
#[derive(Debug, Clone)]
pub struct PooledModelSettings<S> {
    /// The model name clients ask for.
    pub name: String,
    /// Memory it takes, MB (else estimated from `weights`, else from the name).
    pub vram_mb: Option<u64>,
    /// Its weight file or directory for the estimate: a GGUF file's header (weights and
    /// attention cache), else the files' sizes (GGUF ×1.1, safetensors ×1.3).
    pub weights: Option<PathBuf>,
    /// `llm`, `vision`, `diffusion`, `embedding`, `speech` or `other` (selects the stay-warm time).
    pub category: Category,
    /// Never evicted nor unloaded when idle.
    pub pin: bool,
    /// Overrides the category's stay-warm time, seconds.
    pub stay_warm_s: Option<u64>,
    /// Seconds a cold load is expected to take before one is measured (the prior of its swap
    /// costs; 60 when absent).
    pub swap_in_s: Option<f64>,
    /// Its server: every other key of the model.
    pub server: S,
}

/// The pool's keys of a model.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelKeys {
    name: String,
    #[serde(default)]
    vram_mb: Option<u64>,
    #[serde(default)]
    weights: Option<PathBuf>,
    #[serde(default)]
    category: Category,
    #[serde(default)]
    pin: bool,
    #[serde(default)]
    stay_warm_s: Option<u64>,
    #[serde(default)]
    swap_in_s: Option<f64>,
}

const MODEL_KEYS: [&str; 7] = [
    "name",
    "vram_mb",
    "weights",
    "category",
    "pin",
    "stay_warm_s",
    "swap_in_s",
];

impl<'de, S: DeserializeOwned> Deserialize<'de> for PooledModelSettings<S> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = Table::deserialize(d)?;
        let own: ModelKeys = from_table(take_keys(&mut table, &MODEL_KEYS))?;
        if let Some(s) = own.swap_in_s.filter(|s| !(s.is_finite() && *s >= 0.0)) {
            return Err(serde::de::Error::custom(format!(
                "model `{}`: swap_in_s = {s}: seconds, 0 or more",
                own.name
            )));
        }
        Ok(PooledModelSettings {
            name: own.name,
            vram_mb: own.vram_mb,
            weights: own.weights,
            category: own.category,
            pin: own.pin,
            stay_warm_s: own.stay_warm_s,
            swap_in_s: own.swap_in_s,
            server: from_table(table)?,
        })
    }
}

impl<S> PooledModelSettings<S> {
    /// What the pool is told of the model, its server's backend `settings` given.
    pub fn spec(&self, settings: serde_json::Value) -> ModelSpec {
        ModelSpec {
            id: self.name.clone(),
            category: self.category,
            pin: self.pin,
            stay_warm_s: self.stay_warm_s,
            facts: ModelFacts {
                name: self.name.clone(),
                explicit_mb: self.vram_mb,
                metadata_mb: None,
                path: self.weights.clone(),
            },
            settings,
            swap_in_s: self.swap_in_s,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A server of a test's own: a command.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Command {
        command: Vec<String>,
    }

    fn pool(text: &str) -> Result<PoolSettings<Command>, String> {
        let table: Table = text.parse().map_err(|e| format!("{e}"))?;
        let p: PoolSettings<Command> =
            from_table(table).map_err(|e: serde::de::value::Error| e.to_string())?;
        p.validate()?;
        Ok(p)
    }

    #[test]
    fn without_gpus_read_the_memory_budget_is_a_simulated_fleet_and_the_ledger_capacity() {
        let p = pool("memory_mb = 1000\ngpus = 2\n").unwrap();
        let monitor = p.monitor(None).unwrap();
        let sizes: Vec<u64> = monitor
            .sample()
            .unwrap()
            .iter()
            .map(|s| s.memory_total_mb)
            .collect();
        assert_eq!(sizes, [1000, 1000]);
        // GPUs read: theirs, the budget capping each one's capacity in the ledger.
        let gpus: Arc<dyn GpuMonitor> = Arc::new(SimFleet::with_sizes(&[24_000, 500]));
        let monitor = p.monitor(Some(Arc::clone(&gpus))).unwrap();
        assert!(Arc::ptr_eq(&monitor, &gpus));
        let dir = tempfile::tempdir().unwrap();
        let ledger = p
            .open_ledger(&dir.path().join("ledger.db"), monitor.as_ref())
            .unwrap();
        let caps: Vec<u64> = (0..2).map(|g| ledger.free_mb(g).unwrap()).collect();
        assert_eq!(caps, [1000, 500]);
        let no_budget = pool("").unwrap();
        let e = no_budget.monitor(None).err().unwrap().to_string();
        assert!(
            e.starts_with("coordinator.pool: no GPU is read here"),
            "{e}"
        );
        assert!(e.contains("give memory_mb"), "{e}");
        let e = p
            .open_ledger(dir.path(), monitor.as_ref())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with(&format!("VRAM ledger {}: ", dir.path().display())),
            "{e}"
        );
    }

    /// `p`'s models as an upstream over one simulated GPU of 10,000 MB.
    fn simulated_upstream(p: &PoolSettings<Command>) -> PoolUpstream {
        use crate::pool::{ModelPool, SimBackendFactory};
        let fleet = Arc::new(SimFleet::new(1, 10_000));
        let pool = ModelPool::new(
            p.settings.clone(),
            Arc::new(SimBackendFactory::new(Arc::clone(&fleet), 1000, 0)),
            fleet,
            None,
        );
        PoolUpstream::new(pool, p.models.iter().map(|m| m.spec(serde_json::json!({}))))
    }

    #[test]
    fn a_vision_model_of_the_pool_is_said_to_read_images() {
        use horos_server_control::UpstreamPool;
        let p = pool(
            "memory_mb = 10000\n\
             [[model]]\nname = \"vl\"\ncategory = \"vision\"\nvram_mb = 1000\ncommand = [\"s\"]\n\
             [[model]]\nname = \"text\"\nvram_mb = 1000\ncommand = [\"s\"]\n",
        )
        .unwrap();
        let upstream = simulated_upstream(&p);
        assert_eq!(upstream.reads_images("vl"), Some(true));
        assert_eq!(upstream.reads_images("text"), Some(false));
        assert_eq!(upstream.reads_images("unknown"), None);
    }

    #[tokio::test]
    async fn pinned_models_are_loaded_at_start_and_the_others_on_demand() {
        use crate::pool::SlotState;
        let p = pool(
            "memory_mb = 10000\n\
             [[model]]\nname = \"pinned\"\npin = true\nvram_mb = 1000\ncommand = [\"s\"]\n\
             [[model]]\nname = \"other\"\nvram_mb = 1000\ncommand = [\"s\"]\n\
             [[model]]\nname = \"huge\"\npin = true\nvram_mb = 99999\ncommand = [\"s\"]\n",
        )
        .unwrap();
        let upstream = simulated_upstream(&p);
        let tasks = p.preload_pinned(&upstream);
        assert_eq!(tasks.len(), 2);
        for t in tasks {
            t.await.unwrap();
        }
        let loaded: Vec<(String, SlotState)> = upstream
            .pool()
            .slots()
            .into_iter()
            .filter(|s| s.state == SlotState::Ready)
            .map(|s| (s.model, s.state))
            .collect();
        // `huge` does not fit: logged, not loaded.
        assert_eq!(loaded, [("pinned".to_owned(), SlotState::Ready)]);
    }

    #[test]
    fn pool_section_defaults_and_checks() {
        let base = "memory_mb = 1000\n\
                    [[model]]\nname = \"a\"\ncommand = [\"srv\", \"--port\", \"{port}\"]\n\
                    category = \"embedding\"\nstay_warm_s = 5\n";
        let p = pool(base).unwrap();
        assert_eq!(
            (p.settings.port_min, p.settings.port_max, p.gpus),
            (8300, 8399, 1)
        );
        assert_eq!((p.ledger, p.start_timeout_s), (None, 600));
        assert_eq!(p.models[0].category, Category::Embedding);
        assert_eq!(p.models[0].stay_warm_s, Some(5));
        assert_eq!(p.models[0].server.command, ["srv", "--port", "{port}"]);
        let spec = p.models[0].spec(serde_json::json!({"k": 1}));
        assert_eq!((spec.id.as_str(), spec.facts.name.as_str()), ("a", "a"));
        let e = pool(&base.replace("memory_mb = 1000", "port_min = 9000\nport_max = 8000"))
            .unwrap_err();
        assert!(e.contains("port_min"), "{e}");
        let p = pool(&base.replace(
            "memory_mb = 1000",
            "memory_mb = 1000\nreclaim_checks = 5\n[stay_warm]\nllm_s = 30",
        ))
        .unwrap();
        assert_eq!(
            (p.settings.reclaim_checks, p.settings.stay_warm.llm_s),
            (5, 30)
        );
        let p = pool(&base.replace(
            "memory_mb = 1000",
            "memory_mb = 1000\n[stay_warm]\nspeech_s = 7",
        ))
        .unwrap();
        assert_eq!(p.settings.stay_warm.speech_s, 7);
        let p = pool(&base.replace("\"embedding\"", "\"speech\"")).unwrap();
        assert_eq!(p.models[0].category, Category::Speech);
        let e = pool(&base.replace("memory_mb = 1000", "memory_mb = 1000\nport = 3")).unwrap_err();
        assert!(e.contains("port"), "{e}");
        let e = pool(&base.replace("memory_mb = 1000", "memory_mb = 0")).unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        let e =
            pool(&base.replace("category = \"embedding\"", "category = \"sound\"")).unwrap_err();
        assert!(e.contains("sound"), "{e}");
        let e = pool(&base.replace("category", "kategory")).unwrap_err();
        assert!(e.contains("kategory"), "{e}");
    }
}
