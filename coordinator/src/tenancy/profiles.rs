//! Client profiles: per-caller defaults — model aliases, a priority, a time budget, the models
//! it may call, a thinking mode. Set in the configuration (`[coordinator.profiles."ID"]`) and
//! changed at run time through the admin API (`/api/v1/profiles/ID`).
//!
//! A profile is found by who calls: a virtual key's profile is named `key:NAME`, a caller
//! without a key is found by its `x_client_id`; `"*"` is the profile of every other caller.
//! A request's own fields always win over its profile.
//!
//! With a state file, a change made through the admin API is kept there (`coord_settings`,
//! one `profile:NAME` row each; a deleted profile leaves a `null` row) and wins over the
//! configuration at the next start, as the cloud-fallback guard does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::{Deserialize, Serialize};

use crate::error::{ApiError, CoordinatorError, InvalidConfig};
use crate::tenancy::limits::Caller;

/// One caller's defaults: `[coordinator.profiles."ID"]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientProfile {
    /// Names this caller uses → the model (or `task:NAME`) each one means. A request whose
    /// `model` is an alias goes to its target.
    pub aliases: BTreeMap<String, String>,
    /// The model of a request that names none.
    pub default_model: Option<String>,
    /// Priority of its requests (smaller is more important) when they set none.
    pub priority: Option<i32>,
    /// Time budget of its requests, seconds, when they set none.
    pub budget_s: Option<f64>,
    /// Models it may call (after aliases; task rungs outside the list are skipped); empty:
    /// every model.
    pub models: Vec<String>,
    /// Thinking mode of its chats when they set none (`x_thinking`), over the model's
    /// manifest.
    pub thinking: Option<bool>,
    /// A built-in chat template (`chatml`, `alpaca`, `raw`) its chats are rendered with instead
    /// of the model's own, for the models whose template is rendered here (the manifest's
    /// `template` or `template_file`); other models are not affected.
    pub template: Option<String>,
}

impl ClientProfile {
    /// Checks the values; the error names the key under `at`.
    pub fn validate(&self, at: &str) -> Result<(), InvalidConfig> {
        if let Some(t) = self
            .template
            .as_ref()
            .filter(|t| !horos_manifest::is_builtin(t))
        {
            return Err(InvalidConfig {
                key: format!("{at}.template"),
                value: t.clone(),
                expected: "chatml, alpaca or raw",
            });
        }
        if let Some(b) = self.budget_s.filter(|b| !(b.is_finite() && *b > 0.0)) {
            return Err(InvalidConfig {
                key: format!("{at}.budget_s"),
                value: b.to_string(),
                expected: "a positive number of seconds",
            });
        }
        if let Some((alias, _)) = self
            .aliases
            .iter()
            .find(|(a, t)| a.is_empty() || t.is_empty())
        {
            return Err(InvalidConfig {
                key: format!("{at}.aliases"),
                value: format!("{alias:?}"),
                expected: "non-empty names and targets",
            });
        }
        Ok(())
    }
}

/// The profiles of a coordinator, changed at run time. The lock is held only to copy one
/// profile out, never across an await.
#[derive(Debug, Default)]
pub struct Profiles {
    map: RwLock<ProfileMap>,
    /// The state database changes are kept in.
    store: Option<squeueha::Queue>,
    /// Held from a change's database write to its map update, so that memory and disk agree.
    writing: Mutex<()>,
}

/// Profiles by name.
pub(crate) type ProfileMap = BTreeMap<String, Arc<ClientProfile>>;

/// `profiles`, each checked.
fn checked(profiles: &BTreeMap<String, ClientProfile>) -> Result<ProfileMap, InvalidConfig> {
    for (name, p) in profiles {
        p.validate(&format!("profiles.{name}"))?;
    }
    Ok(profiles
        .iter()
        .map(|(n, p)| (n.clone(), Arc::new(p.clone())))
        .collect())
}

