//! `horos-ref stats`: every queue's counts (horos-ops' `LaneJobs::stats`).

use horos_ops::lanes::{LaneJobs, StatsArgs};

use super::row;
use crate::error::AppError;

pub async fn stats(jobs: &LaneJobs, json_out: bool) -> Result<(), AppError> {
    let stats = jobs.stats(StatsArgs {}).await?.queues;
    if json_out {
        println!("{}", serde_json::to_string(&stats).unwrap_or_default());
        return Ok(());
    }
    row!("queue ready in_flight delayed done dead oldest_ready_ms");
    for s in stats {
        row!(
            "{} {} {} {} {} {} {}",
            s.queue,
            s.ready,
            s.in_flight,
            s.delayed,
            s.done,
            s.dead,
            s.oldest_ready_age_ms.map_or("-".into(), |v| v.to_string())
        );
    }
    Ok(())
}
