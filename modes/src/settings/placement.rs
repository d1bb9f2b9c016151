//! Where a lane's servers run and what they book: one server per lane, or under `[allocator]`
//! one instance per GPU of `allocator.gpus` ([`LaneSettings::placements`]); the process or
//! container each one is ([`LaneSettings::process_config`], [`LaneSettings::docker_config`]);
//! the GPU memory each books in the VRAM ledger while it runs ([`LaneSettings::booking`]).

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::booking::{Booking, LatePool};
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_servers::{DockerConfig, ProbeConfig, ProcessConfig};

use super::{AllocatorSettings, LaneSettings};

/// Where one server of a lane runs: the lane's only one, or its instance on one of the
/// allocator's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The URL the feeder and the coordinator send its requests to.
    pub url: String,
    /// Its name (pidfile, log, container).
    pub name: String,
    /// The port it listens on (on the host; 0 where the URL names none).
    pub port: u16,
    /// Its GPUs.
    pub gpus: Vec<u32>,
    /// The allocator's GPU it serves, for a lane whose server the binary runs under
    /// `[allocator]`.
    pub gpu: Option<u32>,
    /// Whether its server starts with the system: always without `[allocator]`, else only where
    /// the initial assignment gives its GPU to the lane (the others wait, their gates closed,
    /// until the allocator switches a GPU to them).
    pub starts: bool,
}

impl LaneSettings {
    /// The lane's servers: with `allocator` and a server the binary runs, one instance per GPU
    /// of `allocator.gpus` (the `k`-th on the URL's port plus `k`, named after the queue and
    /// its GPU, see [`LaneSettings::instance_url`] and [`LaneSettings::instance_name`]); else
    /// its one server as written. `lanes`: every lane of the file (the initial assignment
    /// depends on them).
    pub fn placements(
        &self,
        allocator: Option<&AllocatorSettings>,
        lanes: &[LaneSettings],
    ) -> Vec<Placement> {
        let initial = allocator.map(|a| a.initial_lanes(lanes));
        let starts = |k: usize| {
            initial
                .as_ref()
                .is_none_or(|i| i.get(k).is_some_and(|q| q == &self.queue))
        };
        match allocator {
            Some(a) if self.is_managed() => a
                .gpus
                .iter()
                .enumerate()
                .map(|(k, &gpu)| Placement {
                    url: self.instance_url(k),
                    name: self.instance_name(k, gpu),
                    port: self.port().map_or(0, |p| p.saturating_add(k as u16)),
                    gpus: vec![gpu],
                    gpu: Some(gpu),
                    starts: starts(k),
                })
                .collect(),
            _ => vec![Placement {
                url: self.url.clone(),
                name: self.queue.clone(),
                port: self.port().unwrap_or(0),
                gpus: self.gpus.clone(),
                gpu: None,
                starts: starts(0),
            }],
        }
    }

    /// `[lane.probe]`, asking for the lane's `model` unless the section names another.
    pub fn server_probe(&self) -> ProbeConfig {
        ProbeConfig {
            model: self.probe.model.clone().or_else(|| self.model.clone()),
            ..self.probe.clone()
        }
    }

    /// The lane's server at `placement` as a local process, when the lane has a `command`:
    /// its log and pidfile in `run_dir`, named after the placement.
    pub fn process_config(&self, placement: &Placement, run_dir: &Path) -> Option<ProcessConfig> {
        let command = self.command.as_ref()?;
        let name = &placement.name;
        Some(ProcessConfig {
            command: command.clone(),
            port: placement.port,
            gpus: placement.gpus.clone(),
            model: self.model.clone(),
            log_path: Some(run_dir.join(format!("{name}.log"))),
            pidfile: Some(run_dir.join(format!("{name}.pid"))),
            name: name.clone(),
            start_timeout_s: self.start_wait_s,
            probe: self.server_probe(),
            ..ProcessConfig::default()
        })
    }

    /// The lane's server at `placement` as a Docker container, when the lane has
    /// `[lane.docker]` (and no `command`): labelled with `owner`, which scopes the clean-up of
    /// the containers an earlier run left.
    pub fn docker_config(&self, placement: &Placement, owner: &str) -> Option<DockerConfig> {
        if self.command.is_some() {
            return None;
        }
        let d = self.docker.as_ref()?;
        Some(DockerConfig {
            name: placement.name.clone(),
            image: d.image.clone(),
            cmd: d.cmd.clone(),
            env: d.env.clone(),
            binds: d.binds.clone(),
            memory_mb: d.memory_mb,
            container_port: d.container_port,
            host_port: placement.port,
            gpus: placement.gpus.clone(),
            model: self.model.clone(),
            owner: owner.to_owned(),
            start_timeout_s: self.start_wait_s,
            probe: self.server_probe(),
            ..DockerConfig::default()
        })
    }

    /// What the lane's server at `placement` books in `ledger` while it runs: its estimated
    /// memory ([`LaneSettings::vram_facts`]), spread over its GPUs. `None` where no GPU is read
    /// (`monitor`: without it the ledger does not know their sizes), the binary does not run
    /// the server, it has no GPU, or its memory cannot be estimated (logged: it then books
    /// nothing). Idle models of the pool in `room` give way to it.
    pub fn booking(
        &self,
        placement: &Placement,
        ledger: &Arc<VramLedger>,
        monitor: Option<&Arc<dyn GpuMonitor>>,
        room: &LatePool,
    ) -> Option<Booking> {
        let monitor = monitor?;
        if !self.is_managed() || placement.gpus.is_empty() {
            return None;
        }
        let estimate = match horos_gpu_alloc::estimate::estimate(&self.vram_facts()) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(lane = %self.queue, error = %e, "its server books no GPU memory: give vram_mb or weights");
                return None;
            }
        };
        let per_gpu = estimate.mb.div_ceil(placement.gpus.len() as u64).max(1);
        tracing::info!(server = %placement.name, mb = estimate.mb, source = ?estimate.source, "VRAM booked while the server runs");
        Some(Booking::new(
            Arc::clone(ledger),
            Some(Arc::clone(monitor)),
            format!("lane:{}", placement.name),
            &placement.gpus,
            per_gpu,
            Some(Arc::clone(room)),
        ))
    }
}
