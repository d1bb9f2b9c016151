//! A simulated GPU fleet for tests and demos: memory follows loads and unloads, utilization
//! follows batches, temperature follows utilization through a [`ThermalModel`], or a script
//! ([`TemperatureStep`]s) for demos and tests of the alerts.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{GpuMonitor, GpuProcess, GpuSample, MonitorError};
use crate::thermal::ThermalModel;

#[derive(Debug, Clone)]
struct SimGpu {
    total_mb: u64,
    driver_mb: u64,
    allocations: BTreeMap<String, (u64, Option<u32>)>,
    active_batches: u32,
    temperature_c: f64,
}

impl SimGpu {
    fn used_mb(&self) -> u64 {
        self.driver_mb + self.allocations.values().map(|(mb, _)| mb).sum::<u64>()
    }
    fn utilization(&self) -> f64 {
        if self.active_batches > 0 { 0.95 } else { 0.0 }
    }
}

/// One step of a scripted temperature: from `at_ms` after the script was given
/// ([`SimFleet::with_temperature_script`]), GPU `gpu` reads `temperature_c` (until a later step
/// or [`SimFleet::set_temperature`] changes it). For demos and tests of the temperature alerts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemperatureStep {
    /// GPU index.
    pub gpu: u32,
    /// When, milliseconds after the script was given.
    pub at_ms: u64,
    /// The temperature it reads from then on, °C.
    pub temperature_c: f64,
}

/// A temperature script and where it is.
#[derive(Debug)]
struct Script {
    started: Instant,
    steps: Vec<TemperatureStep>,
    next: usize,
}

/// A simulated fleet of GPUs (identical, or each of its own size).
#[derive(Debug)]
pub struct SimFleet {
    gpus: Mutex<Vec<SimGpu>>,
    script: Mutex<Option<Script>>,
    model: ThermalModel,
    name: String,
    /// Whether servers' bookings take memory here ([`SimFleet::servers_take_what_they_book`]).
    stand_in: bool,
}

impl SimFleet {
    /// `n` GPUs of `total_mb` each (300 MB taken by the driver), at ambient temperature.
    pub fn new(n: u32, total_mb: u64) -> Self {
        Self::with_sizes(&vec![total_mb; n as usize])
    }

    /// One GPU per entry of `total_mb`, of that size (300 MB taken by the driver), at ambient
    /// temperature.
    pub fn with_sizes(total_mb: &[u64]) -> Self {
        let model = ThermalModel::default();
        let gpus = total_mb
            .iter()
            .map(|&total_mb| SimGpu {
                total_mb,
                driver_mb: 300.min(total_mb),
                allocations: BTreeMap::new(),
                active_batches: 0,
                temperature_c: model.ambient_c,
            })
            .collect();
        Self {
            gpus: Mutex::new(gpus),
            script: Mutex::new(None),
            model,
            name: "Simulated GPU".into(),
            stand_in: false,
        }
    }

    /// The fleet stands in for real GPUs under real servers (which run on the CPU): a server
    /// that books memory takes it here while it runs ([`GpuMonitor::occupy`]), as its process
    /// would on a GPU, so the memory reported used follows what runs where. Without it, only
    /// [`SimFleet::load`] takes memory (the simulated pool backend, scripted processes).
    pub fn servers_take_what_they_book(mut self) -> Self {
        self.stand_in = true;
        self
    }

    /// Plays `steps` from now: each sample first applies the steps whose time has come (in
    /// `at_ms` order). A step naming a GPU the fleet lacks is ignored.
    pub fn with_temperature_script(self, mut steps: Vec<TemperatureStep>) -> Self {
        steps.sort_by_key(|s| s.at_ms);
        *self.script.lock().unwrap_or_else(|e| e.into_inner()) = Some(Script {
            started: Instant::now(),
            steps,
            next: 0,
        });
        self
    }

    /// Applies the script's steps that are due.
    fn play_script(&self, gpus: &mut [SimGpu]) {
        let mut script = self.script.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sc) = script.as_mut() else { return };
        let elapsed = u64::try_from(sc.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        while let Some(step) = sc.steps.get(sc.next).filter(|s| s.at_ms <= elapsed) {
            if let Some(g) = gpus.get_mut(step.gpu as usize) {
                g.temperature_c = step.temperature_c;
            }
            sc.next += 1;
        }
    }

