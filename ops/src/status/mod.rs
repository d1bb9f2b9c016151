//! Sections of a coordinator's status page (the seam's [`StatusSection`]), rendered from
//! state in memory so the page never waits:
//!
//! - [`LanesSection`]: the feeder's lanes, each with its gate, its server
//!   ([`horos_servers::BookedServer`]) and how full its batches run
//!   ([`horos_feeder::FeederCounters`]);
//! - [`NodesSection`]: the nodes sharing the queue database ([`squeueha::nodes`]).
//!
//! (The ingest pipeline's section is ingest-pipeline's `gateway::IngestStatus`.)

use serde_json::Value;

#[cfg(doc)]
use horos_server_control::StatusSection;

mod lanes;
mod nodes;
#[cfg(test)]
mod tests;

pub use lanes::{Asleep, LaneRow, LanesSection};
pub use nodes::NodesSection;

/// A JSON value as a table cell: strings without quotes, null as empty.
pub fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
