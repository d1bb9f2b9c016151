//! The supervisor: the one owner of a server's life. A tokio task checks the server at an
//! interval and restarts it with exponential back-off when it crashed or keeps failing its
//! checks; through a [`SupervisorHandle`] a feeder reports a crash and waits for the server to
//! answer again, and a mode executor stops it and starts it again. Status and events for status
//! pages and logs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use horos_server_control::{ControlError, ModeServer, ServerControl};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use horos_server_control::Backoff;

use crate::server::ManagedServer;

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
}

/// What woke the task up.
enum Wake {
    Elapsed,
    Command(Command),
    Shutdown,
}

/// The supervisor's task and its state.
struct Task {
    server: Arc<dyn ManagedServer>,
    config: SupervisorConfig,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    commands: mpsc::Receiver<Command>,
    backoff: Backoff,
    /// Failed checks in a row.
    consecutive: u32,
    up_since: tokio::time::Instant,
    /// A later start is a restart (counted, after a back-off).
    ever_started: bool,
    /// Stopped on purpose: no check, no restart.
    parked: bool,
    /// Handles waiting for the outcome of the next start attempt.
    waiters: Vec<Reply>,
}

impl Task {
    fn new(
        server: Arc<dyn ManagedServer>,
        config: SupervisorConfig,
        shared: Arc<Shared>,
        stop: watch::Receiver<bool>,
        commands: mpsc::Receiver<Command>,
    ) -> Task {
        let backoff = Backoff::new(
            Duration::from_millis(config.backoff_initial_ms),
            Duration::from_millis(config.backoff_max_ms),
        );
        // A server started before the supervisor took over (generation > 0) counts as started:
        // a crash seen at the very first check is a restart, with its back-off.
        let ever_started = server.generation() > 0;
        Task {
            server,
            config,
            shared,
            stop,
            commands,
            backoff,
            consecutive: 0,
            up_since: tokio::time::Instant::now(),
            ever_started,
            parked: false,
            waiters: Vec::new(),
        }
    }

