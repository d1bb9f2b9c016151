//! The model pool as a part of the deep health check: a model stuck loading or stopping past
//! its time, or the pool's lock held (a deadlock), is a wedged pool.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use horos_server_control::{HealthCheck, SlotState, Unhealthy};

use super::ModelPool;

/// [`ModelPool`] checked by the deep health check: unhealthy when a model has been loading
/// or stopping for longer than `stuck_after` (longer than a start may take: the pool's start
/// timeout and then some), or its state's lock has been held for more than 500 ms.
#[derive(Debug, Clone)]
pub struct PoolHealth {
    pool: ModelPool,
    stuck_after: Duration,
}

impl PoolHealth {
    /// Over `pool`.
    pub fn new(pool: ModelPool, stuck_after: Duration) -> Self {
        Self { pool, stuck_after }
    }
}

impl ModelPool {
    /// Models loading or stopping for longer than `older_than`, with how long; `None` when the
    /// pool's lock is held (not answered at once).
    fn stuck(&self, older_than: Duration) -> Option<Vec<(String, SlotState, Duration)>> {
        let st = match self.inner.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let now = tokio::time::Instant::now();
        Some(
            st.slots
                .iter()
                .filter(|(_, s)| matches!(s.state, SlotState::Loading | SlotState::Stopping))
                .map(|(m, s)| (m.clone(), s.state, now.duration_since(s.state_since)))
                .filter(|(_, _, d)| *d > older_than)
                .collect(),
        )
    }
}

#[async_trait]
impl HealthCheck for PoolHealth {
    fn part(&self) -> String {
        "model_pool".to_owned()
    }

    async fn check(&self) -> Result<(), Unhealthy> {
        let until = Instant::now() + Duration::from_millis(500);
        let stuck = loop {
            if let Some(s) = self.pool.stuck(self.stuck_after) {
                break s;
            }
            if Instant::now() >= until {
                return Err(Unhealthy(
                    "the pool's lock has been held for more than 500 ms".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        if stuck.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = stuck
            .iter()
            .map(|(m, s, d)| format!("{m} {} for {} s", s.as_str(), d.as_secs()))
            .collect();
        Err(Unhealthy(format!("stuck: {}", list.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::estimate::ModelFacts;
    use crate::monitor::GpuMonitor;
    use crate::monitor::sim_fleet::SimFleet;
    use crate::pool::{ModelSpec, PoolConfig, SimBackendFactory};

    #[tokio::test]
    async fn a_model_loading_past_its_time_is_reported_stuck() {
        let fleet = Arc::new(SimFleet::new(1, 24_000));
        let pool = ModelPool::new(
            PoolConfig::default(),
            Arc::new(SimBackendFactory::new(Arc::clone(&fleet), 1000, 0)),
            Arc::clone(&fleet) as Arc<dyn GpuMonitor>,
            None,
        );
        pool.register(ModelSpec {
            id: "slow".into(),
            facts: ModelFacts {
                explicit_mb: Some(1000),
                ..ModelFacts::default()
            },
            // Wedged on purpose: a load that takes an hour.
            settings: serde_json::json!({"load_ms": 3_600_000}),
            ..ModelSpec::default()
        });
        let health = PoolHealth::new(pool.clone(), Duration::from_millis(200));
        assert!(health.check().await.is_ok(), "nothing loads");
        let p = pool.clone();
        let load = tokio::spawn(async move { p.get_or_load("slow", 0).await.map(drop) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(health.check().await.is_ok(), "loading, within its time");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let why = health.check().await.unwrap_err().0;
        assert!(why.contains("slow LOADING for"), "{why}");
        load.abort();
    }
}
