//! The lanes' inference servers that the binary runs itself: a local process (`command`) or a
//! Docker container (`[lane.docker]`), from `horos-servers`, each owned by a `Supervisor`: the
//! feeder reports crashes to it, the allocator stops and starts servers through it.

use std::path::Path;
use std::sync::Arc;

use horos_feeder::ServerControl;
use horos_server_control::{ControlError, ModeServer};
use horos_servers::{
    DockerConfig, DockerServer, ManagedServer, ProbeConfig, ProcessConfig, ProcessServer,
    Supervisor, SupervisorConfig, SupervisorHandle, connect_docker,
};

use crate::config::LaneSection;

/// A server the binary runs, through its supervisor: the feeder's control of it, and its
/// lifecycle. Dropping the last clone ends the supervisor (stop the server first).
#[derive(Clone)]
pub struct LaneServer {
    handle: SupervisorHandle,
    _supervisor: Arc<Supervisor>,
}

impl LaneServer {
    /// The server, supervised but not started: no periodic check (the feeder's health checks
    /// know when a lane is only busy), a reported crash restarted at once, failed attempts
    /// retried from 1 s, doubling up to 60 s.
    fn new(server: Arc<dyn ManagedServer>) -> LaneServer {
        let supervisor = Supervisor::spawn_stopped(
            server,
            SupervisorConfig {
                interval_ms: 0,
                ..SupervisorConfig::default()
            },
        );
        let handle = supervisor.handle();
        LaneServer {
            handle,
            _supervisor: Arc::new(supervisor),
        }
    }

    /// What the feeder health-checks and reports crashes to: the supervisor's handle.
    pub fn control(&self) -> Arc<dyn ServerControl> {
        Arc::new(self.handle.clone())
    }

    /// Starts the server and waits until it is healthy.
    pub async fn start(&self) -> Result<(), String> {
        self.handle.start().await.map_err(|e| e.to_string())
    }

    /// Stops the server (SIGTERM then SIGKILL; or stop and remove the container); its
    /// supervisor restarts nothing afterwards.
    pub async fn stop(&self) -> Result<(), String> {
        ModeServer::stop(&self.handle)
            .await
            .map_err(|e| e.to_string())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.handle.server().name()
    }
}

#[async_trait::async_trait]
impl ModeServer for LaneServer {
    async fn start(&self) -> Result<(), ControlError> {
        self.handle.start().await
    }
    async fn stop(&self) -> Result<(), ControlError> {
        ModeServer::stop(&self.handle).await
    }
}

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
        return Ok(Some(LaneServer::new(server)));
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
        return Ok(Some(LaneServer::new(server)));
    }
    Ok(None)
}
