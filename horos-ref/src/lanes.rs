//! The configuration's lanes as horos-ops' [`LaneJobs`]: what `submit`, `result`, `stats`,
//! `dead`, the MCP tools and the admin API's `/api/v1/lanes` act on.

use horos_ops::lanes::{Lane, LaneJobs};
use squeueha::AsyncQueue;

use crate::config::Config;

/// The jobs of `config`'s lanes (each with its default model and `max_attempts`) on `queue`.
pub fn lane_jobs(config: &Config, queue: AsyncQueue) -> LaneJobs {
    let lanes = config
        .lanes
        .iter()
        .map(|l| Lane::new(&l.queue, l.model.clone()).max_attempts(l.max_attempts))
        .collect();
    LaneJobs::new(queue, lanes)
}
