//! Process servers against real child processes (the test binary acting as a fake OpenAI
//! server): start, health, crash, hang, a leftover of a SIGKILLed parent, stop.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{alive, fast_supervisor, process_config as config};
use horos_fakeai::{FakeConfig, Fault};
use horos_server_control::{BackendFactory, ServerControl};
use horos_servers::{
    ManagedServer, ProbeConfig, ProcessBackendFactory, ProcessConfig, ProcessServer, RunState,
    ServerError, ServerState, Supervisor, SupervisorConfig, SupervisorEvent,
};
use horos_testkit::{free_port, runtime, wait_until};
use horos_vllm_client::{ChatMessage, ChatRequest, Client};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn process_start_health_stop() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        "process_start_health_stop",
        &FakeConfig::default(),
        dir.path(),
    );
    let pidfile = cfg.pidfile.clone().unwrap();
    runtime().block_on(async move {
        let server = ProcessServer::new(cfg).unwrap();
        assert_eq!(server.state().await, RunState::NotStarted);
        assert!(matches!(
            server.check().await,
            Err(ServerError::NotRunning(_))
        ));
        server.start().await.unwrap();
        assert_eq!(server.state().await, RunState::Running);
        let pid = server.pid().unwrap();
        assert_eq!(
            horos_servers::pidfile::read(&pidfile).map(|r| r.pid),
            Some(pid as i32)
        );
        server.check().await.unwrap();
        server.probe().check_full().await.unwrap();
        assert!(server.check().await.is_ok());

        // A real request.
        let client = Client::new(server.url()).unwrap();
        let answer = client
            .chat(&ChatRequest::new(
                "fake-model",
                vec![ChatMessage::user("hello there")],
            ))
            .await
            .unwrap();
        assert_eq!(answer.text(), "hello there");

        let log = std::fs::read_to_string(server.log_path()).unwrap();
        assert!(
            log.contains("HOROS_FAKEAI_URL="),
            "the server's output goes to the log: {log}"
        );

        server.stop().await.unwrap();
        assert_eq!(server.state().await, RunState::NotStarted);
        assert!(!alive(pid), "stopped server still runs");
        assert!(!pidfile.exists(), "pidfile left after stop");
        assert!(server.check().await.is_err());
    });
}

#[test]
fn process_sigkill_is_detected_and_restarted() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        "process_sigkill_is_detected_and_restarted",
        &FakeConfig::default(),
        dir.path(),
    );
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(cfg).unwrap());
        let supervisor = Supervisor::spawn(server.clone(), fast_supervisor());
        let mut events = supervisor.subscribe();
        let first = wait_until("the first start", LIMIT, || async {
            (supervisor.status().state == ServerState::Healthy)
                .then(|| server.pid())
                .flatten()
        })
        .await;
        assert_eq!(supervisor.status().restarts, 0);

        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(first as i32, libc::SIGKILL) };
        let second = wait_until("the restart", LIMIT, || async {
            let s = supervisor.status();
            (s.restarts >= 1 && s.state == ServerState::Healthy)
                .then(|| server.pid())
                .flatten()
        })
        .await;
        assert_ne!(first, second);
        assert!(!alive(first));
        let status = supervisor.status();
        let last = status.last_error.unwrap_or_default();
        assert!(last.contains("signal 9"), "last error: {last}");

        let mut saw_crash = false;
        let mut saw_restart = false;
        while let Ok(e) = events.try_recv() {
            match e {
                SupervisorEvent::CheckFailed {
                    not_running: true, ..
                } => saw_crash = true,
                SupervisorEvent::Restarting { attempt: 1, .. } => saw_restart = true,
                _ => {}
            }
        }
        assert!(
            saw_crash && saw_restart,
            "events: crash {saw_crash}, restart {saw_restart}"
        );

        supervisor.shutdown().await;

        // The feeder's seam, on a supervisor as a lane's server has (no periodic check: only
        // reports restart it): a crash reported through the handle is restarted at once, and it
        // answers afterwards; a report while it is healthy restarts nothing.
        let supervisor = Supervisor::spawn(
            server.clone(),
            SupervisorConfig {
                interval_ms: 0,
                ..fast_supervisor()
            },
        );
        let control: Arc<dyn ServerControl> = Arc::new(supervisor.handle());
        let generation = server.generation();
        control.recover().await.unwrap();
        assert_eq!(server.generation(), generation, "healthy: not restarted");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(server.pid().unwrap() as i32, libc::SIGKILL) };
        wait_until("the kill to be seen", LIMIT, || async {
            server.check().await.is_err()
        })
        .await;
        // Two reports of the same crash (two lanes, say): one restart.
        let (a, b) = tokio::join!(control.recover(), control.recover());
        a.unwrap();
        b.unwrap();
        assert!(control.healthy().await);
        assert_eq!(server.generation(), generation + 1);
        assert_eq!(supervisor.status().restarts, 1);

        supervisor.shutdown().await;
        let pid = server.pid().unwrap();
        drop(control);
        drop(Arc::into_inner(server).expect("one owner left"));
        assert!(!alive(pid), "dropping the server kills it");
    });
}

