//! `horos-ref nodes`: the nodes sharing the database, with their heartbeats.

use squeueha::AsyncQueue;

use super::row;
use crate::error::AppError;

pub async fn nodes(queue: &AsyncQueue, json_out: bool) -> Result<(), AppError> {
    let rows = squeueha::nodes::list_all(queue)
        .await
        .map_err(|e| AppError::Usage(e.to_string()))?;
    let now = squeueha::now_ms();
    if json_out {
        let rows: Vec<_> = rows.iter().map(|r| r.to_json(now)).collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    row!("node host pid state heartbeat_age_s lanes");
    for r in rows {
        row!(
            "{} {} {} {} {:.1} {}",
            r.name,
            r.host,
            r.pid,
            r.state(now),
            now.saturating_sub(r.heartbeat_ms) as f64 / 1000.0,
            if r.lanes.is_empty() {
                "-".to_owned()
            } else {
                r.lanes.join(",")
            }
        );
    }
    Ok(())
}
