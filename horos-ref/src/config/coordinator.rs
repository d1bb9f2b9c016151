//! `[coordinator]`, its `[[coordinator.model]]` and `[coordinator.pool]`.

use horos_gpu_alloc::pool::settings::PoolSettings;
use horos_server_control::settings::{Table, from_table, take_keys};
use horos_servers::settings::ModelServerSettings;
use serde::Deserialize;

use super::LaneSection;

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
        let mut table = Table::deserialize(d)?;
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

/// `[coordinator.pool]`: gpu-alloc's model pool behind the coordinator
/// ([`PoolSettings`]: gpu-alloc's [`PoolConfig`](horos_gpu_alloc::pool::PoolConfig) keys, the
/// memory budget, the ledger, the servers' start time-out), each `[[coordinator.pool.model]]`'s
/// server horos-servers' [`ModelServerSettings`] (its command, kind or container; the model's
/// name, weights and category are gpu-alloc's
/// [`PooledModelSettings`](horos_gpu_alloc::pool::settings::PooledModelSettings)). Its `ledger`
/// may not differ from `[gpus] ledger` (see [`Config::ledger_path`](super::Config::ledger_path)).
pub type PoolSection = PoolSettings<ModelServerSettings>;

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
        p.validate()?;
        let mut names = std::collections::HashSet::new();
        for (i, m) in p.models.iter().enumerate() {
            m.server.validate(
                &format!("coordinator.pool.model[{i}]"),
                &m.name,
                m.weights.as_deref(),
            )?;
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
