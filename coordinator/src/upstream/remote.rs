//! Models served by OpenAI-compatible APIs elsewhere: always ready, called with their own
//! base URL, model name and API key.

use std::collections::BTreeMap;

use async_trait::async_trait;
use horos_server_control::settings::{BadUrl, http_url};
use http::HeaderValue;
use serde::{Deserialize, Serialize};

use crate::error::InvalidConfig;
use crate::upstream::{Readiness, SlotView, UpstreamError, UpstreamLease, UpstreamPool};

/// Whether this build speaks https to remote models (the `tls` feature).
pub(crate) const TLS: bool = cfg!(feature = "tls");

/// A model served by an OpenAI-compatible API elsewhere (a cloud provider, another team's
/// server): `[coordinator.remotes."NAME"]` in a configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteModel {
    /// The API's base URL as its own clients take it, e.g. `https://api.example.com/v1`.
    pub url: String,
    /// The model's name on that API (default: the name clients use here).
    pub model: Option<String>,
    /// The environment variable holding the API key, sent as `Authorization: Bearer KEY`. The
    /// key itself never appears in the configuration; a variable that is not set when the
    /// coordinator starts is an error.
    pub api_key_env: Option<String>,
}

impl RemoteModel {
    /// Checks the URL (as every URL a setting names is checked: [`http_url`]); the error says
    /// what was expected.
    pub fn validate(&self) -> Result<(), &'static str> {
        http_url(&self.url, TLS).map_err(|e| match e {
            BadUrl::NoTls => "an http:// URL (this build has no TLS: enable the `tls` feature)",
            e => e.expected(),
        })?;
        if self.api_key_env.as_deref().is_some_and(str::is_empty) {
            return Err("an environment variable name in api_key_env");
        }
        Ok(())
    }
}

/// One remote model, its key resolved.
#[derive(Clone)]
struct Remote {
    url: String,
    model: Option<String>,
    authorization: Option<HeaderValue>,
}

/// Remote models by the name clients use here (see [`RemoteModel`]).
#[derive(Clone, Default)]
pub struct RemoteUpstream {
    models: BTreeMap<String, Remote>,
}

impl std::fmt::Debug for RemoteUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("RemoteUpstream")
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl RemoteUpstream {
    /// The remote models of `remotes`, each key read through `env` (the process environment
    /// in [`from_env`](Self::from_env)). A variable that is unset, empty or not a valid header
    /// value is an error naming it, never a silent unauthenticated call.
    pub fn new(
        remotes: &BTreeMap<String, RemoteModel>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, InvalidConfig> {
        let mut models = BTreeMap::new();
        for (name, r) in remotes {
            r.validate().map_err(|expected| InvalidConfig {
                key: format!("remotes.{name}.url"),
                value: r.url.clone(),
                expected,
            })?;
            let authorization = match &r.api_key_env {
                None => None,
                Some(var) => {
                    let bad = |expected| InvalidConfig {
                        key: format!("remotes.{name}.api_key_env"),
                        value: var.clone(),
                        expected,
                    };
                    let key = env(var)
                        .filter(|k| !k.trim().is_empty())
                        .ok_or_else(|| bad("a set, non-empty environment variable"))?;
                    let mut v = HeaderValue::from_str(&format!("Bearer {}", key.trim()))
                        .map_err(|_| bad("a key of visible ASCII characters"))?;
                    v.set_sensitive(true);
                    Some(v)
                }
            };
            models.insert(
                name.clone(),
                Remote {
                    url: r.url.clone(),
                    model: r.model.clone(),
                    authorization,
                },
            );
        }
        Ok(Self { models })
    }

    /// [`new`](Self::new) with the keys read from the process environment.
    pub fn from_env(remotes: &BTreeMap<String, RemoteModel>) -> Result<Self, InvalidConfig> {
        Self::new(remotes, |var| std::env::var(var).ok())
    }

    /// Whether `model` is one of these remote models.
    pub fn serves(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

#[async_trait]
impl UpstreamPool for RemoteUpstream {
    fn models(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    fn readiness(&self, model: &str) -> Readiness {
        if self.models.contains_key(model) {
            Readiness::Ready
        } else {
            Readiness::Unknown
        }
    }

    async fn acquire(&self, model: &str, _priority: i32) -> Result<UpstreamLease, UpstreamError> {
        let r = self
            .models
            .get(model)
            .ok_or_else(|| UpstreamError::UnknownModel(model.to_owned()))?;
        Ok(UpstreamLease::remote(
            r.url.clone(),
            r.model.clone(),
            r.authorization.clone(),
        ))
    }

    fn slots(&self) -> Vec<SlotView> {
        self.models
            .keys()
            .map(|m| SlotView::always_ready(m))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remotes(env_var: Option<&str>) -> BTreeMap<String, RemoteModel> {
        BTreeMap::from([(
            "cloud:big".to_owned(),
            RemoteModel {
                url: "http://127.0.0.1:9/v1/".into(),
                model: Some("big-2025".into()),
                api_key_env: env_var.map(str::to_owned),
            },
        )])
    }

    #[tokio::test]
    async fn a_lease_carries_the_remote_url_name_and_key() {
        let up = RemoteUpstream::new(&remotes(Some("K")), |v| {
            (v == "K").then(|| "sk-123".to_owned())
        })
        .unwrap();
        assert_eq!(up.readiness("cloud:big"), Readiness::Ready);
        assert_eq!(up.readiness("other"), Readiness::Unknown);
        let lease = up.acquire("cloud:big", 0).await.unwrap();
        assert_eq!(
            lease.url("/v1/chat/completions"),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        assert_eq!(lease.upstream_model(), Some("big-2025"));
        assert_eq!(lease.authorization().unwrap(), "Bearer sk-123");
        assert!(!format!("{lease:?}").contains("sk-123"), "{lease:?}");
        assert!(!format!("{up:?}").contains("sk-123"));
    }

    #[test]
    fn a_missing_key_or_a_bad_url_is_refused_by_name() {
        let e = RemoteUpstream::new(&remotes(Some("NOPE")), |_| None).unwrap_err();
        assert_eq!(e.key, "remotes.cloud:big.api_key_env");
        assert_eq!(e.value, "NOPE");
        let e = RemoteUpstream::new(&remotes(Some("K")), |_| Some("a\nb".into())).unwrap_err();
        assert_eq!(e.key, "remotes.cloud:big.api_key_env");
        for url in ["ftp://x/v1", "http://x/v1\r\nX-Evil: 1", "http://u:pw@x/v1"] {
            let mut bad = remotes(None);
            bad.get_mut("cloud:big").unwrap().url = url.into();
            assert_eq!(
                RemoteUpstream::new(&bad, |_| None).unwrap_err().key,
                "remotes.cloud:big.url",
                "{url}"
            );
        }
        assert!(RemoteUpstream::new(&remotes(None), |_| None).is_ok());
    }
}
