//! Models: what a running coordinator serves and the state of each (ready, loading, idle;
//! pinned; remote), or an operator's load (waiting until it serves), unload, pin or unpin of
//! one, through its admin API.

use std::str::FromStr;

use horos_server_control::routes::encode_segment;
use horos_server_control::{Share, SlotState};
use serde::{Deserialize, Deserializer, Serialize};

use crate::admin::AdminClient;
use crate::error::OpsError;

/// What to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelAction {
    /// List the models (the default).
    #[default]
    List,
    /// Load a model now and wait until it serves (a preload).
    Load,
    /// Unload a model now (a pinned or busy model stays).
    Unload,
    /// Pin a model: never evicted nor unloaded by its stay-warm timer.
    Pin,
    /// Unpin a model.
    Unpin,
    /// Unload every idle model the coordinator loaded on demand (pinned and busy ones stay).
    UnloadAll,
}

impl ModelAction {
    /// Its name: `list`, `load`, `unload`, `pin`, `unpin`, `unload_all`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Load => "load",
            Self::Unload => "unload",
            Self::Pin => "pin",
            Self::Unpin => "unpin",
            Self::UnloadAll => "unload_all",
        }
    }
}

impl FromStr for ModelAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Self::List,
            Self::Load,
            Self::Unload,
            Self::Pin,
            Self::Unpin,
            Self::UnloadAll,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or_else(|| format!("unknown action `{s}` (list, load, unload, pin, unpin, unload_all)"))
    }
}

impl<'de> Deserialize<'de> for ModelAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The models, or an operation on one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({}))]
#[schemars(example = serde_json::json!({"action": "load", "model": "qwen3-8b"}))]
#[schemars(example = serde_json::json!({"action": "unload_all"}))]
pub struct ModelsArgs {
    /// What to do (default: list).
    #[serde(default)]
    pub action: ModelAction,
    /// The model (every action but list and unload_all).
    #[serde(default)]
    pub model: Option<String>,
}

/// One model as the coordinator shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// Its name.
    pub model: String,
    /// `IDLE`, `LOADING`, `READY` or `STOPPING`.
    pub state: SlotState,
    /// Its server's port (none for a fixed or remote server).
    #[serde(default)]
    pub port: Option<u16>,
    /// Requests in progress.
    #[serde(default)]
    pub active: usize,
    /// Never evicted.
    #[serde(default)]
    pub pinned: bool,
    /// Seconds since its last use.
    #[serde(default)]
    pub idle_s: f64,
    /// Where its weights are (GPU and MB).
    #[serde(default)]
    pub gpus: Vec<Share>,
    /// Served by another machine.
    #[serde(default)]
    pub remote: bool,
}

/// The coordinator's models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    /// Each model.
    pub data: Vec<ModelRow>,
}

/// A model loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Loaded {
    /// The model.
    pub model: String,
    /// It serves.
    pub ready: bool,
    /// How long the load took, in seconds.
    pub took_s: f64,
}

/// A model unloaded, or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unloaded {
    /// The model.
    pub model: String,
    /// Whether it was unloaded (false: it was not loaded, or is pinned or busy).
    pub unloaded: bool,
}

/// What an unload of every idle model did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnloadedAll {
    /// The models unloaded.
    pub unloaded: Vec<String>,
    /// The loaded models that stay: pinned, or serving a request.
    pub kept: Vec<String>,
}

/// A model pinned or unpinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinned {
    /// The model.
    pub model: String,
    /// Whether it is pinned now.
    pub pinned: bool,
}

/// What [`models`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ModelsAnswer {
    /// The models.
    List(ModelList),
    /// A model loaded.
    Loaded(Loaded),
    /// A model unloaded (or kept).
    Unloaded(Unloaded),
    /// A model pinned or unpinned.
    Pinned(Pinned),
    /// Every idle model unloaded.
    UnloadedAll(UnloadedAll),
}

