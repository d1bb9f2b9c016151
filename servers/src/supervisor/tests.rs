//! The supervisor with scripted servers.

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