    /// Replaces the thermal model (temperatures reset to its ambient).
    pub fn with_thermal_model(mut self, model: ThermalModel) -> Self {
        for g in self
            .gpus
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            g.temperature_c = model.ambient_c;
        }
        self.model = model;
        self
    }

    fn with<R>(&self, gpu: u32, f: impl FnOnce(&mut SimGpu) -> R) -> Result<R, MonitorError> {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        gpus.get_mut(gpu as usize)
            .map(f)
            .ok_or(MonitorError::NoSuchGpu(gpu))
    }

    /// Allocates `mb` on `gpu` under `key` (a model or process); fails when it does not fit.
    pub fn load(&self, gpu: u32, key: &str, mb: u64, pid: Option<u32>) -> Result<(), MonitorError> {
        self.with(gpu, |g| {
            let free = g.total_mb.saturating_sub(g.used_mb());
            if mb > free {
                return Err(MonitorError::OutOfMemory {
                    gpu,
                    requested_mb: mb,
                    free_mb: free,
                });
            }
            let e = g.allocations.entry(key.to_owned()).or_insert((0, pid));
            e.0 += mb;
            Ok(())
        })?
    }

    /// Frees everything `key` holds on `gpu`; returns the MB freed.
    pub fn unload(&self, gpu: u32, key: &str) -> Result<u64, MonitorError> {
        self.with(gpu, |g| g.allocations.remove(key).map_or(0, |(mb, _)| mb))
    }

    /// Frees everything `key` holds on every GPU; returns the MB freed.
    pub fn unload_everywhere(&self, key: &str) -> u64 {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        gpus.iter_mut()
            .map(|g| g.allocations.remove(key).map_or(0, |(mb, _)| mb))
            .sum()
    }

    /// A batch starts on `gpu` (utilization goes to 95 %).
    pub fn begin_batch(&self, gpu: u32) -> Result<(), MonitorError> {
        self.with(gpu, |g| g.active_batches += 1)
    }

    /// A batch ends on `gpu`.
    pub fn end_batch(&self, gpu: u32) -> Result<(), MonitorError> {
        self.with(gpu, |g| {
            g.active_batches = g.active_batches.saturating_sub(1)
        })
    }

    /// Advances simulated time: temperatures move towards their equilibrium.
    pub fn advance(&self, dt_s: f64) {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        for g in gpus.iter_mut() {
            g.temperature_c = self.model.step(g.temperature_c, g.utilization(), dt_s);
        }
    }

    /// Forces a temperature (tests).
    pub fn set_temperature(&self, gpu: u32, temperature_c: f64) -> Result<(), MonitorError> {
        self.with(gpu, |g| g.temperature_c = temperature_c)
    }

    /// Used memory of one GPU, MB.
    pub fn used_mb(&self, gpu: u32) -> Result<u64, MonitorError> {
        self.with(gpu, |g| g.used_mb())
    }
}

impl GpuMonitor for SimFleet {
    fn occupy(&self, owner: &str, parts: &[(u32, u64)]) {
        if !self.stand_in {
            return;
        }
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        for &(gpu, mb) in parts {
            if let Some(g) = gpus.get_mut(gpu as usize) {
                // What a server holds, not added to: booked again, it holds the same.
                g.allocations.insert(owner.to_owned(), (mb, None));
            }
        }
    }

    fn vacate(&self, owner: &str) {
        if self.stand_in {
            self.unload_everywhere(owner);
        }
    }

    fn sample(&self) -> Result<Vec<GpuSample>, MonitorError> {
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        self.play_script(&mut gpus);
        Ok(gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let used = g.used_mb().min(g.total_mb);
                let util = g.utilization();
                GpuSample {
                    index: i as u32,
                    name: self.name.clone(),
                    memory_total_mb: g.total_mb,
                    memory_used_mb: used,
                    memory_free_mb: g.total_mb - used,
                    temperature_c: Some((g.temperature_c * 10.0).round() / 10.0),
                    utilization_pct: Some((util * 100.0).round() as u32),
                    power_w: Some(60.0 + 500.0 * util),
                    processes: g
                        .allocations
                        .values()
                        .filter_map(|(mb, pid)| {
                            pid.map(|pid| GpuProcess {
                                pid,
                                used_mb: Some(*mb),
                            })
                        })
                        .collect(),
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_stand_in_fleet_holds_what_servers_book_while_they_run() {
        let plain = SimFleet::new(2, 4096);
        plain.occupy("lane:chat", &[(0, 192)]);
        assert_eq!(
            plain.used_mb(0).unwrap(),
            300,
            "not a stand-in: nothing taken"
        );
        let fleet = SimFleet::new(2, 4096).servers_take_what_they_book();
        fleet.occupy("lane:chat", &[(0, 192)]);
        fleet.occupy("pool:minilm", &[(1, 300)]);
        // Booked again (a renewal, a restart): held once.
        fleet.occupy("pool:minilm", &[(1, 300)]);
        assert_eq!(fleet.used_mb(0).unwrap(), 300 + 192);
        assert_eq!(fleet.used_mb(1).unwrap(), 300 + 300);
        fleet.vacate("pool:minilm");
        assert_eq!(fleet.used_mb(1).unwrap(), 300);
        assert_eq!(fleet.used_mb(0).unwrap(), 492, "the lane's stays");
    }
}
