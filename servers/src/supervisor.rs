//! The supervisor: a tokio task that checks a server at an interval and restarts it with
//! exponential back-off when it crashed or keeps failing its checks; status and events for
//! status pages and logs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use horos_server_control::Backoff;

use crate::server::ManagedServer;

/// Supervisor settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SupervisorConfig {
    /// Time between two checks, ms (10 000).
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
    /// The supervisor stopped.
    Stopped,
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

/// Supervises one server in a tokio task: starts it unless it already runs, checks it every
/// interval, restarts it with back-off. Dropping the supervisor ends the task (the server keeps
/// running: stop it, or drop it, yourself).
pub struct Supervisor {
    shared: Arc<Shared>,
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
    /// Starts supervising `server` on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn spawn<S: ManagedServer + ?Sized>(server: Arc<S>, config: SupervisorConfig) -> Self {
        let (events, _) = broadcast::channel(256);
        let shared = Arc::new(Shared {
            status: Mutex::new(SupervisorStatus {
                name: server.name().to_owned(),
                url: server.url(),
                state: ServerState::Starting,
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
        let task = tokio::spawn(run(server, config, shared.clone(), stop_rx));
        Supervisor {
            shared,
            stop,
            task: Some(task),
        }
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
    /// as it is.
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

/// Sleeps `d` unless asked to stop; `false` when asked to stop.
async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.changed() => false,
    }
}

async fn run<S: ManagedServer + ?Sized>(
    server: Arc<S>,
    config: SupervisorConfig,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let interval = Duration::from_millis(config.interval_ms.max(1));
    let reset_after = Duration::from_millis(config.reset_after_ms);
    let mut backoff = Backoff::new(
        Duration::from_millis(config.backoff_initial_ms),
        Duration::from_millis(config.backoff_max_ms),
    );
    let mut consecutive: u32 = 0;
    let mut up_since = tokio::time::Instant::now();
    // A server started before the supervisor took over (generation > 0) counts as started: a
    // crash seen at the very first check is a restart, with its back-off.
    let mut ever_started = server.generation() > 0;
    // Restart needed: the reason. A server that does not run is started at once; one that runs
    // but fails its first check gets the same `failure_threshold` as later.
    let mut need_start: Option<String> = None;
    // The restart token of the last check: a restart is skipped if someone else (the feeder)
    // restarted the server since and it is healthy.
    let mut checked = server.restart_token();
    match server.check().await {
        Ok(()) => {
            // It runs (perhaps started by an earlier instance): later starts are restarts.
            ever_started = true;
            shared.update(|s| {
                s.checks += 1;
                s.state = ServerState::Healthy;
                s.last_healthy_at = Some(SystemTime::now());
            });
        }
        Err(e) => {
            let error = e.to_string();
            let not_running = e.is_not_running();
            shared.update(|s| s.checks += 1);
            if ever_started || !not_running {
                consecutive = 1;
                shared.error(&error);
                shared.update(|s| {
                    s.failed_checks += 1;
                    s.consecutive_failures = 1;
                    s.state = ServerState::Unhealthy;
                });
                shared.emit(SupervisorEvent::CheckFailed {
                    error: error.clone(),
                    consecutive: 1,
                    not_running,
                });
            }
            if not_running || config.failure_threshold <= 1 {
                need_start = Some(error);
            }
        }
    }
    loop {
        if let Some(reason) = need_start.take() {
            let mut attempt = 0u32;
            loop {
                attempt += 1;
                if ever_started || attempt > 1 {
                    let delay = backoff.next_delay();
                    shared.update(|s| {
                        s.state = ServerState::BackingOff;
                        s.next_backoff_ms = backoff.peek().as_millis() as u64;
                    });
                    shared.emit(SupervisorEvent::Restarting {
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        reason: reason.clone(),
                    });
                    tracing::warn!(server = server.name(), attempt, ?delay, %reason, "restarting");
                    if !pause(delay, &mut stop).await {
                        return finish(&shared);
                    }
                }
                shared.update(|s| {
                    s.state = if ever_started {
                        ServerState::Restarting
                    } else {
                        ServerState::Starting
                    }
                });
                // The first attempt restarts what the failed check saw; later ones what the
                // failed attempt left.
                let seen = if attempt == 1 {
                    checked
                } else {
                    server.restart_token()
                };
                let started = tokio::select! {
                    r = server.restart_after(seen) => r,
                    _ = stop.changed() => return finish(&shared),
                };
                match started {
                    Ok(()) => {
                        let generation = server.generation();
                        let restart = ever_started;
                        shared.update(|s| {
                            if restart {
                                s.restarts += 1;
                            }
                            s.state = ServerState::Healthy;
                            s.consecutive_failures = 0;
                            s.last_healthy_at = Some(SystemTime::now());
                        });
                        shared.emit(SupervisorEvent::Started { generation });
                        ever_started = true;
                        consecutive = 0;
                        up_since = tokio::time::Instant::now();
                        break;
                    }
                    Err(e) => {
                        let error = e.to_string();
                        tracing::warn!(server = server.name(), %error, "start failed");
                        shared.error(&error);
                        shared.update(|s| s.failed_starts += 1);
                        shared.emit(SupervisorEvent::StartFailed { error });
                        // A failed start may have left a process or container behind (it is
                        // cleaned up by the next attempt): the next success is a restart.
                        ever_started = true;
                    }
                }
            }
        }

        if !pause(interval, &mut stop).await {
            return finish(&shared);
        }
        let result = tokio::select! {
            r = async {
                checked = server.restart_token();
                server.check().await
            } => r,
            _ = stop.changed() => return finish(&shared),
        };
        shared.update(|s| s.checks += 1);
        match result {
            Ok(()) => {
                consecutive = 0;
                if up_since.elapsed() >= reset_after {
                    backoff.reset();
                }
                let next = backoff.peek().as_millis() as u64;
                shared.update(|s| {
                    s.state = ServerState::Healthy;
                    s.consecutive_failures = 0;
                    s.last_healthy_at = Some(SystemTime::now());
                    s.next_backoff_ms = next;
                });
            }
            Err(e) => {
                consecutive += 1;
                let error = e.to_string();
                let not_running = e.is_not_running();
                tracing::warn!(server = server.name(), %error, consecutive, "check failed");
                shared.error(&error);
                shared.update(|s| {
                    s.failed_checks += 1;
                    s.consecutive_failures = consecutive;
                    s.state = ServerState::Unhealthy;
                });
                shared.emit(SupervisorEvent::CheckFailed {
                    error: error.clone(),
                    consecutive,
                    not_running,
                });
                if not_running || consecutive >= config.failure_threshold.max(1) {
                    need_start = Some(error);
                }
            }
        }
    }
}

fn finish(shared: &Shared) {
    shared.update(|s| s.state = ServerState::Stopped);
    shared.emit(SupervisorEvent::Stopped);
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
        fn restart_token(&self) -> u64 {
            self.generation()
        }
        async fn restart_after(&self, _token: u64) -> Result<(), ServerError> {
            self.start().await
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
}
