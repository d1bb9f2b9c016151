//! `horos-ref stats`: every queue's counts.

use squeueha::AsyncQueue;

use super::row;
use crate::error::AppError;

pub async fn stats(queue: &AsyncQueue, json_out: bool) -> Result<(), AppError> {
    let stats = queue.all_stats().await?;
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
