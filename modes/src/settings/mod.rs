//! The lanes and the allocator as a configuration file writes them: [`LaneSettings`] (a
//! `[[lane]]`: its queue, batches, server and weights) and [`AllocatorSettings`] (`[allocator]`:
//! which lane each GPU serves). Each checks its own values; [`complete_lanes`] fills and checks
//! the lanes of one file.
//!
//! The decisions that follow from them: where a lane's servers run, what each is and what it
//! books in the VRAM ledger ([`Placement`], [`LaneSettings::placements`],
//! [`LaneSettings::booking`]), and the switched lanes seen from their models
//! ([`switched_lanes`], [`switches_model`], [`lane_models`], [`parked_load_s`]) and as the
//! executor's modes ([`LaneSettings::mode_lane`], [`AllocatorSettings::modes_config`],
//! [`AllocatorSettings::initial_modes`]).

mod allocator;
mod lane;
mod placement;
mod switching;
#[cfg(test)]
mod tests;

pub use allocator::AllocatorSettings;
pub use horos_server_control::settings::InvalidSettings;
pub use lane::LaneSettings;
pub use placement::Placement;
pub use switching::{lane_models, parked_load_s, switched_lanes, switches_model};

use horos_gpu_alloc::plan::VramDemand;

/// The lanes' servers' memory for the VRAM plan ([`horos_gpu_alloc::plan`]): under
/// `allocator`, a managed lane runs on one of its GPUs at a time; otherwise on its `gpus`.
pub fn lane_demands(
    lanes: &[LaneSettings],
    allocator: Option<&AllocatorSettings>,
) -> Vec<VramDemand> {
    lanes
        .iter()
        .enumerate()
        .filter_map(|(i, l)| l.vram_demand(i, allocator.map(|a| a.gpus.as_slice())))
        .collect()
}

/// Fills the values of `lanes` that follow from others (default ports, the vLLM shorthand's
/// command) and checks them: each lane's values, and no queue twice.
pub fn complete_lanes(lanes: &mut [LaneSettings]) -> Result<(), InvalidSettings> {
    for (i, lane) in lanes.iter_mut().enumerate() {
        lane.complete(i)?;
    }
    let mut queues = std::collections::HashSet::new();
    for (i, lane) in lanes.iter().enumerate() {
        if !queues.insert(lane.queue.as_str()) {
            return Err(InvalidSettings(format!(
                "lane[{i}].queue `{}` is used twice",
                lane.queue
            )));
        }
        lane.validate(i)?;
    }
    Ok(())
}
