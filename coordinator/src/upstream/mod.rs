//! The coordinator's own upstreams over the seam's [`UpstreamPool`] (horos-server-control):
//! [`StaticUpstream`] maps model names to fixed, always-running servers (a cloud proxy, a server
//! managed elsewhere, benchmarks); [`UpstreamSet`] puts several behind one. gpu-alloc's model
//! pool implements the seam itself (`horos_gpu_alloc::pool::PoolUpstream`).

pub(crate) mod remote;
mod routes;
pub(crate) mod tasks;

pub(crate) use routes::Routes;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
pub use horos_server_control::{
    Readiness, Share, SlotState, SlotView, UpstreamError, UpstreamLease, UpstreamPool,
};

/// Fixed servers, always ready: model name → base URL.
#[derive(Debug, Clone, Default)]
pub struct StaticUpstream {
    endpoints: BTreeMap<String, String>,
}

impl StaticUpstream {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a model served at `base_url` (`http://host:port`).
    pub fn with(mut self, model: impl Into<String>, base_url: impl Into<String>) -> Self {
        self.endpoints.insert(model.into(), base_url.into());
        self
    }
}

#[async_trait]
impl UpstreamPool for StaticUpstream {
    fn models(&self) -> Vec<String> {
        self.endpoints.keys().cloned().collect()
    }

    fn readiness(&self, model: &str) -> Readiness {
        if self.endpoints.contains_key(model) {
            Readiness::Ready
        } else {
            Readiness::Unknown
        }
    }

    async fn acquire(&self, model: &str, _priority: i32) -> Result<UpstreamLease, UpstreamError> {
        self.endpoints
            .get(model)
            .map(|e| UpstreamLease::new(e.clone(), None))
            .ok_or_else(|| UpstreamError::UnknownModel(model.to_owned()))
    }

    fn slots(&self) -> Vec<SlotView> {
        self.endpoints
            .keys()
            .map(|m| SlotView::always_ready(m))
            .collect()
    }
}

/// Several upstreams behind one: each model is served by the first member that knows it (fixed
/// servers beside a model pool, say). Housekeeping and the status page cover every member.
#[derive(Clone, Default)]
pub struct UpstreamSet {
    members: Vec<std::sync::Arc<dyn UpstreamPool>>,
}

impl std::fmt::Debug for UpstreamSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSet")
            .field("models", &self.models())
            .finish()
    }
}

impl UpstreamSet {
    /// An empty set (knows no model).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `member`; earlier members win for a model two of them know.
    pub fn with(mut self, member: std::sync::Arc<dyn UpstreamPool>) -> Self {
        self.members.push(member);
        self
    }

    fn owner(&self, model: &str) -> Option<&std::sync::Arc<dyn UpstreamPool>> {
        self.members
            .iter()
            .find(|m| m.readiness(model) != Readiness::Unknown)
    }
}

#[async_trait]
impl UpstreamPool for UpstreamSet {
    fn models(&self) -> Vec<String> {
        let mut all: Vec<String> = self.members.iter().flat_map(|m| m.models()).collect();
        all.sort();
        all.dedup();
        all
    }

    fn readiness(&self, model: &str) -> Readiness {
        self.owner(model)
            .map_or(Readiness::Unknown, |m| m.readiness(model))
    }

    fn paths(&self, model: &str) -> Option<Vec<String>> {
        self.owner(model).and_then(|m| m.paths(model))
    }

    fn serves_path(&self, model: &str, path: &str) -> Option<bool> {
        self.owner(model).and_then(|m| m.serves_path(model, path))
    }

    fn reads_images(&self, model: &str) -> Option<bool> {
        self.owner(model).and_then(|m| m.reads_images(model))
    }

    fn expected_ready_s(&self, model: &str) -> Option<f64> {
        self.owner(model).and_then(|m| m.expected_ready_s(model))
    }

    async fn acquire(&self, model: &str, priority: i32) -> Result<UpstreamLease, UpstreamError> {
        match self.owner(model) {
            Some(m) => m.acquire(model, priority).await,
            None => Err(UpstreamError::UnknownModel(model.to_owned())),
        }
    }

    fn active(&self, model: &str) -> Option<usize> {
        self.owner(model).and_then(|m| m.active(model))
    }

    fn keep_alive(&self, model: &str, keep_alive: Duration) {
        if let Some(m) = self.owner(model) {
            m.keep_alive(model, keep_alive);
        }
    }

    async fn maintain(&self) -> Result<Vec<String>, UpstreamError> {
        let mut unloaded = Vec::new();
        let mut first_error = None;
        for m in &self.members {
            match m.maintain().await {
                Ok(u) => unloaded.extend(u),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if unloaded.is_empty() => Err(e),
            _ => Ok(unloaded),
        }
    }

    fn slots(&self) -> Vec<SlotView> {
        self.members.iter().flat_map(|m| m.slots()).collect()
    }

    async fn unload(&self, model: &str) -> Result<bool, UpstreamError> {
        match self.owner(model) {
            Some(m) => m.unload(model).await,
            None => Err(UpstreamError::UnknownModel(model.to_owned())),
        }
    }

    fn pin(&self, model: &str, pinned: bool) -> Result<(), UpstreamError> {
        match self.owner(model) {
            Some(m) => m.pin(model, pinned),
            None => Err(UpstreamError::UnknownModel(model.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_set_routes_each_model_to_the_member_that_knows_it() {
        let set = UpstreamSet::new()
            .with(Arc::new(
                StaticUpstream::new()
                    .with("a", "http://127.0.0.1:1")
                    .with("shared", "http://127.0.0.1:1"),
            ))
            .with(Arc::new(
                StaticUpstream::new()
                    .with("b", "http://127.0.0.1:2/")
                    .with("shared", "http://127.0.0.1:2"),
            ));
        assert_eq!(set.models(), ["a", "b", "shared"]);
        assert_eq!(set.readiness("b"), Readiness::Ready);
        assert_eq!(set.readiness("zzz"), Readiness::Unknown);
        assert_eq!(
            set.acquire("b", 0).await.unwrap().endpoint(),
            "http://127.0.0.1:2"
        );
        // The first member wins a model both know.
        assert_eq!(
            set.acquire("shared", 0).await.unwrap().endpoint(),
            "http://127.0.0.1:1"
        );
        assert_eq!(
            set.acquire("zzz", 0).await.unwrap_err(),
            UpstreamError::UnknownModel("zzz".into())
        );
        assert_eq!(set.slots().len(), 4);
        assert!(set.maintain().await.unwrap().is_empty());
    }
}