/// `configured`, each checked, with the changes kept in `store` over them (blocking).
fn resolve(
    configured: &BTreeMap<String, ClientProfile>,
    store: Option<&squeueha::Queue>,
) -> Result<ProfileMap, CoordinatorError> {
    let mut map = checked(configured)?;
    let Some(q) = store else {
        return Ok(map);
    };
    let rows = q.query(
        "SELECT key, value FROM coord_settings WHERE substr(key, 1, 8) = 'profile:'",
        squeueha::params![],
    )?;
    for row in rows {
        let (key, value): (String, String) = (row.get(0)?, row.get(1)?);
        let name = key.get(ROW_PREFIX.len()..).unwrap_or_default().to_owned();
        match serde_json::from_str::<Option<ClientProfile>>(&value) {
            Ok(Some(profile)) if profile.validate(&key).is_ok() => {
                map.insert(name, Arc::new(profile));
            }
            Ok(None) => {
                map.remove(&name);
            }
            _ => {
                tracing::warn!(profile = %name, "a stored client profile does not parse: skipped")
            }
        }
    }
    Ok(map)
}

/// The settings row of a profile.
fn row_key(name: &str) -> String {
    format!("{ROW_PREFIX}{name}")
}

const ROW_PREFIX: &str = "profile:";

/// The profile name of a caller (`key:NAME`, the client id, or none).
pub fn profile_name(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Key(k) => Some(format!("key:{k}")),
        Caller::Client(c) => Some(c.clone()),
        Caller::Anonymous => None,
    }
}

/// Longest profile name (as a client id).
const MAX_NAME: usize = 256;

impl Profiles {
    /// The configured profiles (each checked).
    pub fn new(profiles: &BTreeMap<String, ClientProfile>) -> Result<Self, InvalidConfig> {
        Ok(Self {
            map: RwLock::new(checked(profiles)?),
            store: None,
            writing: Mutex::new(()),
        })
    }

    /// The configured profiles with the changes kept in the state file at `path` over them
    /// (blocking). A stored profile that no longer parses is skipped with a warning.
    pub fn load(
        profiles: &BTreeMap<String, ClientProfile>,
        store: Option<squeueha::Queue>,
    ) -> Result<Self, CoordinatorError> {
        let map = resolve(profiles, store.as_ref())?;
        Ok(Self {
            map: RwLock::new(map),
            store,
            writing: Mutex::new(()),
        })
    }

    /// Checks `configured` and reads the state file's changes over it, as a start does
    /// (blocking), without applying anything: [`Profiles::install`] applies the result.
    pub(crate) fn prepare(
        &self,
        configured: &BTreeMap<String, ClientProfile>,
    ) -> Result<ProfileMap, CoordinatorError> {
        resolve(configured, self.store.as_ref())
    }

