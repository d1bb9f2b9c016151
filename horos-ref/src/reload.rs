//! `run`'s configuration file as the coordinator's [`TenancySource`]: read again and checked
//! whole (as at start-up) on SIGHUP or `POST /api/v1/reload`; the keys, limits and profiles of
//! its `[coordinator]` go to the coordinator, and the other settings that differ from the file
//! `run` started with are named as needing a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use horos_coordinator::SourceError;
use horos_coordinator::{Reading, ReloadHandle, TenancySource};
use horos_server_control::settings::{Table, changed_keys};

use crate::config::Config;
use crate::error::AppError;

/// The keys of `[coordinator]` a reload applies.
const TENANCY: [&str; 4] = ["keys", "allow_anonymous", "clients", "profiles"];

/// The configuration file `run` started with.
pub struct ConfigFile {
    path: PathBuf,
    started: Table,
}

impl ConfigFile {
    /// The file at `path`, as it is now (what later readings are compared with).
    pub fn new(path: &Path) -> Result<Self, AppError> {
        Ok(Self {
            path: path.to_path_buf(),
            started: table(path).map_err(|e| AppError::Usage(e.to_string()))?,
        })
    }
}

fn table(path: &Path) -> Result<Table, SourceError> {
    let text = std::fs::read_to_string(path)?;
    Ok(toml::from_str(&text)?)
}

impl TenancySource for ConfigFile {
    fn read(&self) -> Result<Reading, SourceError> {
        let config = Config::load(&self.path)?;
        let section = config.coordinator.ok_or_else(|| {
            format!(
                "{}: the [coordinator] section is gone (removing it takes a restart)",
                self.path.display()
            )
        })?;
        Ok(Reading {
            tenancy: section.settings.tenancy(),
            restart_needed: restart_needed(&self.started, &table(&self.path)?),
        })
    }
}

/// The settings that differ between `old` and `new` but for the tenancy keys of
/// `[coordinator]`: a section (`lane`, `ingest`) or a key of `[coordinator]`
/// (`coordinator.max_in_flight`).
fn restart_needed(old: &Table, new: &Table) -> Vec<String> {
    let coordinator = |t: &Table| {
        let mut c = t
            .get("coordinator")
            .and_then(|v| v.as_table())
            .cloned()
            .unwrap_or_default();
        for k in TENANCY {
            c.remove(k);
        }
        c
    };
    let mut out: Vec<String> = changed_keys(old, new)
        .into_iter()
        .filter(|k| k != "coordinator")
        .chain(
            changed_keys(&coordinator(old), &coordinator(new))
                .into_iter()
                .map(|k| format!("coordinator.{k}")),
        )
        .collect();
    out.sort();
    out
}

/// The coordinator a SIGHUP reloads, set once it has started.
pub type HangupTarget = Arc<OnceLock<ReloadHandle>>;

/// Reloads on every SIGHUP the coordinator set in the returned target (the outcome is in the
/// log). Installed first thing: a SIGHUP while `run` starts, or without a coordinator, is
/// logged, and never ends `run`.
pub fn on_hangup() -> Result<HangupTarget, AppError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    let target = HangupTarget::default();
    let handle = Arc::clone(&target);
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            match handle.get() {
                // The coordinator logs what changed, or why the file was refused.
                Some(h) => {
                    let _ = h.reload().await;
                }
                None => tracing::warn!(
                    "SIGHUP: no coordinator (yet) whose keys, limits and profiles to reload"
                ),
            }
        }
    });
    Ok(target)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tenancy_keys_need_no_restart_and_the_others_are_named() {
        let old: Table = toml::from_str(
            "database = \"a.db\"\n[coordinator]\nmax_in_flight = 4\nallow_anonymous = false\n\
             [coordinator.keys.a]\nkey_sha256 = \"00\"\n[[lane]]\nqueue = \"think\"",
        )
        .unwrap();
        let new: Table = toml::from_str(
            "database = \"a.db\"\n[coordinator]\nmax_in_flight = 8\nallow_anonymous = true\n\
             [coordinator.keys.b]\nkey_sha256 = \"11\"\n[[lane]]\nqueue = \"code\"",
        )
        .unwrap();
        assert_eq!(
            restart_needed(&old, &new),
            ["coordinator.max_in_flight", "lane"]
        );
        assert!(restart_needed(&old, &old).is_empty());
    }
}
