//! Tenancy reloaded while serving: the keys, the callers' limits and the client profiles
//! ([`Tenancy`]) read again from their source (the owner's configuration file, through a
//! [`TenancySource`]) on `POST /api/v1/reload` or [`Coordinator::reload`](crate::Coordinator::reload).
//!
//! A reading is checked whole before anything changes: a source that fails (the file does not
//! parse, a value is out of range) or settings that cannot be applied (a key's variable is
//! unset, a bad digest, a zero limit) refuse the reload, and the settings in force stay. A
//! reload that passes applies to the requests admitted from then on; those in progress keep
//! their places. The outcome is logged by name, never with a secret, and returned as a
//! [`ReloadReport`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::error::{CoordinatorError, InvalidConfig};
use crate::tenancy::limits::{GateChanges, GatePolicy, Gatekeeper, Limits, VirtualKey};
use crate::tenancy::profiles::{ClientProfile, Profiles};

/// The part of [`CoordinatorConfig`](crate::CoordinatorConfig) a reload changes: `keys`,
/// `allow_anonymous`, `anonymous_collections`, `clients`, `profiles`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenancy {
    /// Data-plane API keys by name.
    pub keys: BTreeMap<String, VirtualKey>,
    /// With keys, whether callers without one are let in.
    pub allow_anonymous: bool,
    /// With keys, the document collections callers without one read.
    pub anonymous_collections: Vec<String>,
    /// Limits of callers without a key, by `x_client_id`.
    pub clients: BTreeMap<String, Limits>,
    /// Callers' defaults by profile name.
    pub profiles: BTreeMap<String, ClientProfile>,
}

/// No key, limit or profile; callers without a key read the `"default"` collection (as
/// [`CoordinatorConfig`](crate::CoordinatorConfig)'s default).
impl Default for Tenancy {
    fn default() -> Self {
        Self {
            keys: BTreeMap::new(),
            allow_anonymous: false,
            anonymous_collections: vec![horos_server_control::Collection::DEFAULT.to_owned()],
            clients: BTreeMap::new(),
            profiles: BTreeMap::new(),
        }
    }
}

/// A fresh reading of the settings from their source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The tenancy settings as the source holds them now.
    pub tenancy: Tenancy,
    /// The other settings that differ from those the system started with and take a restart
    /// to apply (their keys, as `coordinator.max_in_flight` or `lane`).
    pub restart_needed: Vec<String>,
}

/// Why a source could not give a reading: its own error (the file's path and what is wrong).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// Where a reload reads the settings again (a binary's configuration file). Called on a
/// blocking thread: it may read files.
pub trait TenancySource: Send + Sync {
    /// The settings as the source holds them now, checked whole.
    fn read(&self) -> Result<Reading, SourceError>;
}

impl<F> TenancySource for F
where
    F: Fn() -> Result<Reading, SourceError> + Send + Sync,
{
    fn read(&self) -> Result<Reading, SourceError> {
        self()
    }
}

/// What a reload changed, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadReport {
    /// The keys and limits.
    #[serde(flatten)]
    pub gate: GateChanges,
    /// Client profiles added, changed or removed. (A change made through the admin API and
    /// kept in the state file still wins over the configuration, as at a start.)
    pub profiles_changed: Vec<String>,
    /// The other settings that changed in the source but take a restart.
    pub restart_needed: Vec<String>,
}

/// Why a reload was refused; the settings in force stay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The coordinator was given no [`TenancySource`].
    #[error("this coordinator has nothing to reload from (no settings source)")]
    NoSource,
    /// The source could not be read or does not pass its checks.
    #[error("the settings were not reloaded: {0}")]
    Source(#[source] SourceError),
    /// A setting cannot be applied (a key's variable is unset, a bad digest, a zero limit).
    #[error("the settings were not reloaded: {0}")]
    Invalid(#[source] InvalidConfig),
    /// The file has no key left and does not say `allow_anonymous = true`: applied, it would
    /// open the data plane to anyone (a section deleted by mistake, say).
    #[error(
        "the settings were not reloaded: they have no key left, which would let anyone in; set \
         allow_anonymous = true to mean it"
    )]
    WouldOpen,
    /// The profiles' state file could not be read.
    #[error("the settings were not reloaded: {0}")]
    Store(#[source] CoordinatorError),
}

