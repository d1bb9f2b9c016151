//! A supervised server with what it holds while it runs: [`BookedServer`].

use std::sync::Arc;

use horos_server_control::{ControlError, ModeServer, Reservation, ServerControl, SleepLevel};

use crate::server::ManagedServer;
use crate::supervisor::{Supervisor, SupervisorConfig, SupervisorHandle, SupervisorStatus};

/// A server run through its [`Supervisor`], with what it holds while it runs (its GPU memory
/// in a ledger: the seam's [`Reservation`]) taken before it starts and given back once it has
/// stopped: the feeder's control of it ([`BookedServer::control`]) and a mode executor's
/// [`ModeServer`]. Dropping the last clone ends the supervisor (stop the server first).
#[derive(Clone)]
pub struct BookedServer {
    handle: SupervisorHandle,
    supervisor: Arc<Supervisor>,
    booking: Option<Arc<dyn Reservation>>,
}

impl BookedServer {
    /// The server, supervised but not started: no periodic check (the feeder's health checks
    /// know when a lane is only busy), a reported crash restarted at once, failed attempts
    /// retried from 1 s, doubling up to 60 s.
    pub fn new(server: Arc<dyn ManagedServer>, booking: Option<Arc<dyn Reservation>>) -> Self {
        let supervisor = Supervisor::spawn_stopped(
            server,
            SupervisorConfig {
                interval_ms: 0,
                ..SupervisorConfig::default()
            },
        );
        let handle = supervisor.handle();
        BookedServer {
            handle,
            supervisor: Arc::new(supervisor),
            booking,
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
    pub fn status(&self) -> SupervisorStatus {
        self.supervisor.status()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.handle.server().name()
    }
}

#[async_trait::async_trait]
impl ModeServer for BookedServer {
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

    fn can_sleep(&self) -> bool {
        self.handle.can_sleep()
    }

    /// Puts the server to sleep, then gives its GPU memory back (asleep, at either level, it
    /// holds no more than its CUDA context there: level 1's weights are in host RAM).
    async fn sleep(&self, level: SleepLevel) -> Result<(), ControlError> {
        let slept = self.handle.sleep(level).await;
        if slept.is_ok()
            && let Some(b) = &self.booking
        {
            b.give_back().await;
        }
        slept
    }

    /// Books its GPU memory again, then wakes the server. A failed wake keeps the booking
    /// (the server may hold the memory): the stop that follows gives it back.
    async fn wake(&self) -> Result<(), ControlError> {
        if let Some(b) = &self.booking {
            b.take().await?;
        }
        self.handle.wake().await
    }
}
