//! The servers' logs of a running system, through its coordinator's admin API
//! (`GET /api/v1/logs`, `GET /api/v1/logs/NAME?lines=N|after=OFFSET`): the list, a tail, and
//! what was written since a read (how a follower polls).

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
        .get(&format!("/api/v1/logs/{}?{query}", escape(name)))
        .await
}

/// `name` as one path segment: every byte but `[A-Za-z0-9._-]` as `%XX`.
fn escape(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_escaped_segment() {
        assert_eq!(escape("think-gpu0"), "think-gpu0");
        assert_eq!(escape("Qwen/Qwen2.5 7B"), "Qwen%2FQwen2.5%207B");
        assert_eq!(escape("../x?y"), "..%2Fx%3Fy");
    }
}
