//! The supervisor's task: the loop that checks the server, restarts it with back-off, and
//! carries out its handles' commands one at a time.

use super::*;

/// What woke the task up.
enum Wake {
    Elapsed,
    Command(Command),
    Shutdown,
}

/// The supervisor's task and its state.
pub(super) struct Task {
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
    /// Put to sleep on purpose: checked, never restarted, until woken (or stopped).
    asleep: bool,
    /// Handles waiting for the outcome of the next start attempt.
    waiters: Vec<Reply>,
}

impl Task {
    pub(super) fn new(
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
            asleep: false,
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

    pub(super) async fn run(mut self, parked: bool) {
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
                Wake::Command(Command::Sleep(level, reply)) => {
                    let _ = reply.send(self.put_to_sleep(level).await);
                }
                Wake::Command(Command::Wake(reply)) => {
                    let _ = reply.send(self.wake_up().await);
                }
            }
        }
    }

    /// Puts the server to sleep on purpose, unless it is parked or cannot sleep.
    async fn put_to_sleep(&mut self, level: SleepLevel) -> Result<(), ControlError> {
        let name = self.server.name().to_owned();
        if self.parked {
            return Err(ControlError::NotRunning(format!(
                "{name}: stopped, cannot sleep"
            )));
        }
        let Some(api) = self.server.sleep_api() else {
            return Err(ControlError::Unsupported(format!(
                "{name}: its command does not start it to sleep (vLLM: --enable-sleep-mode; \
                 llama-server: --sleep-idle-seconds)"
            )));
        };
        // No restart while it goes to sleep: a check failing meanwhile is not a crash.
        self.asleep = true;
        match api.sleep(self.server.probe(), level).await {
            Ok(()) => {
                tracing::info!(server = %name, ?level, "asleep on purpose");
                self.shared.update(|s| s.state = ServerState::Sleeping);
                self.shared.emit(SupervisorEvent::Slept { level });
                Ok(())
            }
            Err(e) => {
                // Perhaps half asleep: supervised as before; the caller stops it.
                self.asleep = false;
                let e = ControlError::from(e);
                self.shared.error(&e.to_string());
                Err(e)
            }
        }
    }

    /// Wakes a server put to sleep on purpose (at once `Ok` when it was not).
    async fn wake_up(&mut self) -> Result<(), ControlError> {
        let name = self.server.name().to_owned();
        if self.parked {
            return Err(ControlError::NotRunning(format!(
                "{name}: stopped, cannot wake"
            )));
        }
        if !self.asleep {
            return Ok(());
        }
        let Some(api) = self.server.sleep_api() else {
            return Err(ControlError::Unsupported(format!("{name}: cannot sleep")));
        };
        match api.wake(self.server.probe()).await {
            Ok(()) => {
                tracing::info!(server = %name, "woken");
                self.asleep = false;
                self.consecutive = 0;
                self.shared.update(|s| {
                    s.state = ServerState::Healthy;
                    s.consecutive_failures = 0;
                    s.last_healthy_at = Some(SystemTime::now());
                });
                self.shared.emit(SupervisorEvent::Woken);
                Ok(())
            }
            Err(e) => {
                let e = ControlError::from(e);
                self.shared.error(&e.to_string());
                Err(e)
            }
        }
    }

    /// Where a server that passed its check stands: sleeping (it said so to the probe, which
    /// did not wake it) or healthy.
    fn passed_state(&self) -> ServerState {
        if self.server.probe().asleep() {
            ServerState::Sleeping
        } else {
            ServerState::Healthy
        }
    }

    /// The check when the supervisor takes over: a server that does not run is started at
    /// once; one that runs but fails gets the same `failure_threshold` as later.
    async fn first_check(&mut self) -> Option<(String, bool)> {
        match self.server.check().await {
            Ok(()) => {
                // It runs (perhaps started by an earlier instance): later starts are restarts.
                self.ever_started = true;
                let state = self.passed_state();
                self.shared.update(|s| {
                    s.checks += 1;
                    s.state = state;
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
                let state = self.passed_state();
                self.shared.update(|s| {
                    s.state = state;
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
                // Asleep on purpose it is never restarted (a restart would load its model on
                // a GPU another server now uses): its wake fails, and its owner restarts it.
                (!self.asleep
                    && (not_running || consecutive >= self.config.failure_threshold.max(1)))
                .then_some((error, false))
            }
        }
    }

    /// A crash reported by a handle: healthy now (someone already restarted it) is answered at
    /// once; otherwise a restart without back-off, answered when its attempt ends.
    async fn reported(&mut self, reply: Reply) -> Option<(String, bool)> {
        if self.parked || self.asleep {
            let what = if self.parked { "stopped" } else { "asleep" };
            let _ = reply.send(Err(ControlError::Stopped(format!(
                "{}: {what} on purpose",
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
                        // Down, it can neither sleep nor wake.
                        Wake::Command(Command::Sleep(_, r) | Command::Wake(r)) => {
                            let _ = r.send(Err(ControlError::NotRunning(format!(
                                "{last}; being restarted"
                            ))));
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
                self.asleep = false;
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
        self.asleep = false;
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
