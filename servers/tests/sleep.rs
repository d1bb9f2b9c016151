//! Servers put to sleep and woken on purpose, against real child processes (the test binary
//! acting as a vLLM with sleep mode: horos-fakeai's sleep API), supervised.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fast_supervisor, process_config};
use horos_fakeai::{FakeConfig, Fault, SleepScript};
use horos_server_control::{ControlError, ModeServer, SleepLevel};
use horos_servers::{
    BookedServer, ManagedServer, ProcessConfig, ProcessServer, ServerState, SleepKind, Supervisor,
};
use horos_testkit::{runtime, wait_until};
use horos_vllm_client::{ChatMessage, ChatRequest, Client};

const LIMIT: Duration = Duration::from_secs(60);

/// The fake's process, its command line saying `--enable-sleep-mode` as vLLM's would when
/// `sleepy` (sh hands it over as `$0`, unused: the fake reads its flags from the environment).
fn config(test: &str, fake: &FakeConfig, dir: &std::path::Path, sleepy: bool) -> ProcessConfig {
    let mut cfg = process_config(test, fake, dir);
    if sleepy {
        let mut wrapped: Vec<String> = ["sh", "-c", "exec \"$@\"", "--enable-sleep-mode"]
            .map(str::to_owned)
            .to_vec();
        wrapped.append(&mut cfg.command);
        cfg.command = wrapped;
    }
    cfg
}

fn sleep_mode(wake_fault: Fault) -> FakeConfig {
    FakeConfig {
        sleep: SleepScript {
            enabled: true,
            sleep_latency: Duration::from_millis(50),
            wake_latency_l1: Duration::from_millis(100),
            wake_latency_l2: Duration::from_millis(200),
            wake_fault,
            ..SleepScript::default()
        },
        ..FakeConfig::default()
    }
}

async fn chat_status(url: &str) -> Option<u16> {
    let client = Client::new(url).unwrap();
    let req = ChatRequest::new("fake-model", vec![ChatMessage::user("hi")]).max_tokens(1);
    client
        .chat(&req)
        .await
        .err()
        .map(|e| e.status().unwrap_or(0))
}

/// Asleep on purpose, a vLLM is checked (shown sleeping) but never restarted, not even when
/// its checks fail; woken, it serves and is supervised as before.
#[test]
fn a_vllm_put_to_sleep_is_checked_never_restarted_and_wakes() {
    horos_fakeai::run_child_if_requested();
    let test = "a_vllm_put_to_sleep_is_checked_never_restarted_and_wakes";
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(test, &sleep_mode(Fault::None), dir.path(), true);
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(cfg).unwrap());
        assert_eq!(server.sleep_api().map(|a| a.kind()), Some(SleepKind::Vllm));
        let supervisor = Supervisor::spawn(server.clone(), fast_supervisor());
        let handle = supervisor.handle();
        wait_until("healthy", LIMIT, || async {
            supervisor.status().state == ServerState::Healthy
        })
        .await;
        assert!(handle.can_sleep());
        assert_eq!(chat_status(&server.url()).await, None);

        handle.sleep(SleepLevel::One).await.unwrap();
        assert_eq!(supervisor.status().state, ServerState::Sleeping);
        assert_eq!(server.probe().sleeping().await, Some(true));
        assert_eq!(chat_status(&server.url()).await, Some(503));
        let checks = supervisor.status().checks;
        wait_until("more checks while asleep", LIMIT, || async {
            supervisor.status().checks >= checks + 3
        })
        .await;
        let status = supervisor.status();
        assert_eq!(status.state, ServerState::Sleeping, "{status:?}");
        assert_eq!(status.restarts, 0);
        assert_eq!(server.generation(), 1, "a check woke or restarted it");

        handle.wake().await.unwrap();
        assert_eq!(supervisor.status().state, ServerState::Healthy);
        assert_eq!(chat_status(&server.url()).await, None);
        handle.wake().await.unwrap(); // awake: nothing to do

        // Asleep again, it dies: its checks fail, nothing restarts it, its wake fails; a
        // stop and a start bring it back.
        handle.sleep(SleepLevel::Two).await.unwrap();
        let pid = server.pid().unwrap();
        horos_servers::pidfile::signal_group(pid as i32, libc::SIGKILL);
        wait_until("a failed check", LIMIT, || async {
            supervisor.status().state == ServerState::Unhealthy
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(server.generation(), 1, "restarted while asleep on purpose");
        assert_eq!(supervisor.status().restarts, 0);
        assert!(handle.wake().await.is_err());
        ModeServer::stop(&handle).await.unwrap();
        ModeServer::start(&handle).await.unwrap();
        assert_eq!(chat_status(&server.url()).await, None);
        ModeServer::stop(&handle).await.unwrap();
    });
}

