//! The lanes' inference servers that the binary runs itself: a local process (`command`) or a
//! Docker container (`[lane.docker]`), as horos-modes' lane settings describe them at a
//! [`Placement`], built as horos-servers' [`BookedServer`] (supervised; its GPU memory a
//! gpu-alloc [`Booking`] in the VRAM ledger).

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::booking::Booking;
use horos_modes::settings::Placement;
use horos_server_control::{LogKind, Reservation};
use horos_servers::logs::{LogFiles, Redactions};
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
/// configuration's [`Secrets`](crate::config::Secrets) replaced, and those of `redactions`,
/// which a reload adds to.
pub fn log_book(config: &Config, redactions: Redactions) -> LogFiles {
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
    book.redacted_by(redactions)
        .redacting(config.secrets.values().to_vec())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use horos_server_control::{LogBook, LogWindow};

    use super::*;

    #[test]
    fn a_secret_a_variable_expanded_into_a_command_is_redacted_and_a_path_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let env = |v: &str| match v {
            "LLAMA_API_KEY" => Some("sk-from-the-env-1".to_owned()),
            "UPSTREAM_HEADER" => Some("Bearer 0123456789".to_owned()),
            "MODELS" => Some("/srv/models".to_owned()),
            _ => None,
        };
        let text = format!(
            "[node]\nrun_dir = {run_dir}\n[[lane]]\nqueue = \"chat\"\n\
             url = \"http://127.0.0.1:8211\"\ncommand = [\"llama-server\", \"-m\", \
             \"${{MODELS}}/a.gguf\", \"--api-key\", \"${{LLAMA_API_KEY}}\", \"--header\", \
             \"${{UPSTREAM_HEADER}}\"]\n",
            run_dir = toml::Value::String(dir.path().display().to_string())
        );
        let config = Config::parse_with(&text, &env).unwrap();
        let book = log_book(&config, Redactions::new());
        let lane = &config.lanes[0];
        let placement = &lane.placements(None, &config.lanes)[0];
        let log = lane
            .process_config(placement, &config.run_dir())
            .and_then(|c| c.log_path)
            .unwrap();
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(
            &log,
            "loading /srv/models/a.gguf\nkey sk-from-the-env-1, header Bearer 0123456789\n",
        )
        .unwrap();
        let text = book
            .read(&placement.name, LogWindow::Tail { lines: 2 })
            .unwrap()
            .text;
        assert_eq!(
            text,
            "loading /srv/models/a.gguf\nkey [redacted], header [redacted]\n"
        );
    }
}
