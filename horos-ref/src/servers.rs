//! The lanes' inference servers that the binary runs itself: a local process (`command`) or a
//! Docker container (`[lane.docker]`), as horos-modes' lane settings describe them at a
//! [`Placement`], built as horos-servers' [`BookedServer`] (supervised; its GPU memory a
//! gpu-alloc [`Booking`] in the VRAM ledger).

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::booking::Booking;
use horos_modes::settings::Placement;
use horos_server_control::{LogKind, Reservation};
use horos_servers::logs::LogFiles;
use horos_servers::{
    BookedServer, DockerServer, ProcessBackendFactory, ProcessServer, connect_docker,
};

use crate::config::{Config, LaneSection};

/// A lane's server, run by the binary.
pub type LaneServer = BookedServer;

/// Builds the server of `lane` at `placement` if the binary runs it (`None`: someone else's
/// server). Nothing is started yet. `run_dir` holds pidfiles and logs; `owner` scopes the
/// clean-up of containers an earlier run left.
pub async fn lane_server(
    lane: &LaneSection,
    placement: &Placement,
    booking: Option<Booking>,
    run_dir: &Path,
    owner: &str,
) -> Result<Option<LaneServer>, String> {
    if let Some(config) = lane.process_config(placement, run_dir) {
        std::fs::create_dir_all(run_dir)
            .map_err(|e| format!("cannot create {}: {e}", run_dir.display()))?;
        let server = Arc::new(ProcessServer::new(config).map_err(|e| e.to_string())?);
        return Ok(Some(BookedServer::new(server, reservation(booking))));
    }
    if let Some(config) = lane.docker_config(placement, owner) {
        let docker = connect_docker(None).await.map_err(|e| e.to_string())?;
        let server = Arc::new(DockerServer::new(docker, config).map_err(|e| e.to_string())?);
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

/// The logs `run` writes under the run directory: its own (`run`), each lane server instance
/// it runs as a process (by its instance name), each pooled model served by a process (by the
/// model's name). Containers log to their engine (`docker logs`). What is read has the
/// values of `[coordinator]`'s keys replaced.
pub fn log_book(config: &Config) -> LogFiles {
    let run_dir = config.run_dir();
    let mut book = LogFiles::new().with("run", LogKind::Run, run_dir.join("run.log"));
    for lane in &config.lanes {
        for placement in lane.placements(config.allocator.as_ref(), &config.lanes) {
            if let Some(path) = lane
                .process_config(&placement, &run_dir)
                .and_then(|c| c.log_path)
            {
                book = book.with(placement.name.clone(), LogKind::Lane, path);
            }
        }
    }
    let pool = config.coordinator.as_ref().and_then(|c| c.pool.as_ref());
    for m in pool.iter().flat_map(|p| &p.models) {
        if m.server.docker.is_none() {
            let path = ProcessBackendFactory::log_path(&run_dir.join("pool"), &m.name);
            book = book.with(m.name.clone(), LogKind::Model, path);
        }
    }
    book.redacting(secrets(config))
}

/// The values of `[coordinator]`'s secrets: the admin key, the data-plane keys and the remote
/// APIs' keys (those read from the environment, as the coordinator reads them).
fn secrets(config: &Config) -> Vec<String> {
    let Some(c) = config.coordinator.as_ref().map(|c| &c.settings) else {
        return Vec::new();
    };
    let vars = c
        .api_key_env
        .iter()
        .chain(c.keys.values().filter_map(|k| k.key_env.as_ref()))
        .chain(c.remotes.values().filter_map(|r| r.api_key_env.as_ref()));
    vars.filter_map(|v| std::env::var(v).ok())
        .chain(c.api_key.clone())
        .collect()
}