/// Lists the coordinator's models, or loads, unloads, pins or unpins `args.model`, or unloads
/// every idle model (`unload_all`)
/// ([`OpsError::InvalidArgument`] when an operation names no model).
pub async fn models(admin: &AdminClient, args: ModelsArgs) -> Result<ModelsAnswer, OpsError> {
    match args.action {
        ModelAction::List => return Ok(ModelsAnswer::List(admin.get("/api/v1/models").await?)),
        ModelAction::UnloadAll => {
            let all = admin.post("/api/v1/models/unload").await?;
            return Ok(ModelsAnswer::UnloadedAll(all));
        }
        _ => {}
    }
    let action = args.action.as_str();
    let model = args
        .model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| OpsError::invalid("model", format!("`{action}` needs `model`")))?;
    // One segment whatever the name holds (`/`, `?`, `%`, spaces).
    let path = format!("/api/v1/models/{}/{action}", encode_segment(&model));
    Ok(match args.action {
        ModelAction::Load => ModelsAnswer::Loaded(admin.post(&path).await?),
        ModelAction::Unload => ModelsAnswer::Unloaded(admin.post(&path).await?),
        _ => ModelsAnswer::Pinned(admin.post(&path).await?),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;
    use std::time::Duration;

    use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream, UpstreamSet};
    use horos_fakeai::{FakeConfig, FakeServer};
    use serde_json::json;

    use super::*;
    use crate::error::ErrorKind;

    /// A coordinator serving fakeai's model `local` as a fixed upstream, with an admin key.
    async fn coordinator() -> (FakeServer, Coordinator, AdminClient) {
        let fake = FakeServer::start(FakeConfig::default()).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bind = listener.local_addr().unwrap();
        let config = CoordinatorConfig {
            bind,
            api_key: Some("adm-key".into()),
            ..CoordinatorConfig::default()
        };
        let upstream = StaticUpstream::new().with("local", fake.url());
        let coordinator = Coordinator::builder(
            config,
            Arc::new(UpstreamSet::new().with(Arc::new(upstream))),
        )
        .start(listener)
        .await
        .unwrap();
        let admin = AdminClient::new(
            crate::admin::base_url(bind),
            Some("adm-key".into()),
            Duration::from_secs(30),
        )
        .unwrap();
        (fake, coordinator, admin)
    }

    #[tokio::test]
    async fn the_models_are_listed_and_a_fixed_one_cannot_be_unloaded() {
        let (_fake, coordinator, admin) = coordinator().await;
        let ModelsAnswer::List(list) = models(&admin, ModelsArgs::default()).await.unwrap() else {
            panic!("not a list");
        };
        assert_eq!(list.data.len(), 1, "{list:?}");
        assert_eq!(
            (list.data[0].model.as_str(), list.data[0].state),
            ("local", SlotState::Ready)
        );
        let args: ModelsArgs =
            serde_json::from_value(json!({"action": "unload", "model": "local"})).unwrap();
        let e = models(&admin, args).await.unwrap_err();
        assert!(
            matches!(e, OpsError::Coordinator { status: 409, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("cannot be unloaded"), "{e}");
        // A name with `/`, a space and `?` reaches the coordinator as one segment, whole.
        let args: ModelsArgs =
            serde_json::from_value(json!({"action": "pin", "model": "org/a b?c"})).unwrap();
        let e = models(&admin, args).await.unwrap_err();
        assert!(
            matches!(e, OpsError::Coordinator { status: 404, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("org/a b?c"), "{e}");
        // A wrong key: the setting to fix is named.
        let wrong =
            AdminClient::new(admin.base(), Some("nope".into()), Duration::from_secs(5)).unwrap();
        let e = models(&wrong, ModelsArgs::default()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.to_string().contains("api_key_env"), "{e}");
        coordinator.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn an_operation_needs_a_model_and_a_known_action() {
        let admin = AdminClient::new("http://127.0.0.1:9", None, Duration::from_secs(1)).unwrap();
        let e = models(
            &admin,
            ModelsArgs {
                action: ModelAction::Pin,
                model: None,
            },
        )
        .await
        .unwrap_err();
        assert_eq!(e.param(), Some("model"));
        let e = serde_json::from_value::<ModelsArgs>(json!({"action": "explode"})).unwrap_err();
        assert!(e.to_string().contains("unknown action `explode`"), "{e}");
    }
}
