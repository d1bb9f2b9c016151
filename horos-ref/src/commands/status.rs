//! `horos-ref status`: each lane's server health and queue depth.

use std::time::Duration;

use horos_vllm_client::{Client, ClientConfig};
use serde_json::json;
use squeueha::AsyncQueue;

use crate::config::Config;
use crate::error::AppError;

pub async fn status(config: &Config, queue: &AsyncQueue, json_out: bool) -> Result<(), AppError> {
    let mut lanes = Vec::new();
    for lane in &config.lanes {
        let client = Client::with_config(
            ClientConfig::new(lane.url.clone()).total_timeout(Duration::from_secs(2)),
        )?;
        let healthy = client.health().await.is_ok();
        let s = queue.stats(&lane.queue).await?;
        lanes.push(
            json!({"queue": lane.queue, "url": lane.url, "healthy": healthy,
                          "ready": s.ready, "in_flight": s.in_flight, "dead": s.dead}),
        );
    }
    if json_out {
        println!(
            "{}",
            json!({"database": config.database_display(), "node": config.node_name(),
                   "lanes": lanes})
        );
        return Ok(());
    }
    println!("database {}", config.database_display());
    println!("node {}", config.node_name());
    for l in lanes {
        println!(
            "{} {} healthy={} ready={} in_flight={} dead={}",
            l["queue"], l["url"], l["healthy"], l["ready"], l["in_flight"], l["dead"]
        );
    }
    Ok(())
}
