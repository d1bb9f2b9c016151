//! The lanes `[allocator]` switches, seen from their models: which model each switched lane
//! serves ([`lane_models`], [`switches_model`]) and the coordinator's upstream over them whose
//! waiting requests are their demand ([`switched_lanes`]).

use std::sync::Arc;
use std::time::Duration;

use super::{AllocatorSettings, LaneSettings};
use crate::{LaneUpstream, ModeLane, RequestGate};

/// The switched lanes (`mode_lanes`) whose settings among `lanes` name a `model`, each with its
/// settings and that model.
pub fn lane_models<'m, 'l>(
    lanes: &'l [LaneSettings],
    mode_lanes: &'m mut [ModeLane],
) -> impl Iterator<Item = (&'m mut ModeLane, &'l LaneSettings, &'l str)> {
    mode_lanes.iter_mut().filter_map(move |ml| {
        let lane = lanes.iter().find(|l| l.queue == ml.queue)?;
        let model = lane.model.as_deref()?;
        Some((ml, lane, model))
    })
}

/// Whether one of the switched lanes (`mode_lanes`) serves `model` (its server is then
/// stopped while no GPU serves the lane).
pub fn switches_model(lanes: &[LaneSettings], mode_lanes: &[ModeLane], model: &str) -> bool {
    mode_lanes.iter().any(|ml| {
        lanes
            .iter()
            .any(|l| l.queue == ml.queue && l.model.as_deref() == Some(model))
    })
}

/// The models of the lanes `allocator` switches, as one upstream of the coordinator: each
/// lane's waiting requests become its demand for the allocator, its stay-warm time
/// (`stay_warm_s`) its warmth, and each instance's gate a [`RequestGate`] (the executor waits
/// for the coordinator's requests on an instance as for its feeder batch). `None` without an
/// allocator or without a switched lane that names a model. `cooldown_s`: the feeder's pause
/// after a batch (see [`AllocatorSettings::policy`]).
pub fn switched_lanes(
    lanes: &[LaneSettings],
    allocator: Option<&AllocatorSettings>,
    cooldown_s: f64,
    mode_lanes: &mut [ModeLane],
) -> Option<LaneUpstream> {
    let a = allocator?;
    let policy = a.policy(cooldown_s);
    // Past the allocator's starvation bound a parked lane is served: a request waits that long
    // at most, and a tick and a switch more.
    let max_wait = secs(policy.max_wait_s + policy.tick_s + 60.0);
    let mut up = LaneUpstream::new(max_wait);
    for (ml, l, model) in lane_models(lanes, mode_lanes) {
        // The executor waits for the coordinator's requests on an instance as for its
        // feeder batch: both see the same gate.
        let mut instances = Vec::with_capacity(ml.instances.len());
        for (k, i) in ml.instances.iter_mut().enumerate() {
            let gate = Arc::new(RequestGate::new(i.gate.clone()));
            i.gate = gate.clone();
            instances.push((l.instance_url(k), gate));
        }
        let (waiting, warmth) = up.lane(model, &l.queue, instances, secs(l.stay_warm_s));
        ml.demand = Some(waiting);
        ml.keep_warm = Some(warmth);
    }
    (!up.is_empty()).then_some(up)
}

/// Seconds as a `Duration`, capped (a year) so no setting can panic it.
fn secs(s: f64) -> Duration {
    if !s.is_finite() {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(s.clamp(0.0, 86_400.0 * 365.0))
}
