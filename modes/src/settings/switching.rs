//! The lanes `[allocator]` switches: which lanes are its modes ([`LaneSettings::mode_lane`]),
//! how its executor runs ([`AllocatorSettings::modes_config`],
//! [`AllocatorSettings::initial_modes`]), and the switched lanes seen from their models: which
//! model each serves ([`lane_models`], [`switches_model`]), the coordinator's upstream over them
//! whose waiting requests are their demand ([`switched_lanes`]) and how long a parked one takes
//! to serve ([`parked_load_s`]).

use std::sync::Arc;
use std::time::Duration;

use horos_server_control::{Readiness, UpstreamPool};

use super::{AllocatorSettings, LaneSettings};
use crate::{Instance, LaneUpstream, ModeLane, ModesConfig, RequestGate};

/// After a lane's server failed to start on a GPU, how long before it is tried there again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

impl LaneSettings {
    /// The lane as a mode of `allocator`'s executor, its server and gate on each GPU
    /// `instances`: only a lane whose server the binary runs is switched (`None` otherwise, and
    /// without an allocator).
    pub fn mode_lane(
        &self,
        allocator: Option<&AllocatorSettings>,
        instances: Vec<Instance>,
    ) -> Option<ModeLane> {
        (allocator.is_some() && self.is_managed()).then(|| ModeLane {
            queue: self.queue.clone(),
            instances,
            swap_in_s: self.swap_in_s,
            job_s: self.job_s,
            batch_size: self.batch_size,
            demand: None,
            keep_warm: None,
            sleep: horos_gpu_alloc::catalogue::SleepSpec {
                // Asleep at level 1, the weights take in host RAM what they took on the GPU.
                host_mb: self.sleep.host_mb.or_else(|| {
                    horos_gpu_alloc::estimate::estimate(&self.vram_facts())
                        .ok()
                        .map(|e| e.mb)
                }),
                ..self.sleep.clone()
            },
        })
    }
}

impl AllocatorSettings {
    /// How the executor runs: on `gpus`, with [`AllocatorSettings::policy`] (`cooldown_s`: the
    /// feeder's pause after a batch), a failed start retried after 30 s (doubling), the initial
    /// lanes just loaded.
    pub fn modes_config(&self, cooldown_s: f64) -> ModesConfig {
        ModesConfig {
            gpus: self.gpus.clone(),
            policy: self.policy(cooldown_s),
            retry_after_failure: RETRY_AFTER_FAILURE,
            initial_mode_age_s: 0.0,
            costs: None,
            host_ram: None,
        }
    }

    /// The mode each GPU serves at start ([`AllocatorSettings::initial_lanes`] of `lanes`), as
    /// indices into `mode_lanes` (a name that is not one of them is left out).
    pub fn initial_modes(&self, lanes: &[LaneSettings], mode_lanes: &[ModeLane]) -> Vec<usize> {
        self.initial_lanes(lanes)
            .iter()
            .filter_map(|q| mode_lanes.iter().position(|l| &l.queue == q))
            .collect()
    }
}

/// Until it is measured, how long the model of a parked lane takes to serve: about the lane's
/// switch time (`swap_in_s`) and a tick of `allocator`. One entry per lane with a model that
/// `switched` serves, in the lanes' order (a model twice: the first lane's comes first).
pub fn parked_load_s(
    lanes: &[LaneSettings],
    allocator: Option<&AllocatorSettings>,
    switched: &LaneUpstream,
) -> Vec<(String, f64)> {
    let tick = allocator.map_or(0.0, |a| a.settings.tick_s);
    lanes
        .iter()
        .filter_map(|l| {
            let model = l.model.as_ref()?;
            (switched.readiness(model) != Readiness::Unknown)
                .then(|| (model.clone(), l.swap_in_s + tick))
        })
        .collect()
}

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
