//! Stats: every queue's jobs by state.

use serde::{Deserialize, Serialize};
use squeueha::QueueStats;

use super::LaneJobs;
use crate::error::OpsError;

/// No arguments (an object without fields, so that a front's JSON deserialises into it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({}))]
pub struct StatsArgs {}

/// Every queue of the database, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Per queue: ready, in flight, delayed, done (retained) and dead jobs, and the oldest ready
    /// job's age.
    pub queues: Vec<QueueStats>,
}

impl LaneJobs {
    /// Every queue's counts (the lanes' and any other queue of the database).
    pub async fn stats(&self, _args: StatsArgs) -> Result<Stats, OpsError> {
        Ok(Stats {
            queues: self.queue.all_stats().await?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::lanes::SubmitArgs;
    use crate::lanes::testing::lane_jobs;

    #[tokio::test]
    async fn each_queue_is_counted_by_state() {
        let (_dir, jobs) = lane_jobs().await;
        assert!(jobs.stats(StatsArgs {}).await.unwrap().queues.is_empty());
        for _ in 0..2 {
            jobs.submit(SubmitArgs {
                queue: "think".into(),
                prompt: Some("x".into()),
                ..SubmitArgs::default()
            })
            .await
            .unwrap();
        }
        let stats = jobs.stats(StatsArgs {}).await.unwrap();
        assert_eq!(stats.queues.len(), 1);
        assert_eq!(
            (stats.queues[0].queue.as_str(), stats.queues[0].ready),
            ("think", 2)
        );
    }
}