#[test]
fn process_hang_is_detected_by_the_inference_probe() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeConfig {
        fault: Fault::Hang,
        ..FakeConfig::default()
    };
    let mut cfg = config(
        "process_hang_is_detected_by_the_inference_probe",
        &fake,
        dir.path(),
    );
    cfg.probe.inference_timeout_ms = 500;
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(cfg.clone()).unwrap());
        server.start().await.unwrap();
        // /health alone says all is well...
        server.probe().health().await.unwrap();
        let health_only = horos_servers::Probe::new(
            &server.url(),
            ProbeConfig {
                inference_every: 0,
                ..ProbeConfig::default()
            },
        )
        .unwrap();
        health_only.check().await.unwrap();
        // ...the tiny inference does not.
        let err = server.check().await.unwrap_err();
        assert!(matches!(err, ServerError::Hung(_)), "{err}");
        assert!(server.check().await.is_err());

        let supervisor = Supervisor::spawn(server.clone(), fast_supervisor());
        let status = wait_until("a restart of the hung server", LIMIT, || async {
            let s = supervisor.status();
            (s.restarts >= 1).then_some(s)
        })
        .await;
        let last = status.last_error.unwrap_or_default();
        assert!(
            last.contains("inference probe failed"),
            "last error: {last}"
        );
        assert!(status.failed_checks >= 2);
        supervisor.shutdown().await;
        server.stop().await.unwrap();
    });
}

/// A server of the user's own may answer its health check elsewhere than `/health`: the start
/// waits on the path the probe names, and a path the server does not answer is unhealthy.
#[test]
fn the_probe_asks_the_servers_own_health_path() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        "the_probe_asks_the_servers_own_health_path",
        &FakeConfig::default(),
        dir.path(),
    );
    cfg.probe.health_path = "/v1/models".into();
    runtime().block_on(async move {
        let server = ProcessServer::new(cfg).unwrap();
        server.start().await.unwrap();
        server.check().await.unwrap();
        let probe = |path: &str| {
            horos_servers::Probe::new(
                &server.url(),
                ProbeConfig {
                    health_path: path.into(),
                    inference_every: 0,
                    ..ProbeConfig::default()
                },
            )
            .unwrap()
        };
        probe("v1/models").check().await.unwrap();
        let err = probe("/ready").check().await.unwrap_err();
        assert!(
            matches!(&err, ServerError::Unhealthy(m) if m.contains("404")),
            "{err}"
        );
        server.stop().await.unwrap();
    });
}

const PARENT_ENV: &str = "HOROS_SERVERS_TEST_PARENT";

/// SIGKILLs a process on drop if it still runs.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if alive(self.0) {
            // SAFETY: kill(2) on a server this test started (through its killed parent).
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
}

/// In the "parent" child process: start the server described by `PARENT_ENV`, report its pid,
/// then wait to be SIGKILLed.
fn parent_if_requested() {
    let Ok(json) = std::env::var(PARENT_ENV) else {
        return;
    };
    let cfg: ProcessConfig = serde_json::from_str(&json).unwrap();
    runtime().block_on(async move {
        let server = ProcessServer::new(cfg).unwrap();
        server.start().await.unwrap();
        println!("\nPARENT_READY {}", server.pid().unwrap());
        std::future::pending::<()>().await;
    });
}

