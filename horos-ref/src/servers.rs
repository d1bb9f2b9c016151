//! The lanes' inference servers that the binary runs itself: a local process (`command`) or a
//! Docker container (`[lane.docker]`), from `horos-servers`, each owned by a `Supervisor`: the
//! feeder reports crashes to it, the allocator stops and starts servers through it.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use horos_feeder::ServerControl;
use horos_gpu_alloc::ledger::{LeaseRequest, LedgerError, VramLedger};
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_server_control::{ControlError, ModeServer};
use horos_servers::{
    DockerConfig, DockerServer, ManagedServer, ProbeConfig, ProcessConfig, ProcessServer,
    Supervisor, SupervisorConfig, SupervisorHandle, connect_docker,
};

use crate::config::LaneSection;

/// A server the binary runs, through its supervisor: the feeder's control of it, and its
/// lifecycle, with its GPU memory booked in the VRAM ledger from before it starts until it
/// has stopped. Dropping the last clone ends the supervisor (stop the server first).
#[derive(Clone)]
pub struct LaneServer {
    handle: SupervisorHandle,
    supervisor: Arc<Supervisor>,
    booking: Option<Arc<Booking>>,
}

/// How long a lane server's lease lives without renewal (renewed every third of it).
const LEASE_TTL: Duration = Duration::from_secs(60);
/// How long a GPU's actual free memory may lag behind an unload before another model is
/// unloaded (or the start fails).
const RECLAIM_WAIT: Duration = Duration::from_secs(15);

/// A lane server's GPU memory in the VRAM ledger: booked before the server starts (checked
/// against the GPUs' actual free memory where they are read, so memory a foreign process
/// holds counts), renewed while it runs, released once it stopped.
pub struct Booking {
    ledger: Arc<VramLedger>,
    monitor: Option<Arc<dyn GpuMonitor>>,
    request: LeaseRequest,
    held: Mutex<Option<(String, tokio::task::JoinHandle<()>)>>,
    /// Idle pooled models that give way when the memory is short.
    room: Option<crate::room::LatePool>,
}

impl Booking {
    /// `mb` on each of `gpus` for `owner`, in `ledger`; short of memory, idle models of `room`
    /// on those GPUs are unloaded first.
    pub fn new(
        ledger: Arc<VramLedger>,
        monitor: Option<Arc<dyn GpuMonitor>>,
        owner: String,
        gpus: &[u32],
        mb: u64,
        room: Option<crate::room::LatePool>,
    ) -> Booking {
        Booking {
            ledger,
            monitor,
            request: LeaseRequest {
                owner,
                pid: Some(std::process::id()),
                parts: gpus.iter().map(|&g| (g, mb)).collect(),
                ttl: LEASE_TTL,
            },
            held: Mutex::new(None),
            room,
        }
    }