/// Reloads a running coordinator from elsewhere than its admin API (a signal handler):
/// [`Coordinator::reload_handle`](crate::Coordinator::reload_handle).
#[derive(Clone)]
pub struct ReloadHandle(pub(crate) Option<Arc<Reloader>>);

impl std::fmt::Debug for ReloadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReloadHandle")
            .field(&self.0.is_some())
            .finish()
    }
}

impl ReloadHandle {
    /// Reads the source again and applies it, on a blocking thread; the outcome is logged and
    /// returned. Without a source: [`ReloadError::NoSource`].
    pub async fn reload(&self) -> Result<ReloadReport, ReloadError> {
        let reloader = self.0.clone().ok_or(ReloadError::NoSource)?;
        tokio::task::spawn_blocking(move || reloader.reload())
            .await
            .map_err(|e| ReloadError::Source(e.to_string().into()))?
    }
}

/// Reads a source and applies what it holds to a gate and its profiles, one reload at a time.
pub(crate) struct Reloader {
    gate: Arc<Gatekeeper>,
    profiles: Arc<Profiles>,
    source: Arc<dyn TenancySource>,
    one_at_a_time: Mutex<()>,
}

impl Reloader {
    pub(crate) fn new(
        gate: Arc<Gatekeeper>,
        profiles: Arc<Profiles>,
        source: Arc<dyn TenancySource>,
    ) -> Self {
        Self {
            gate,
            profiles,
            source,
            one_at_a_time: Mutex::new(()),
        }
    }

    /// Reads the source, checks everything, then applies it (blocking); the outcome logged.
    pub(crate) fn reload(&self) -> Result<ReloadReport, ReloadError> {
        let _one = self.one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
        let r = self.read_and_apply();
        match &r {
            Ok(report) => tracing::info!(
                keys_added = ?report.gate.keys_added,
                keys_removed = ?report.gate.keys_removed,
                keys_changed = ?report.gate.keys_changed,
                clients_changed = ?report.gate.clients_changed,
                allow_anonymous_changed = report.gate.allow_anonymous_changed,
                anonymous_collections_changed = report.gate.anonymous_collections_changed,
                profiles_changed = ?report.profiles_changed,
                restart_needed = ?report.restart_needed,
                "settings reloaded: keys, limits and profiles apply to new requests"
            ),
            Err(e) => tracing::warn!(error = %e, "reload refused: the settings in force stay"),
        }
        r
    }

