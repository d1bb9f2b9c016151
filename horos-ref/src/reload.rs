//! `run`'s configuration file as the coordinator's [`TenancySource`]: read again and checked
//! whole (as at start-up) on SIGHUP or `POST /api/v1/reload`; the keys, limits and profiles of
//! its `[coordinator]` go to the coordinator, and the other settings that differ from the file
//! `run` started with are named as needing a restart. The secrets of each reading (a key it
//! adds, read from its variable) join those the servers' logs never show.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use horos_coordinator::SourceError;
use horos_coordinator::{Reading, ReloadHandle, TenancySource};
use horos_server_control::settings::{Table, changed_keys};
use horos_servers::logs::Redactions;

use crate::config::Config;
use crate::error::AppError;

/// The keys of `[coordinator]` a reload applies.
const TENANCY: [&str; 5] = [
    "keys",
    "allow_anonymous",
    "anonymous_collections",
    "clients",
    "profiles",
];

/// The configuration file `run` started with.
pub struct ConfigFile {
    path: PathBuf,
    started: Table,
    /// What the servers' logs never show: each reading's secrets are added.
    redactions: Redactions,
    /// Where its `${VAR}`s and key variables are read (the process's environment).
    env: fn(&str) -> Option<String>,
}

impl ConfigFile {
    /// The file at `path`, as it is now (what later readings are compared with); the secrets
    /// of each reading are added to `redactions`.
    pub fn new(path: &Path, redactions: Redactions) -> Result<Self, AppError> {
        Ok(Self {
            path: path.to_path_buf(),
            started: table(path).map_err(|e| AppError::Usage(e.to_string()))?,
            redactions,
            env: |v| std::env::var(v).ok(),
        })
    }
}

fn table(path: &Path) -> Result<Table, SourceError> {
    let text = std::fs::read_to_string(path)?;
    Ok(toml::from_str(&text)?)
}

impl TenancySource for ConfigFile {
    fn read(&self) -> Result<Reading, SourceError> {
        let config = Config::load_with(&self.path, &self.env)?;
        // Before the coordinator may apply it: a key it adds is redacted from its first use
        // (a reading the coordinator refuses adds only values that were secrets anyway).
        self.redactions.add(config.secrets.values().to_vec());
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
    use horos_server_control::{LogBook, LogKind, LogWindow};
    use horos_servers::logs::LogFiles;

    /// The key a reload adds, in the only variable of the tests' environment.
    const ADDED: &str = "sk-added-by-a-reload-1";

    fn env(v: &str) -> Option<String> {
        (v == "HOROS_TEST_RELOADED_KEY").then(|| ADDED.to_owned())
    }

    #[test]
    fn a_key_a_reload_adds_is_redacted_in_the_lines_read_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("horos.toml");
        let started = "[coordinator]\nbind = \"127.0.0.1:0\"\n\
                       [coordinator.keys.a]\nkey_sha256 = \""
            .to_owned()
            + &"0".repeat(64)
            + "\"\n";
        std::fs::write(&path, &started).unwrap();
        let redactions = Redactions::new();
        let log = dir.path().join("run.log");
        let book = LogFiles::new()
            .with("run", LogKind::Run, &log)
            .redacted_by(redactions.clone());
        let source = ConfigFile {
            env,
            ..ConfigFile::new(&path, redactions).unwrap()
        };
        std::fs::write(&log, format!("request with key {ADDED}\n")).unwrap();
        let read = || book.read("run", LogWindow::Tail { lines: 1 }).unwrap().text;
        source.read().unwrap();
        assert_eq!(read(), format!("request with key {ADDED}\n"));

        std::fs::write(
            &path,
            started + "[coordinator.keys.b]\nkey_env = \"HOROS_TEST_RELOADED_KEY\"\n",
        )
        .unwrap();
        source.read().unwrap();
        assert_eq!(read(), "request with key [redacted]\n");
    }

    #[test]
    fn tenancy_keys_need_no_restart_and_the_others_are_named() {
        let old: Table = toml::from_str(
            "database = \"a.db\"\n[coordinator]\nmax_in_flight = 4\nallow_anonymous = false\n\
             [coordinator.keys.a]\nkey_sha256 = \"00\"\n[[lane]]\nqueue = \"think\"",
        )
        .unwrap();
        let new: Table = toml::from_str(
            "database = \"a.db\"\n[coordinator]\nmax_in_flight = 8\nallow_anonymous = true\n\
             anonymous_collections = [\"public\"]\n\
             [coordinator.keys.b]\nkey_sha256 = \"11\"\ncollections = [\"beta\"]\n\
             [[lane]]\nqueue = \"code\"",
        )
        .unwrap();
        assert_eq!(
            restart_needed(&old, &new),
            ["coordinator.max_in_flight", "lane"]
        );
        assert!(restart_needed(&old, &old).is_empty());
    }
}