#[test]
fn process_leftover_of_a_killed_parent_is_ended_via_the_pidfile() {
    horos_fakeai::run_child_if_requested();
    parent_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let name = "process_leftover_of_a_killed_parent_is_ended_via_the_pidfile";
    let cfg = config(name, &FakeConfig::default(), dir.path());

    // A parent process starts the server, then dies by SIGKILL: no clean-up runs.
    let mut parent = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(PARENT_ENV, serde_json::to_string(&cfg).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(parent.stdout.take().unwrap());
    let leftover: u32 = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("PARENT_READY ")
                .map(|p| p.trim().parse().unwrap())
        })
        .expect("the parent started its server");
    // Should the test fail before the clean-up under test, the leftover must not outlive it.
    let _guard = KillOnDrop(leftover);
    parent.kill().unwrap();
    parent.wait().unwrap();
    assert!(
        alive(leftover),
        "the server outlives its parent (own process group)"
    );

    runtime().block_on(async move {
        // Without the pidfile the port is simply busy.
        let mut blind = cfg.clone();
        blind.pidfile = None;
        let err = ProcessServer::new(blind)
            .unwrap()
            .start()
            .await
            .unwrap_err();
        assert!(matches!(err, ServerError::PortBusy(_)), "{err}");

        let server = ProcessServer::new(cfg).unwrap();
        server.start().await.unwrap();
        assert!(!alive(leftover), "the leftover server was not ended");
        assert_ne!(server.pid(), Some(leftover));
        server.check().await.unwrap();
        server.stop().await.unwrap();
    });
}

#[test]
fn process_backend_for_the_model_pool() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        "process_backend_for_the_model_pool",
        &FakeConfig::default(),
        dir.path(),
    );
    let factory = ProcessBackendFactory {
        template: ProcessConfig {
            pidfile: None,
            log_path: None,
            ..cfg
        },
        run_dir: Some(dir.path().to_owned()),
    };
    let settings = serde_json::json!({"env": {"EXTRA": "1"}, "actual_mb": 100});
    let backend = factory.create("tiny/model", &settings).unwrap();
    runtime().block_on(async move {
        assert!(backend.endpoint().is_none());
        assert!(backend.health().await.is_err());
        let port = free_port();
        backend.start(port, &[0], &settings).await.unwrap();
        assert_eq!(backend.endpoint(), Some(format!("http://127.0.0.1:{port}")));
        backend.health().await.unwrap();
        assert!(dir.path().join("tiny-model.pid").exists());
        assert!(dir.path().join("tiny-model.log").exists());
        // A second start (another port) replaces the first server.
        let port2 = free_port();
        backend.start(port2, &[], &settings).await.unwrap();
        assert_eq!(
            backend.endpoint(),
            Some(format!("http://127.0.0.1:{port2}"))
        );
        backend.stop().await.unwrap();
        assert!(backend.health().await.is_err());
        assert!(backend.endpoint().is_none());
        assert!(!dir.path().join("tiny-model.pid").exists());

        // A model split over two GPUs: the server is told its shares and its GPU count.
        let split = serde_json::json!({"env": {"SPLIT": "{tensor_split}", "TP": "{tp}"}});
        backend
            .start_split(free_port(), &[0, 1], &[3000, 1000], &split)
            .await
            .unwrap();
        let record = std::fs::read(dir.path().join("tiny-model.pid")).unwrap();
        let pid = serde_json::from_slice::<serde_json::Value>(&record).unwrap()["pid"]
            .as_i64()
            .unwrap();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        let vars: Vec<&str> = environ.split('\0').collect();
        for expected in ["SPLIT=3000,1000", "TP=2", "CUDA_VISIBLE_DEVICES=0,1"] {
            assert!(vars.contains(&expected), "{expected} not in {vars:?}");
        }
        backend.stop().await.unwrap();
    });
}

#[test]
fn process_stop_escalates_to_sigkill() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        "process_stop_escalates_to_sigkill",
        &FakeConfig::default(),
        dir.path(),
    );
    // The server ignores SIGTERM (an ignored signal stays ignored across exec).
    let mut wrapped = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        "trap '' TERM; exec \"$0\" \"$@\"".to_owned(),
    ];
    wrapped.extend(cfg.command.clone());
    cfg.command = wrapped;
    cfg.stop_timeout_s = 1;
    runtime().block_on(async move {
        let server = ProcessServer::new(cfg).unwrap();
        server.start().await.unwrap();
        let pid = server.pid().unwrap();
        let ignored = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:").map(|v| v.trim().to_owned()))
            .unwrap();
        let mask = u64::from_str_radix(&ignored, 16).unwrap();
        assert!(
            mask & (1 << (libc::SIGTERM - 1)) != 0,
            "SIGTERM not ignored: {ignored}"
        );
        server.stop().await.unwrap(); // SIGTERM, 1 s, SIGKILL
        assert!(!alive(pid));
    });
}