/// A wake that fails (500) leaves the server asleep and unrestarted; a server whose command
/// does not start it to sleep cannot sleep (typed, and it keeps serving).
#[test]
fn a_failed_wake_is_an_error_and_a_server_without_sleep_mode_cannot_sleep() {
    horos_fakeai::run_child_if_requested();
    let test = "a_failed_wake_is_an_error_and_a_server_without_sleep_mode_cannot_sleep";
    let dir = tempfile::tempdir().unwrap();
    let failing = config(test, &sleep_mode(Fault::Status(500)), dir.path(), true);
    let plain = ProcessConfig {
        log_path: Some(dir.path().join("plain.log")),
        ..config(test, &sleep_mode(Fault::None), dir.path(), false)
    };
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(failing).unwrap());
        let booked = BookedServer::new(server.clone(), None);
        booked.start().await.unwrap();
        assert!(booked.can_sleep());
        booked.sleep(SleepLevel::One).await.unwrap();
        let err = booked.wake().await.unwrap_err();
        assert!(err.to_string().contains("500"), "{err}");
        assert_eq!(server.probe().sleeping().await, Some(true));
        assert_eq!(booked.status().state, ServerState::Sleeping);
        assert_eq!(server.generation(), 1);
        booked.stop().await.unwrap();

        // Its command does not say --enable-sleep-mode (though the fake would sleep).
        let server = Arc::new(ProcessServer::new(plain).unwrap());
        assert_eq!(server.sleep_api(), None);
        let booked = BookedServer::new(server.clone(), None);
        booked.start().await.unwrap();
        assert!(!booked.can_sleep());
        let err = booked.sleep(SleepLevel::One).await.unwrap_err();
        assert!(matches!(err, ControlError::Unsupported(_)), "{err}");
        assert_eq!(server.probe().sleeping().await, Some(false));
        assert_eq!(chat_status(&server.url()).await, None);
        booked.stop().await.unwrap();
    });
}

/// A sleep that hangs (the server never answers `/sleep`) fails once the server's start
/// time-out has passed, leaving it awake and supervised: its caller stops it.
#[test]
fn a_sleep_that_hangs_fails_within_the_start_timeout() {
    horos_fakeai::run_child_if_requested();
    let test = "a_sleep_that_hangs_fails_within_the_start_timeout";
    let dir = tempfile::tempdir().unwrap();
    let mut fake = sleep_mode(Fault::None);
    fake.sleep.sleep_fault = Fault::Hang;
    let cfg = config(test, &fake, dir.path(), true);
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(cfg).unwrap());
        let booked = BookedServer::new(server.clone(), None);
        booked.start().await.unwrap();
        // The same server seen with a start time-out of 1 s (so that its start above had
        // all the time it needed): a sleep waits that long.
        let server = Arc::new(
            ProcessServer::new(ProcessConfig {
                start_timeout_s: 1,
                port: server.config().port,
                ..server.config().clone()
            })
            .unwrap(),
        );
        let t0 = std::time::Instant::now();
        let api = server.sleep_api().unwrap();
        let err = api
            .sleep(server.probe(), SleepLevel::One)
            .await
            .unwrap_err();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert!(took >= Duration::from_secs(1), "{took:?}");
        assert!(err.to_string().contains("/sleep"), "{err}");
        assert_eq!(server.probe().sleeping().await, Some(false));
        booked.stop().await.unwrap();
    });
}

/// A llama-server started with `--sleep-idle-seconds` (here a fake one with llama-server's idle
/// sleep: its command line says `--sleep-idle-seconds=0.3`): a sleep asked for waits until it
/// has fallen asleep by itself, and a wake is one request, after which it says it is awake.
#[test]
fn a_llama_server_with_an_idle_timer_sleeps_by_itself_and_a_request_wakes_it() {
    horos_fakeai::run_child_if_requested();
    let test = "a_llama_server_with_an_idle_timer_sleeps_by_itself_and_a_request_wakes_it";
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeConfig {
        sleep: SleepScript {
            idle_sleep: Some(Duration::from_millis(300)),
            wake_latency_l2: Duration::from_millis(100),
            ..SleepScript::default()
        },
        ..FakeConfig::default()
    };
    let mut cfg = process_config(test, &fake, dir.path());
    let mut wrapped: Vec<String> = ["sh", "-c", "exec \"$@\"", "--sleep-idle-seconds=0.3"]
        .map(str::to_owned)
        .to_vec();
    wrapped.append(&mut cfg.command);
    cfg.command = wrapped;
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(cfg).unwrap());
        assert_eq!(
            server.sleep_api().map(|a| a.kind()),
            Some(SleepKind::IdleTimer {
                idle: Duration::from_millis(300)
            })
        );
        let booked = BookedServer::new(server.clone(), None);
        booked.start().await.unwrap();
        assert!(booked.can_sleep());
        assert_eq!(chat_status(&server.url()).await, None);
        let t0 = std::time::Instant::now();
        booked.sleep(SleepLevel::One).await.unwrap();
        assert!(
            t0.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(server.probe().sleeping().await, Some(true));
        assert_eq!(booked.status().state, ServerState::Sleeping);
        booked.wake().await.unwrap();
        assert_eq!(server.probe().sleeping().await, Some(false));
        assert_eq!(booked.status().state, ServerState::Healthy);
        assert_eq!(server.generation(), 1);
        booked.stop().await.unwrap();
    });
}
