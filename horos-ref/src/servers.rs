//! The lanes' inference servers that the binary runs itself: a local process (`command`) or a
//! Docker container (`[lane.docker]`), built from a lane's section as horos-servers'
//! [`BookedServer`] (supervised; its GPU memory a gpu-alloc [`Booking`] in the VRAM ledger).

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::booking::Booking;
use horos_server_control::Reservation;
use horos_servers::{
    BookedServer, DockerConfig, DockerServer, ProbeConfig, ProcessConfig, ProcessServer,
    connect_docker,
};

use crate::config::LaneSection;

/// A lane's server, run by the binary.
pub type LaneServer = BookedServer;

/// `[lane.probe]`, asking for the lane's `model` unless the section names another.
fn probe(lane: &LaneSection) -> ProbeConfig {
    ProbeConfig {
        model: lane.probe.model.clone().or_else(|| lane.model.clone()),
        ..lane.probe.clone()
    }
}

/// Where one server of a lane runs: the lane's only one, or its instance on one of the
/// allocator's GPUs.
pub struct Placement {
    /// Its name (pidfile, log, container).
    pub name: String,
    /// The port it listens on (on the host).
    pub port: u16,
    /// Its GPUs.
    pub gpus: Vec<u32>,
}

impl Placement {
    /// The lane's one server, as its section says.
    pub fn of(lane: &LaneSection) -> Placement {
        Placement {
            name: lane.queue.clone(),
            port: lane.port().unwrap_or(0),
            gpus: lane.gpus.clone(),
        }
    }
}

/// Builds the server of `lane` at `placement` if the binary runs it (`None`: someone else's
/// server). Nothing is started yet. `run_dir` holds pidfiles and logs; `owner` scopes the
/// clean-up of containers an earlier run left.
pub async fn lane_server(
    lane: &LaneSection,
    placement: Placement,
    booking: Option<Booking>,
    run_dir: &Path,
    owner: &str,
) -> Result<Option<LaneServer>, String> {
    let Placement { name, port, gpus } = placement;
    if let Some(command) = &lane.command {
        std::fs::create_dir_all(run_dir)
            .map_err(|e| format!("cannot create {}: {e}", run_dir.display()))?;
        let server = Arc::new(
            ProcessServer::new(ProcessConfig {
                command: command.clone(),
                port,
                gpus,
                model: lane.model.clone(),
                log_path: Some(run_dir.join(format!("{name}.log"))),
                pidfile: Some(run_dir.join(format!("{name}.pid"))),
                name,
                start_timeout_s: lane.start_wait_s,
                probe: probe(lane),
                ..ProcessConfig::default()
            })
            .map_err(|e| e.to_string())?,
        );
        return Ok(Some(BookedServer::new(server, reservation(booking))));
    }
    if let Some(d) = &lane.docker {
        let docker = connect_docker(None).await.map_err(|e| e.to_string())?;
        let server = Arc::new(
            DockerServer::new(
                docker,
                DockerConfig {
                    name,
                    image: d.image.clone(),
                    cmd: d.cmd.clone(),
                    env: d.env.clone(),
                    binds: d.binds.clone(),
                    memory_mb: d.memory_mb,
                    container_port: d.container_port,
                    host_port: port,
                    gpus,
                    model: lane.model.clone(),
                    owner: owner.to_owned(),
                    start_timeout_s: lane.start_wait_s,
                    probe: probe(lane),
                    ..DockerConfig::default()
                },
            )
            .map_err(|e| e.to_string())?,
        );
        let removed = server
            .cleanup_leftovers()
            .await
            .map_err(|e| e.to_string())?;
        if !removed.is_empty() {
            tracing::info!(lane = %lane.queue, ?removed, "removed containers an earlier run left");
        }
        return Ok(Some(BookedServer::new(server, reservation(booking))));
    }
    Ok(None)
}

/// The booking as the server's reservation.
fn reservation(booking: Option<Booking>) -> Option<Arc<dyn Reservation>> {
    booking.map(|b| Arc::new(b) as Arc<dyn Reservation>)
}
