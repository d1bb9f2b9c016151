//! The supervisor: the one owner of a server's life. A tokio task checks the server at an
//! interval and restarts it with exponential back-off when it crashed or keeps failing its
//! checks; through a [`SupervisorHandle`] a feeder reports a crash and waits for the server to
//! answer again, and a mode executor stops it and starts it again. Status and events for status
//! pages and logs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use horos_server_control::{ControlError, ModeServer, ServerControl, SleepLevel};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use horos_server_control::Backoff;

use crate::server::ManagedServer;

mod task;
#[cfg(test)]
mod tests;

use task::Task;

/// Supervisor settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SupervisorConfig {
    /// Time between two checks, ms (10 000); `0`: no periodic check, the server is restarted
    /// only when a crash is reported through a [`SupervisorHandle`].
    pub interval_ms: u64,
    /// Failed checks in a row before a restart (2); a server that is not running at all
    /// (crashed, exited, container gone) is restarted at the first failed check.
    pub failure_threshold: u32,
    /// Wait before the first restart attempt, ms (1000); doubled for each further attempt.
    pub backoff_initial_ms: u64,
    /// Longest wait between attempts, ms (60 000).
    pub backoff_max_ms: u64,
    /// Healthy this long since the last restart, the back-off returns to its initial value,
    /// ms (120 000).
    pub reset_after_ms: u64,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            interval_ms: 10_000,
            failure_threshold: 2,
            backoff_initial_ms: 1000,
            backoff_max_ms: 60_000,
            reset_after_ms: 120_000,
        }
    }
}

/// Where a supervised server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Being started (the first start).
    Starting,
    /// Passed its last check.
    Healthy,
    /// Passed its last check asleep (llama-server's `--sleep-idle-seconds`, vLLM's sleep mode):
    /// its model unloaded, the next request wakes it; the probe does not.
    Sleeping,
    /// Failed its last check(s), not restarted yet.
    Unhealthy,
    /// Waiting out the back-off before a restart attempt.
    BackingOff,
    /// Being restarted.
    Restarting,
    /// Stopped on purpose through [`ModeServer::stop`] (or never started by
    /// [`Supervisor::spawn_stopped`]): neither checked nor restarted until the next start.
    Parked,
    /// The supervisor stopped.
    Stopped,
}

/// A snapshot for status pages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SupervisorStatus {
    /// The server's name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Where it stands.
    pub state: ServerState,
    /// Successful starts after the first one (after a crash, a hang, or a failed start).
    pub restarts: u64,
    /// Start or restart attempts that failed.
    pub failed_starts: u64,
    /// Checks done.
    pub checks: u64,
    /// Checks failed.
    pub failed_checks: u64,
    /// Failed checks in a row now.
    pub consecutive_failures: u32,
    /// The last error (check or start), if any.
    pub last_error: Option<String>,
    /// When it happened.
    pub last_error_at: Option<SystemTime>,
    /// When the last check passed.
    pub last_healthy_at: Option<SystemTime>,
    /// The back-off before the next restart attempt, ms.
    pub next_backoff_ms: u64,
}

/// What happened, as it happens (for logs and live status pages).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SupervisorEvent {
    /// The server is up after a start or a restart.
    Started {
        /// Its generation (start count).
        generation: u64,
    },
    /// A check failed.
    CheckFailed {
        /// Why.
        error: String,
        /// In a row.
        consecutive: u32,
        /// The server process or container is not running.
        not_running: bool,
    },
    /// A restart attempt comes after `delay_ms`.
    Restarting {
        /// Attempt number within this outage (1 first).
        attempt: u32,
        /// The back-off, ms.
        delay_ms: u64,
        /// Why.
        reason: String,
    },
    /// A start or restart attempt failed.
    StartFailed {
        /// Why.
        error: String,
    },
    /// Stopped on purpose (a mode switch): no check or restart until the next start.
    Parked,
    /// Put to sleep on purpose (a mode switch): checked, never restarted, until it is woken.
    Slept {
        /// The level asked.
        level: SleepLevel,
    },
    /// Woken from a sleep asked for.
    Woken,
    /// The supervisor stopped.
    Stopped,
}

type Reply = oneshot::Sender<Result<(), ControlError>>;

/// What a [`SupervisorHandle`] asks of the supervisor's task.
enum Command {
    /// A crash was seen: restart unless the server is healthy, answer once it is (or the
    /// attempt failed).
    Recover(Reply),
    /// Start (again) now and supervise; answer with the start's outcome.
    Start(Reply),
    /// Stop and park: no check or restart until the next start.
    Stop(Reply),
    /// Put it to sleep: checked, never restarted, until a wake (or a stop and a start).
    Sleep(SleepLevel, Reply),
    /// Wake it from a sleep asked for.
    Wake(Reply),
}

struct Shared {
    status: Mutex<SupervisorStatus>,
    events: broadcast::Sender<SupervisorEvent>,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut SupervisorStatus)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
        }
    }

    fn emit(&self, e: SupervisorEvent) {
        // No receiver is fine.
        let _ = self.events.send(e);
    }

    fn error(&self, e: &str) {
        let e = e.to_owned();
        self.update(|s| {
            s.last_error = Some(e);
            s.last_error_at = Some(SystemTime::now());
        });
    }
}

/// Supervises one server in a tokio task, the one place that starts, restarts and stops it
/// while it runs: starts it unless it already runs, checks it every interval, restarts it with
/// back-off, and carries out what its [`SupervisorHandle`]s ask. Dropping the supervisor ends
/// the task (the server keeps running: stop it, or drop it, yourself).
pub struct Supervisor {
    shared: Arc<Shared>,
    handle: SupervisorHandle,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("status", &self.status())
            .finish()
    }
}