    fn held(&self) -> MutexGuard<'_, Option<(String, tokio::task::JoinHandle<()>)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Books the memory (a no-op while it is held).
    async fn take(&self) -> Result<(), ControlError> {
        if self.held().is_some() {
            return Ok(());
        }
        let gpus: Vec<u32> = self.request.parts.iter().map(|&(g, _)| g).collect();
        // After an unload, until when the GPU's actual free memory may still lag (a process's
        // memory is released some time after it exits).
        let mut reclaiming: Option<std::time::Instant> = None;
        let lease = loop {
            let (ledger, monitor, request) = (
                Arc::clone(&self.ledger),
                self.monitor.clone(),
                self.request.clone(),
            );
            let booked = tokio::task::spawn_blocking(move || match &monitor {
                Some(m) => ledger.acquire_checked(&request, m.as_ref()),
                None => ledger.acquire(&request),
            })
            .await
            .map_err(ControlError::other)?;
            let why = match booked {
                Ok(lease) => break lease,
                Err(e) => e,
            };
            // Only memory short on one of its GPUs is worth an unload, there.
            let (short_on, by_actual) = match &why {
                LedgerError::Insufficient { gpu, by, .. } if gpus.contains(gpu) => {
                    (Some(*gpu), *by == "actual")
                }
                _ => (None, false),
            };
            if by_actual && reclaiming.is_some_and(|t| std::time::Instant::now() < t) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let freed = match (&self.room, short_on) {
                (Some(room), Some(gpu)) => crate::room::unload_one_idle(room, &[gpu]).await,
                _ => None,
            };
            match freed {
                Some(model) => {
                    tracing::info!(
                        model, server = %self.request.owner, gpu = ?short_on,
                        "unloaded an idle pooled model to make room for a lane's server"
                    );
                    reclaiming = Some(std::time::Instant::now() + RECLAIM_WAIT);
                }
                None => {
                    return Err(ControlError::StartFailed(format!(
                        "no GPU memory for {}: {why}",
                        self.request.owner
                    )));
                }
            }
        };
        let (ledger, id) = (Arc::clone(&self.ledger), lease.id.clone());
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LEASE_TTL / 3).await;
                let (l, lease) = (Arc::clone(&ledger), id.clone());
                match tokio::task::spawn_blocking(move || l.renew(&lease, LEASE_TTL)).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => {
                        tracing::warn!(lease = %id, "a lane server's VRAM lease expired before its renewal");
                    }
                    // A busy or briefly unreadable ledger: the next renewal tries again.
                    Ok(Err(e)) => {
                        tracing::warn!(lease = %id, error = %e, "VRAM lease renewal failed")
                    }
                    Err(e) => tracing::warn!(lease = %id, error = %e, "VRAM lease renewal failed"),
                }
            }
        });
        *self.held() = Some((lease.id, renew));
        Ok(())
    }

    /// Releases the memory (a no-op when none is held).
    async fn give_back(&self) {
        let Some((id, renew)) = self.held().take() else {
            return;
        };
        renew.abort();
        let ledger = Arc::clone(&self.ledger);
        let released = tokio::task::spawn_blocking(move || ledger.release(&id)).await;
        if let Ok(Err(e)) = released {
            // It expires within LEASE_TTL anyway.
            tracing::warn!(owner = %self.request.owner, error = %e, "VRAM lease release failed");
        }
    }
}

impl LaneServer {
    /// The server, supervised but not started: no periodic check (the feeder's health checks
    /// know when a lane is only busy), a reported crash restarted at once, failed attempts
    /// retried from 1 s, doubling up to 60 s.
    fn new(server: Arc<dyn ManagedServer>, booking: Option<Booking>) -> LaneServer {
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
            supervisor: Arc::new(supervisor),
            booking: booking.map(Arc::new),
        }
    }

    /// What the feeder health-checks and reports crashes to: the supervisor's handle.
    pub fn control(&self) -> Arc<dyn ServerControl> {
        Arc::new(self.handle.clone())
    }

    /// Books its GPU memory, starts the server and waits until it is healthy (the booking is
    /// given back if it does not come up).
    pub async fn start(&self) -> Result<(), String> {
        ModeServer::start(self).await.map_err(|e| e.to_string())
    }

    /// Stops the server (SIGTERM then SIGKILL; or stop and remove the container), then gives
    /// its GPU memory back; its supervisor restarts nothing afterwards.
    pub async fn stop(&self) -> Result<(), String> {
        ModeServer::stop(self).await.map_err(|e| e.to_string())
    }

    /// Its supervisor's view: state, restarts, the last error.
    pub fn status(&self) -> horos_servers::SupervisorStatus {
        self.supervisor.status()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.handle.server().name()
    }
}

#[async_trait::async_trait]
impl ModeServer for LaneServer {
    async fn start(&self) -> Result<(), ControlError> {
        if let Some(b) = &self.booking {
            b.take().await?;
        }
        let started = self.handle.start().await;
        if started.is_err()
            && let Some(b) = &self.booking
        {
            // A server that did not come up may still hold memory: stop it before giving the
            // memory back.
            let _ = ModeServer::stop(&self.handle).await;
            b.give_back().await;
        }
        started
    }
    async fn stop(&self) -> Result<(), ControlError> {
        let stopped = ModeServer::stop(&self.handle).await;
        if stopped.is_ok()
            && let Some(b) = &self.booking
        {
            b.give_back().await;
        }
        stopped
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
        return Ok(Some(LaneServer::new(server, booking)));
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
        return Ok(Some(LaneServer::new(server, booking)));
    }
    Ok(None)
}
