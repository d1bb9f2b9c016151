//! The gateway's upstream part: the pool of models it forwards to, which of them are remote
//! (cloud) models, and whether a task may fall back to one.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::settings::Settings;
use crate::upstream::UpstreamPool;

/// Where requests go.
pub(crate) struct Routes {
    pool: Arc<dyn UpstreamPool>,
    remotes: BTreeSet<String>,
    settings: Arc<Settings>,
}

impl Routes {
    /// The pool (remote models included), the remote models' names, and the run-time settings
    /// holding the cloud-fallback guard.
    pub(crate) fn new(
        pool: Arc<dyn UpstreamPool>,
        remotes: BTreeSet<String>,
        settings: Arc<Settings>,
    ) -> Self {
        Self {
            pool,
            remotes,
            settings,
        }
    }

    /// The models and their servers.
    pub(crate) fn pool(&self) -> &Arc<dyn UpstreamPool> {
        &self.pool
    }

    /// Whether `model` is a remote (cloud) model.
    pub(crate) fn is_remote(&self, model: &str) -> bool {
        self.remotes.contains(model)
    }

    /// Whether a task may fall back to a remote model now (changed at run time).
    pub(crate) fn allow_cloud_fallback(&self) -> bool {
        self.settings.allow_cloud_fallback()
    }
}
