//! The servers' logs of a running system, through its coordinator's admin API
//! (`GET /api/v1/logs`, `GET /api/v1/logs/NAME?lines=N|after=OFFSET`): the list, a tail, and
//! what was written since a read (how a follower polls).

use horos_server_control::routes::encode_segment;
use horos_server_control::{LogChunk, LogEntry, LogWindow};
use serde::Deserialize;

use crate::admin::AdminClient;
use crate::error::OpsError;

/// `GET /api/v1/logs`'s answer.
#[derive(Debug, Deserialize)]
struct List {
    data: Vec<LogEntry>,
}

/// Every log the running system keeps (lane servers, pooled models, `run`).
pub async fn list(admin: &AdminClient) -> Result<Vec<LogEntry>, OpsError> {
    Ok(admin.get::<List>("/api/v1/logs").await?.data)
}

/// A part of the log `name`: its last lines, or the whole lines written after an offset (a
/// chunk's `next`). An unknown name is the coordinator's 404.
pub async fn read(
    admin: &AdminClient,
    name: &str,
    window: LogWindow,
) -> Result<LogChunk, OpsError> {
    let query = match window {
        LogWindow::Tail { lines } => format!("lines={lines}"),
        LogWindow::After { offset } => format!("after={offset}"),
    };
    admin
        .get(&format!("/api/v1/logs/{}?{query}", encode_segment(name)))
        .await
}
