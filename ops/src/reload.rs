//! A reload of a running system's keys, limits and profiles from its configuration file,
//! through its coordinator's admin API (`POST /api/v1/reload`): what changed, or why the file
//! was refused (the settings in force then stay).

use serde::{Deserialize, Serialize};

use crate::admin::AdminClient;
use crate::error::OpsError;

/// What a reload changed, by name (never a secret).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reloaded {
    /// Keys that are new.
    pub keys_added: Vec<String>,
    /// Keys that are gone (their callers are refused from now on).
    pub keys_removed: Vec<String>,
    /// Keys whose secret or limits changed.
    pub keys_changed: Vec<String>,
    /// Client ids whose limits changed.
    pub clients_changed: Vec<String>,
    /// Whether `allow_anonymous` changed.
    pub allow_anonymous_changed: bool,
    /// Client profiles added, changed or removed.
    pub profiles_changed: Vec<String>,
    /// Other settings that changed in the file but take a restart.
    pub restart_needed: Vec<String>,
}

/// Asks the running system to read its configuration again. A refused file is
/// [`OpsError::Coordinator`] with the coordinator's message (which key, which line).
pub async fn reload(admin: &AdminClient) -> Result<Reloaded, OpsError> {
    admin.post("/api/v1/reload").await
}
