//! `[node]`: this process's name among the nodes sharing one database, and where it keeps its
//! own runtime files.

use std::path::PathBuf;

use serde::Deserialize;

/// `[node]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// The node's name in the nodes table and on the status page (default: the host name).
    /// Two running nodes may not share one.
    pub name: Option<String>,
    /// This node's runtime files (server logs, sockets): default `DATABASE.run` beside a SQLite
    /// database, `horos-NAME.run` beside the configuration file with a PostgreSQL one.
    pub run_dir: Option<PathBuf>,
}

impl NodeSection {
    pub(super) fn validate(&self) -> Result<(), String> {
        if let Some(name) = &self.name {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                return Err(format!(
                    "node.name `{name}`: 1 to 64 characters of letters, digits, `.`, `_` and `-`"
                ));
            }
        }
        Ok(())
    }
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