    fn read_and_apply(&self) -> Result<ReloadReport, ReloadError> {
        let reading = self.source.read().map_err(ReloadError::Source)?;
        let t = &reading.tenancy;
        if t.keys.is_empty() && !t.allow_anonymous && self.gate.has_keys() {
            return Err(ReloadError::WouldOpen);
        }
        // Everything checked before anything changes.
        let policy = GatePolicy::new(
            &t.keys,
            t.allow_anonymous,
            &t.anonymous_collections,
            &t.clients,
            |var| std::env::var(var).ok(),
        )
        .map_err(ReloadError::Invalid)?;
        let profiles = self.profiles.prepare(&t.profiles).map_err(|e| match e {
            CoordinatorError::Config(c) => ReloadError::Invalid(c),
            other => ReloadError::Store(other),
        })?;
        let gate = self.gate.replace(policy);
        let profiles_changed = self.profiles.install(profiles);
        Ok(ReloadReport {
            gate,
            profiles_changed,
            restart_needed: reading.restart_needed,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::tenancy::limits::Caller;

    fn hashed(key: &str) -> VirtualKey {
        use sha2::{Digest, Sha256};
        VirtualKey {
            key_sha256: Some(
                Sha256::digest(key.as_bytes())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            ),
            ..VirtualKey::default()
        }
    }

    #[test]
    fn a_reload_applies_whole_or_not_at_all() {
        let first = Tenancy {
            keys: BTreeMap::from([("a".to_owned(), hashed("sk-aaaaaa"))]),
            ..Tenancy::default()
        };
        let gate = Arc::new(Gatekeeper::new(
            GatePolicy::new(
                &first.keys,
                false,
                &first.anonymous_collections,
                &first.clients,
                |_| None,
            )
            .unwrap(),
        ));
        let profiles = Arc::new(Profiles::new(&BTreeMap::new()).unwrap());
        let next = Arc::new(Mutex::new(Ok::<Tenancy, String>(first)));
        let source = {
            let next = Arc::clone(&next);
            move || -> Result<Reading, SourceError> {
                let t = next.lock().unwrap().clone()?;
                Ok(Reading {
                    tenancy: t,
                    restart_needed: vec!["lane".into()],
                })
            }
        };
        let r = Reloader::new(Arc::clone(&gate), Arc::clone(&profiles), Arc::new(source));
        let key = |k: &str| gate.identify(Some(&format!("Bearer {k}")), None);

        // b added, a removed, a profile added.
        *next.lock().unwrap() = Ok(Tenancy {
            keys: BTreeMap::from([("b".to_owned(), hashed("sk-bbbbbb"))]),
            profiles: BTreeMap::from([("key:b".to_owned(), ClientProfile::default())]),
            ..Tenancy::default()
        });
        let report = r.reload().unwrap();
        assert_eq!(report.gate.keys_added, ["b"]);
        assert_eq!(report.gate.keys_removed, ["a"]);
        assert_eq!(report.profiles_changed, ["key:b"]);
        assert_eq!(report.restart_needed, ["lane"]);
        assert_eq!(key("sk-bbbbbb").unwrap(), Caller::Key("b".into()));
        assert_eq!(key("sk-aaaaaa").unwrap_err().status, 401);

        // A source error, a key whose variable is unset, a bad profile: nothing changes.
        *next.lock().unwrap() = Err("horos.toml: line 3: expected `=`".into());
        assert!(matches!(r.reload(), Err(ReloadError::Source(_))));
        *next.lock().unwrap() = Ok(Tenancy {
            keys: BTreeMap::from([(
                "c".to_owned(),
                VirtualKey {
                    key_env: Some("HOROS_TEST_SURELY_UNSET_VARIABLE".into()),
                    ..VirtualKey::default()
                },
            )]),
            ..Tenancy::default()
        });
        let e = r.reload().unwrap_err();
        assert!(e.to_string().contains("keys.c.key_env"), "{e}");
        *next.lock().unwrap() = Ok(Tenancy {
            keys: BTreeMap::from([("c".to_owned(), hashed("sk-cccccc"))]),
            profiles: BTreeMap::from([(
                "x".to_owned(),
                ClientProfile {
                    budget_s: Some(-1.0),
                    ..ClientProfile::default()
                },
            )]),
            ..Tenancy::default()
        });
        assert!(matches!(r.reload(), Err(ReloadError::Invalid(_))));
        assert_eq!(key("sk-bbbbbb").unwrap(), Caller::Key("b".into()));
        assert_eq!(key("sk-cccccc").unwrap_err().status, 401);
        assert!(profiles.get("key:b").is_some());

        // No key left without allow_anonymous: refused (it would let anyone in); said, applied.
        *next.lock().unwrap() = Ok(Tenancy::default());
        assert!(matches!(r.reload(), Err(ReloadError::WouldOpen)));
        assert_eq!(key("sk-bbbbbb").unwrap(), Caller::Key("b".into()));
        assert_eq!(gate.identify(None, None).unwrap_err().status, 401);
        *next.lock().unwrap() = Ok(Tenancy {
            allow_anonymous: true,
            ..Tenancy::default()
        });
        r.reload().unwrap();
        assert!(gate.identify(None, None).is_ok());
    }
}