    /// Applies profiles [`Profiles::prepare`]d (the configuration re-read) to the next
    /// requests; the names added, changed or removed.
    pub(crate) fn install(&self, map: ProfileMap) -> Vec<String> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let mut current = self.write();
        let changed = horos_server_control::settings::changed_names(&current, &map);
        *current = map;
        changed
    }

    /// Writes `value` (a profile, or `null` for a deleted one) to the state file, if any.
    fn store(&self, name: &str, value: &str) -> Result<(), ApiError> {
        let Some(q) = &self.store else {
            return Ok(());
        };
        q.transaction(|tx| {
            tx.execute(
                "INSERT INTO coord_settings (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                squeueha::params![row_key(name), value],
            )
        })
        .map_err(|e| ApiError::internal(format!("profiles: {e}")))?;
        Ok(())
    }

    fn read(&self) -> RwLockReadGuard<'_, ProfileMap> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, ProfileMap> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The profile of `caller`: its own, else `"*"`.
    pub fn of(&self, caller: &Caller) -> Option<Arc<ClientProfile>> {
        let map = self.read();
        profile_name(caller)
            .and_then(|n| map.get(&n).cloned())
            .or_else(|| map.get("*").cloned())
    }

    /// Every profile.
    pub fn all(&self) -> BTreeMap<String, ClientProfile> {
        self.read()
            .iter()
            .map(|(n, p)| (n.clone(), (**p).clone()))
            .collect()
    }

    /// One profile.
    pub fn get(&self, name: &str) -> Option<ClientProfile> {
        self.read().get(name).map(|p| (**p).clone())
    }

    /// Sets (or replaces) a profile, checked first, and keeps it in the state file (blocking).
    pub fn put(&self, name: &str, p: ClientProfile) -> Result<(), ApiError> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(ApiError::bad_request(format!(
                "a profile name is 1 to {MAX_NAME} bytes, not {}",
                name.len()
            )));
        }
        p.validate(&format!("profiles.{name}"))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let text = serde_json::to_string(&p).map_err(|e| ApiError::internal(e.to_string()))?;
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        self.store(name, &text)?;
        self.write().insert(name.to_owned(), Arc::new(p));
        Ok(())
    }

    /// Removes a profile (and keeps its removal in the state file; blocking); whether there
    /// was one.
    pub fn remove(&self, name: &str) -> Result<bool, ApiError> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        if !self.read().contains_key(name) {
            return Ok(false);
        }
        self.store(name, "null")?;
        Ok(self.write().remove(name).is_some())
    }
}

impl ClientProfile {
    /// Whether the profile lets its caller call `model`.
    pub fn allows(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::data::core::apply_profile as apply;
    use crate::data::request::{RawObject, RequestMeta};
    use bytes::Bytes;

    #[test]
    fn a_profile_fills_what_the_request_leaves_out() {
        let p = ClientProfile {
            aliases: BTreeMap::from([("fast".to_owned(), "small-7b".to_owned())]),
            priority: Some(1),
            thinking: Some(false),
            ..ClientProfile::default()
        };
        let mut body = RawObject::parse(Bytes::from_static(br#"{"model":"fast"}"#)).unwrap();
        let mut meta = RequestMeta {
            priority: Some(9),
            ..RequestMeta::default()
        };
        apply(&p, &mut meta, &mut body).unwrap();
        assert_eq!(body.get_str("model").as_deref(), Some("small-7b"));
        assert_eq!(meta.priority, Some(9), "the request's own wins");
        assert_eq!(meta.thinking, Some(false));
        let profiles = Profiles::new(&BTreeMap::from([("*".to_owned(), p.clone())])).unwrap();
        assert_eq!(
            profiles.of(&Caller::Client("x".into())).unwrap().priority,
            Some(1)
        );
        profiles.put("x", ClientProfile::default()).unwrap();
        assert_eq!(
            profiles.of(&Caller::Client("x".into())).unwrap().priority,
            None
        );
        assert!(profiles.remove("x").unwrap());
        assert!(
            profiles
                .put(
                    "y",
                    ClientProfile {
                        budget_s: Some(-1.0),
                        ..ClientProfile::default()
                    }
                )
                .is_err()
        );
    }
}

#[cfg(test)]
mod persisted {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn changes_are_kept_in_the_state_file_and_win_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let configured = BTreeMap::from([
            ("a".to_owned(), ClientProfile::default()),
            (
                "b".to_owned(),
                ClientProfile {
                    priority: Some(1),
                    ..ClientProfile::default()
                },
            ),
        ]);
        let store = || Some(crate::settings::open_store(&path).unwrap());
        let p = Profiles::load(&configured, store()).unwrap();
        p.put(
            "c",
            ClientProfile {
                priority: Some(3),
                ..ClientProfile::default()
            },
        )
        .unwrap();
        assert!(p.remove("a").unwrap());
        assert!(!p.remove("zzz").unwrap());
        let again = Profiles::load(&configured, store()).unwrap();
        let all = again.all();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(all["b"].priority, Some(1));
        assert_eq!(all["c"].priority, Some(3));
    }
}