impl Supervisor {
    /// Starts supervising `server` on the current tokio runtime (starting it unless it runs).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn spawn(server: Arc<dyn ManagedServer>, config: SupervisorConfig) -> Self {
        Self::spawn_with(server, config, false)
    }

    /// Takes charge of `server` without starting it: it stays [`ServerState::Parked`] until a
    /// handle's [`ModeServer::start`] (a lane that waits for its GPU).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn spawn_stopped(server: Arc<dyn ManagedServer>, config: SupervisorConfig) -> Self {
        Self::spawn_with(server, config, true)
    }

    fn spawn_with(server: Arc<dyn ManagedServer>, config: SupervisorConfig, parked: bool) -> Self {
        let (events, _) = broadcast::channel(256);
        let shared = Arc::new(Shared {
            status: Mutex::new(SupervisorStatus {
                name: server.name().to_owned(),
                url: server.url(),
                state: if parked {
                    ServerState::Parked
                } else {
                    ServerState::Starting
                },
                restarts: 0,
                failed_starts: 0,
                checks: 0,
                failed_checks: 0,
                consecutive_failures: 0,
                last_error: None,
                last_error_at: None,
                last_healthy_at: None,
                next_backoff_ms: config.backoff_initial_ms,
            }),
            events,
        });
        let (stop, stop_rx) = watch::channel(false);
        let (commands, commands_rx) = mpsc::channel(64);
        let handle = SupervisorHandle {
            server: Arc::clone(&server),
            commands,
        };
        let task = Task::new(server, config, Arc::clone(&shared), stop_rx, commands_rx);
        let task = tokio::spawn(task.run(parked));
        Supervisor {
            shared,
            handle,
            stop,
            task: Some(task),
        }
    }

    /// A handle for the server's users: the feeder's [`ServerControl`], the mode executor's
    /// [`ModeServer`].
    pub fn handle(&self) -> SupervisorHandle {
        self.handle.clone()
    }

    /// The current status.
    pub fn status(&self) -> SupervisorStatus {
        match self.shared.status.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Events from now on (a slow receiver misses the oldest: `RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<SupervisorEvent> {
        self.shared.events.subscribe()
    }

    /// Ends the task (after a start or check in progress) and waits for it. The server is left
    /// as it is; requests of handles waiting are answered [`ControlError::Stopped`], later ones
    /// too.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A supervised server as its users see it (cheap to clone). Health checks go to the server
/// directly; recoveries, starts and stops go to the supervisor, which carries them out one at a
/// time: a crash reported by several users (or seen by the supervisor's own check too) is one
/// restart.
#[derive(Clone)]
pub struct SupervisorHandle {
    server: Arc<dyn ManagedServer>,
    commands: mpsc::Sender<Command>,
}

impl std::fmt::Debug for SupervisorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorHandle")
            .field("server", &self.server.name())
            .finish()
    }
}

impl SupervisorHandle {
    /// The supervised server.
    pub fn server(&self) -> &Arc<dyn ManagedServer> {
        &self.server
    }

    async fn ask(&self, command: impl FnOnce(Reply) -> Command) -> Result<(), ControlError> {
        let gone =
            || ControlError::Stopped(format!("{}: supervisor shut down", self.server.name()));
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(command(reply))
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

#[async_trait]
impl ServerControl for SupervisorHandle {
    /// Runs and passes the probe's check (the tiny inference included when due).
    async fn healthy(&self) -> bool {
        self.server.check().await.is_ok()
    }

    /// The supervisor restarts the server at once unless it is healthy again (someone else's
    /// report, or its own check, brought it back), then answers; a failed attempt is answered
    /// with its error and retried by the supervisor with back-off.
    async fn recover(&self) -> Result<(), ControlError> {
        self.ask(Command::Recover).await
    }
}

#[async_trait]
impl ModeServer for SupervisorHandle {
    /// Starts the server (a running instance is stopped first) and supervises it; a failed
    /// start leaves it parked.
    async fn start(&self) -> Result<(), ControlError> {
        self.ask(Command::Start).await
    }

    /// Stops the server and parks it: no check or restart until the next start.
    async fn stop(&self) -> Result<(), ControlError> {
        self.ask(Command::Stop).await
    }

    /// Whether its command says it sleeps on request (see [`crate::SleepApi`]).
    fn can_sleep(&self) -> bool {
        self.server.sleep_api().is_some()
    }

    /// Puts the server to sleep (vLLM's `POST /sleep?level=N`; llama-server: waits for its
    /// idle timer) and returns once it says it sleeps. Asleep on purpose it is still checked
    /// (shown [`ServerState::Sleeping`]) but never restarted, and a reported crash is answered
    /// [`ControlError::Stopped`], until [`ModeServer::wake`] or a stop and a start.
    async fn sleep(&self, level: SleepLevel) -> Result<(), ControlError> {
        self.ask(|r| Command::Sleep(level, r)).await
    }

    /// Wakes it from [`ModeServer::sleep`] (vLLM's `POST /wake_up`; llama-server: one tiny
    /// request) and returns once it says it is awake; supervised as before from then on. A
    /// failed wake leaves it as it is, never restarted: stop it and start it again.
    async fn wake(&self) -> Result<(), ControlError> {
        self.ask(Command::Wake).await
    }
}
