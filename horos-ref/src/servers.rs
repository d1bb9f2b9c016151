//! The lanes' inference servers that the binary runs itself: a local process (`command`) or a
//! Docker container (`[lane.docker]`), as horos-modes' lane settings describe them at a
//! [`Placement`], built as horos-servers' [`BookedServer`] (supervised; its GPU memory a
//! gpu-alloc [`Booking`] in the VRAM ledger).

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::booking::Booking;
use horos_modes::settings::Placement;
use horos_server_control::Reservation;
use horos_servers::{BookedServer, DockerServer, ProcessServer, connect_docker};

use crate::config::LaneSection;

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