    /// Sleeps `d` (forever with `None`) unless a command comes or the supervisor is shut down.
    async fn wait(&mut self, d: Option<Duration>) -> Wake {
        if *self.stop.borrow() {
            return Wake::Shutdown;
        }
        let sleep = async {
            match d {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => Wake::Elapsed,
            _ = self.stop.changed() => Wake::Shutdown,
            c = self.commands.recv() => match c {
                Some(c) => Wake::Command(c),
                // Every handle is gone (the supervisor keeps one): shutting down.
                None => Wake::Shutdown,
            },
        }
    }

    async fn run(mut self, parked: bool) {
        self.parked = parked;
        self.shared
            .update(|s| s.next_backoff_ms = self.backoff.peek().as_millis() as u64);
        // Restart needed: the reason, and whether to skip the back-off (a reported crash).
        let mut need_start: Option<(String, bool)> = None;
        if !parked {
            need_start = self.first_check().await;
        }
        loop {
            if let Some((reason, at_once)) = need_start.take()
                && !self.restart(reason, at_once).await
            {
                return self.finish();
            }
            let interval = (!self.parked && self.config.interval_ms > 0)
                .then(|| Duration::from_millis(self.config.interval_ms));
            match self.wait(interval).await {
                Wake::Shutdown => return self.finish(),
                Wake::Elapsed => {
                    let checked = tokio::select! {
                        r = self.server.check() => r,
                        _ = self.stop.changed() => return self.finish(),
                    };
                    need_start = self.checked(checked);
                }
                Wake::Command(Command::Recover(reply)) => {
                    need_start = self.reported(reply).await;
                }
                Wake::Command(Command::Start(reply)) => {
                    self.starting();
                    let started = tokio::select! {
                        r = self.server.start() => r,
                        _ = self.stop.changed() => return self.finish(),
                    };
                    let _ = reply.send(self.started_on_request(started));
                }
                Wake::Command(Command::Stop(reply)) => {
                    let _ = reply.send(self.park().await);
                }
            }
        }
    }

    /// The check when the supervisor takes over: a server that does not run is started at
    /// once; one that runs but fails gets the same `failure_threshold` as later.
    async fn first_check(&mut self) -> Option<(String, bool)> {
        match self.server.check().await {
            Ok(()) => {
                // It runs (perhaps started by an earlier instance): later starts are restarts.
                self.ever_started = true;
                self.shared.update(|s| {
                    s.checks += 1;
                    s.state = ServerState::Healthy;
                    s.last_healthy_at = Some(SystemTime::now());
                });
                None
            }
            Err(e) => {
                let error = e.to_string();
                let not_running = e.is_not_running();
                self.shared.update(|s| s.checks += 1);
                if self.ever_started || !not_running {
                    self.consecutive = 1;
                    self.shared.error(&error);
                    self.shared.update(|s| {
                        s.failed_checks += 1;
                        s.consecutive_failures = 1;
                        s.state = ServerState::Unhealthy;
                    });
                    self.shared.emit(SupervisorEvent::CheckFailed {
                        error: error.clone(),
                        consecutive: 1,
                        not_running,
                    });
                }
                (not_running || self.config.failure_threshold <= 1).then_some((error, false))
            }
        }
    }

    /// Records a periodic check; a restart reason when it is due.
    fn checked(&mut self, result: Result<(), crate::error::ServerError>) -> Option<(String, bool)> {
        self.shared.update(|s| s.checks += 1);
        match result {
            Ok(()) => {
                self.consecutive = 0;
                if self.up_since.elapsed() >= Duration::from_millis(self.config.reset_after_ms) {
                    self.backoff.reset();
                }
                let next = self.backoff.peek().as_millis() as u64;
                self.shared.update(|s| {
                    s.state = ServerState::Healthy;
                    s.consecutive_failures = 0;
                    s.last_healthy_at = Some(SystemTime::now());
                    s.next_backoff_ms = next;
                });
                None
            }
            Err(e) => {
                self.consecutive += 1;
                let consecutive = self.consecutive;
                let error = e.to_string();
                let not_running = e.is_not_running();
                tracing::warn!(server = self.server.name(), %error, consecutive, "check failed");
                self.shared.error(&error);
                self.shared.update(|s| {
                    s.failed_checks += 1;
                    s.consecutive_failures = consecutive;
                    s.state = ServerState::Unhealthy;
                });
                self.shared.emit(SupervisorEvent::CheckFailed {
                    error: error.clone(),
                    consecutive,
                    not_running,
                });
                (not_running || consecutive >= self.config.failure_threshold.max(1))
                    .then_some((error, false))
            }
        }
    }

    /// A crash reported by a handle: healthy now (someone already restarted it) is answered at
    /// once; otherwise a restart without back-off, answered when its attempt ends.
    async fn reported(&mut self, reply: Reply) -> Option<(String, bool)> {
        if self.parked {
            let _ = reply.send(Err(ControlError::Stopped(format!(
                "{}: stopped on purpose",
                self.server.name()
            ))));
            return None;
        }
        match self.server.check().await {
            Ok(()) => {
                let _ = reply.send(Ok(()));
                None
            }
            Err(e) => {
                let error = format!("crash reported: {e}");
                self.shared.error(&error);
                self.shared.update(|s| s.state = ServerState::Unhealthy);
                self.waiters.push(reply);
                Some((error, true))
            }
        }
    }

    /// Tells every waiting handle how the start attempt ended.
    fn answer(&mut self, outcome: &Result<(), ControlError>) {
        for w in self.waiters.drain(..) {
            let _ = w.send(outcome.clone());
        }
    }

    /// Restarts until a start succeeds, backing off between attempts (not before the first one
    /// of a reported crash), handling commands while it waits (a report is answered at once
    /// with the last error, a start is tried at once, a stop parks); `false`: shut down.
    async fn restart(&mut self, reason: String, at_once: bool) -> bool {
        let mut attempt = 0u32;
        let mut last = reason.clone();
        loop {
            attempt += 1;
            if attempt == 1 && at_once {
                self.shared.emit(SupervisorEvent::Restarting {
                    attempt,
                    delay_ms: 0,
                    reason: reason.clone(),
                });
                tracing::warn!(server = self.server.name(), %reason, "restarting at once");
            } else if self.ever_started || attempt > 1 {
                let delay = self.backoff.next_delay();
                let next = self.backoff.peek().as_millis() as u64;
                self.shared.update(|s| {
                    s.state = ServerState::BackingOff;
                    s.next_backoff_ms = next;
                });
                self.shared.emit(SupervisorEvent::Restarting {
                    attempt,
                    delay_ms: delay.as_millis() as u64,
                    reason: reason.clone(),
                });
                tracing::warn!(server = self.server.name(), attempt, ?delay, %reason, "restarting");
                let until = tokio::time::Instant::now() + delay;
                loop {
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    match self.wait(Some(left)).await {
                        Wake::Elapsed => break,
                        Wake::Shutdown => return false,
                        // A report while backing off is told at once that the server is down
                        // (a recovery never waits out a back-off).
                        Wake::Command(Command::Recover(r)) => {
                            let _ = r.send(Err(ControlError::StartFailed(format!(
                                "{last}; next attempt in {left:?}"
                            ))));
                        }
                        // A start asked for now is tried now.
                        Wake::Command(Command::Start(r)) => {
                            self.waiters.push(r);
                            break;
                        }
                        Wake::Command(Command::Stop(r)) => {
                            let _ = r.send(self.park().await);
                            return true;
                        }
                    }
                }
            }
            self.starting();
            let started = tokio::select! {
                r = self.server.start() => r,
                _ = self.stop.changed() => return false,
            };
            let outcome = started.map_err(ControlError::from);
            self.started(&outcome);
            self.answer(&outcome);
            match outcome {
                Ok(()) => return true,
                Err(e) => last = e.to_string(),
            }
        }
    }

    /// Records the outcome of a start.
    fn started(&mut self, outcome: &Result<(), ControlError>) {
        match outcome {
            Ok(()) => {
                let generation = self.server.generation();
                let restart = self.ever_started;
                self.shared.update(|s| {
                    if restart {
                        s.restarts += 1;
                    }
                    s.state = ServerState::Healthy;
                    s.consecutive_failures = 0;
                    s.last_healthy_at = Some(SystemTime::now());
                });
                self.shared.emit(SupervisorEvent::Started { generation });
                self.ever_started = true;
                self.parked = false;
                self.consecutive = 0;
                self.up_since = tokio::time::Instant::now();
            }
            Err(e) => {
                let error = e.to_string();
                tracing::warn!(server = self.server.name(), %error, "start failed");
                self.shared.error(&error);
                self.shared.update(|s| s.failed_starts += 1);
                self.shared.emit(SupervisorEvent::StartFailed { error });
                // A failed start may have left a process or container behind (it is cleaned up
                // by the next attempt): the next success is a restart.
                self.ever_started = true;
            }
        }
    }

    /// Shows a start (or restart) in progress.
    fn starting(&self) {
        let ever_started = self.ever_started;
        self.shared.update(|s| {
            s.state = if ever_started {
                ServerState::Restarting
            } else {
                ServerState::Starting
            }
        });
    }

    /// The end of a start asked for by a handle (now, no back-off): a failure parks the server
    /// (the caller decides when to try again).
    fn started_on_request(
        &mut self,
        started: Result<(), crate::error::ServerError>,
    ) -> Result<(), ControlError> {
        let outcome = started.map_err(ControlError::from);
        self.started(&outcome);
        self.answer(&outcome);
        if outcome.is_err() {
            self.parked = true;
            self.shared.update(|s| s.state = ServerState::Parked);
        }
        outcome
    }

    /// Stops the server and parks it; whoever waited for a restart is told it will not come.
    async fn park(&mut self) -> Result<(), ControlError> {
        self.parked = true;
        let stopped = self.server.stop().await.map_err(ControlError::from);
        self.shared.update(|s| s.state = ServerState::Parked);
        self.shared.emit(SupervisorEvent::Parked);
        let name = self.server.name().to_owned();
        self.answer(&Err(ControlError::Stopped(format!(
            "{name}: stopped on purpose"
        ))));
        stopped
    }

    fn finish(mut self) {
        let name = self.server.name().to_owned();
        self.answer(&Err(ControlError::Stopped(format!(
            "{name}: supervisor shut down"
        ))));
        // Requests still queued get the same answer (their replies drop with the receiver).
        self.commands.close();
        self.shared.update(|s| s.state = ServerState::Stopped);
        self.shared.emit(SupervisorEvent::Stopped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServerError;
    use crate::probe::{Probe, ProbeConfig};
    use crate::server::RunState;
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

    /// A server whose starts fail a given number of times and whose crash is a flag.
    struct Scripted {
        probe: Probe,
        generation: AtomicU64,
        running: AtomicBool,
        failing_starts: AtomicU32,
    }

    #[async_trait]
    impl ManagedServer for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn url(&self) -> String {
            "http://127.0.0.1:9".into()
        }
        fn probe(&self) -> &Probe {
            &self.probe
        }
        fn generation(&self) -> u64 {
            self.generation.load(Ordering::SeqCst)
        }
        async fn start(&self) -> Result<(), ServerError> {
            let left = self.failing_starts.load(Ordering::SeqCst);
            if left > 0 {
                self.failing_starts.store(left - 1, Ordering::SeqCst);
                return Err(ServerError::Unhealthy("scripted start failure".into()));
            }
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.running.store(true, Ordering::SeqCst);
            Ok(())
        }
        async fn stop(&self) -> Result<(), ServerError> {
            self.running.store(false, Ordering::SeqCst);
            Ok(())
        }
        async fn state(&self) -> RunState {
            if self.running.load(Ordering::SeqCst) {
                RunState::Running
            } else {
                RunState::Exited(crate::server::ExitInfo::default())
            }
        }
        async fn check(&self) -> Result<(), ServerError> {
            match self.state().await.not_running_error("scripted") {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
    }

    /// The back-off delays of the `Restarting` events until the next `Started`.
    async fn delays_until_started(rx: &mut broadcast::Receiver<SupervisorEvent>) -> Vec<u64> {
        let mut delays = Vec::new();
        loop {
            match rx.recv().await.unwrap() {
                SupervisorEvent::Restarting { delay_ms, .. } => delays.push(delay_ms),
                SupervisorEvent::Started { .. } => return delays,
                _ => {}
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn restarts_back_off_doubling_and_reset_after_a_healthy_period() {
        let server = Arc::new(Scripted {
            probe: Probe::new("http://127.0.0.1:9", ProbeConfig::default()).unwrap(),
            generation: AtomicU64::new(0),
            running: AtomicBool::new(false),
            failing_starts: AtomicU32::new(3),
        });
        let config = SupervisorConfig {
            interval_ms: 5,
            failure_threshold: 2,
            backoff_initial_ms: 10,
            backoff_max_ms: 40,
            reset_after_ms: 100,
        };
        // On a current-thread runtime the task cannot run before this test awaits: subscribing
        // right after the spawn misses no event.
        let supervisor = Supervisor::spawn(server.clone(), config);
        let mut rx = supervisor.subscribe();
        // The first start needs no wait; three failures then wait 10, 20, 40 ms (the cap).
        assert_eq!(delays_until_started(&mut rx).await, [10, 20, 40]);
        let s = supervisor.status();
        assert_eq!((s.restarts, s.failed_starts), (1, 3));

        // A crash soon after: the back-off is still at the cap.
        server.running.store(false, Ordering::SeqCst);
        assert_eq!(delays_until_started(&mut rx).await, [40]);

        // Healthy for longer than reset_after: back to the initial wait.
        while supervisor.status().next_backoff_ms != 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.running.store(false, Ordering::SeqCst);
        assert_eq!(delays_until_started(&mut rx).await, [10]);
        assert_eq!(supervisor.status().restarts, 3);
        supervisor.shutdown().await;
    }

    fn scripted(failing_starts: u32) -> Arc<Scripted> {
        Arc::new(Scripted {
            probe: Probe::new("http://127.0.0.1:9", ProbeConfig::default()).unwrap(),
            generation: AtomicU64::new(0),
            running: AtomicBool::new(false),
            failing_starts: AtomicU32::new(failing_starts),
        })
    }

    /// No periodic check: only reports restart.
    fn on_reports_only() -> SupervisorConfig {
        SupervisorConfig {
            interval_ms: 0,
            failure_threshold: 2,
            backoff_initial_ms: 10,
            backoff_max_ms: 40,
            reset_after_ms: 100,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_reported_crash_is_one_restart_at_once_however_many_report_it() {
        let server = scripted(0);
        let supervisor = Supervisor::spawn(server.clone(), on_reports_only());
        let mut rx = supervisor.subscribe();
        assert_eq!(delays_until_started(&mut rx).await, Vec::<u64>::new());
        let handle = supervisor.handle();
        // Healthy: a report restarts nothing.
        handle.recover().await.unwrap();
        assert_eq!(server.generation(), 1);

        server.running.store(false, Ordering::SeqCst);
        assert!(!handle.healthy().await);
        let other = supervisor.handle();
        let (a, b) = tokio::join!(handle.recover(), other.recover());
        a.unwrap();
        b.unwrap();
        assert!(handle.healthy().await);
        assert_eq!(
            server.generation(),
            2,
            "two reports of one crash: one restart"
        );
        // At once: no back-off before the first attempt of a reported crash.
        assert_eq!(delays_until_started(&mut rx).await, [0]);
        assert_eq!(supervisor.status().restarts, 1);
        supervisor.shutdown().await;
        assert!(matches!(
            handle.recover().await,
            Err(ControlError::Stopped(_))
        ));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_attempt_is_answered_and_retried_with_back_off() {
        let server = scripted(0);
        let supervisor = Supervisor::spawn(server.clone(), on_reports_only());
        let handle = supervisor.handle();
        handle.recover().await.unwrap();
        server.running.store(false, Ordering::SeqCst);
        server.failing_starts.store(2, Ordering::SeqCst);
        let mut rx = supervisor.subscribe();
        let e = handle.recover().await.unwrap_err();
        assert!(matches!(e, ControlError::Unhealthy(_)), "{e}");
        assert!(e.is_retryable());
        // While it backs off, a report is answered at once: still down.
        let e = handle.recover().await.unwrap_err();
        assert!(matches!(e, ControlError::StartFailed(_)), "{e}");
        // The supervisor goes on by itself: 10 ms, then 20 ms.
        assert_eq!(delays_until_started(&mut rx).await, [0, 10, 20]);
        assert!(handle.healthy().await);
        assert_eq!(supervisor.status().failed_starts, 2);
        supervisor.shutdown().await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stopped_server_is_not_restarted_until_started_again() {
        let server = scripted(0);
        let config = SupervisorConfig {
            interval_ms: 5,
            ..on_reports_only()
        };
        let supervisor = Supervisor::spawn_stopped(server.clone(), config);
        let handle = supervisor.handle();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(server.generation(), 0, "spawn_stopped started it");
        assert_eq!(supervisor.status().state, ServerState::Parked);
        ModeServer::start(&handle).await.unwrap();
        assert_eq!(server.generation(), 1);
        ModeServer::stop(&handle).await.unwrap();
        assert!(!handle.healthy().await);
        // Checks would see it down every 5 ms: parked, nothing restarts it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(server.generation(), 1);
        assert!(matches!(
            handle.recover().await,
            Err(ControlError::Stopped(_))
        ));
        // A failed start leaves it parked; the next one works.
        server.failing_starts.store(1, Ordering::SeqCst);
        assert!(ModeServer::start(&handle).await.is_err());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(server.generation(), 1);
        ModeServer::start(&handle).await.unwrap();
        assert_eq!(server.generation(), 2);
        // Supervised again: a crash is seen by the periodic check and restarted.
        server.running.store(false, Ordering::SeqCst);
        while server.generation() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        supervisor.shutdown().await;
    }
}