#[test]
fn process_start_failures_are_reported_and_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let base = ProcessConfig {
        port: free_port(),
        log_path: Some(dir.path().join("server.log")),
        pidfile: Some(dir.path().join("server.pid")),
        // Long enough for a busy machine to start `sh` and see it exit; the never-answering
        // server below gets 1 s.
        start_timeout_s: 30,
        stop_timeout_s: 1,
        ..ProcessConfig::default()
    };
    runtime().block_on(async move {
        // No such program.
        let missing = ProcessServer::new(ProcessConfig {
            command: vec!["/nonexistent/horos-engine".into()],
            ..base.clone()
        })
        .unwrap();
        let err = missing.start().await.unwrap_err();
        assert!(matches!(err, ServerError::Spawn { .. }), "{err}");

        // Exits at once: the exit status and its last output in the error.
        let exits = ProcessServer::new(ProcessConfig {
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo 'CUDA out of memory' >&2; exit 3".into(),
            ],
            ..base.clone()
        })
        .unwrap();
        let err = exits.start().await.unwrap_err().to_string();
        assert!(err.contains("exited with code 3"), "{err}");
        assert!(err.contains("CUDA out of memory"), "{err}");
        assert_eq!(exits.state().await, RunState::NotStarted);

        // Runs but never answers: a start time-out, and the process is ended.
        let silent = ProcessServer::new(ProcessConfig {
            command: vec!["sleep".into(), "60".into()],
            start_timeout_s: 1,
            ..base.clone()
        })
        .unwrap();
        let err = silent.start().await.unwrap_err();
        assert!(matches!(err, ServerError::StartTimeout { .. }), "{err}");
        assert_eq!(silent.state().await, RunState::NotStarted);
        assert!(!base.pidfile.as_ref().unwrap().exists());
    });
}

/// A real llama-server started with `--sleep-idle-seconds 1` (scripts/setup_llama.sh installs
/// it; skipped without it unless `HOROS_REQUIRE_LLAMA=1`), supervised: once it sleeps, its
/// checks pass without waking it (the probe's inference left out, counted) and the supervisor
/// shows it `sleeping`; a request wakes it and it is `healthy` again. A server that says nothing
/// of sleep (fakeai) is never taken for asleep.
#[test]
fn a_sleeping_llama_server_passes_its_checks_without_being_woken() {
    horos_fakeai::run_child_if_requested();
    let Some((server, model)) = horos_testkit::llama_smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = ProcessConfig {
        name: "sleepy".into(),
        command: horos_testkit::llama_sleepy_command(&server, &model),
        port: free_port(),
        log_path: Some(dir.path().join("server.log")),
        start_timeout_s: 60,
        stop_timeout_s: 5,
        probe: ProbeConfig {
            inference_every: 1,
            inference_timeout_ms: 60_000,
            ..ProbeConfig::default()
        },
        ..ProcessConfig::default()
    };
    runtime().block_on(async move {
        let server = Arc::new(ProcessServer::new(cfg).unwrap());
        let supervisor = Supervisor::spawn(server.clone(), fast_supervisor());
        wait_until("asleep under supervision", LIMIT, || async {
            supervisor.status().state == ServerState::Sleeping
        })
        .await;
        let probe = server.probe();
        let slept = probe.slept_checks();
        let checks = supervisor.status().checks;
        wait_until("more checks while asleep", LIMIT, || async {
            supervisor.status().checks >= checks + 3
        })
        .await;
        assert!(probe.slept_checks() >= slept + 3, "a due inference woke it");
        assert_eq!(probe.sleeping().await, Some(true), "a check woke it");
        assert_eq!(supervisor.status().state, ServerState::Sleeping);

        // A request wakes it; the supervisor sees it awake.
        let client = Client::new(server.url()).unwrap();
        let t0 = std::time::Instant::now();
        let req = ChatRequest::new("m", vec![ChatMessage::user("hi")]).max_tokens(1);
        client.chat(&req).await.unwrap();
        eprintln!("woken by a request in {:.2} s", t0.elapsed().as_secs_f64());
        wait_until("awake under supervision", LIMIT, || async {
            supervisor.status().state == ServerState::Healthy
        })
        .await;
        drop(supervisor);
        server.stop().await.unwrap();

        // fakeai has no /props nor /is_sleeping: it never sleeps as far as the probe can tell.
        let fake = horos_fakeai::FakeServer::start(FakeConfig::default())
            .await
            .unwrap();
        let probe = horos_servers::Probe::new(&fake.url(), ProbeConfig::default()).unwrap();
        assert_eq!(probe.sleeping().await, None);
        probe.check().await.unwrap();
        assert!(!probe.asleep());
        assert_eq!(probe.slept_checks(), 0);
    });
}
