//! Docker servers against the real engine: llama-server in a `FROM scratch` image answering a
//! real request, crash detection after `docker kill`, restart, stop; and, with the test binary
//! as a fake OpenAI server in a container, a poison-pill crash, a hang, and the clean-up of
//! leftover labelled containers.
//!
//! Skips (with a SKIP line) when no engine answers unless `HOROS_REQUIRE_DOCKER=1`; the llama
//! test skips when llama-server is not installed unless `HOROS_REQUIRE_LLAMA=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{RemoveOnDrop, build_image, docker_cli, docker_or_skip};
use horos_fakeai::{CHILD_ENV, CrashAction, FakeConfig, Fault, PUBLISH_ENV};
use horos_server_control::{BackendFactory, ServerControl};
use horos_servers::{
    DockerBackendFactory, DockerConfig, DockerServer, LABEL_MANAGED, LABEL_NAME, LABEL_OWNER,
    ManagedServer, ProbeConfig, RunState, ServerError, ServerState, Supervisor, SupervisorConfig,
};
use horos_testkit::{free_port, runtime, skip_or_fail, wait_until};
use horos_vllm_client::{ChatMessage, ChatRequest, Client, ClientConfig};

const LIMIT: Duration = Duration::from_secs(120);

/// A unique owner label per test run: clean-ups never touch another run's containers.
/// The arguments that make the image's llama-server read the model into its own memory (no
/// mmap), so that a memory limit below the model's size kills it: `--no-mmap` until llama.cpp
/// replaced it with `--load-mode` (the source build the set-up falls back on has the latter).
fn no_mmap_args() -> Vec<&'static str> {
    let help = std::env::var_os("HOROS_LLAMA_SERVER")
        .and_then(|bin| std::process::Command::new(bin).arg("--help").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if help.contains("--load-mode") {
        vec!["--load-mode", "none"]
    } else {
        vec!["--no-mmap"]
    }
}

fn owner(test: &str) -> String {
    format!("test-{}-{test}", std::process::id())
}

fn fast_supervisor() -> SupervisorConfig {
    SupervisorConfig {
        interval_ms: 200,
        failure_threshold: 2,
        backoff_initial_ms: 100,
        backoff_max_ms: 1000,
        reset_after_ms: 60_000,
    }
}

#[test]
fn docker_llama_server_health_crash_restart_stop() {
    runtime().block_on(async {
        let Some(docker) = docker_or_skip().await else {
            return;
        };
        let image = match build_image(&[]) {
            Ok(tag) => tag,
            Err(why) => {
                let why = why.unwrap_or_default().trim().replace('\n', " ");
                skip_or_fail(
                    "HOROS_REQUIRE_LLAMA",
                    &format!(
                        "the llama image cannot be built, llama-server is not installed ({why}); \
                         the crash/restart parts run in docker_fake_server_crash_hang_and_leftovers \
                         with the fake server image"
                    ),
                );
                return;
            }
        };
        let owner = owner("llama");
        let _cleanup = RemoveOnDrop(owner.clone());
        let server = Arc::new(
            DockerServer::new(
                docker.clone(),
                DockerConfig {
                    name: "chat".into(),
                    image,
                    cmd: [
                        "-m",
                        "/models/model.gguf",
                        "--host",
                        "0.0.0.0",
                        "--port",
                        "{port}",
                        "-t",
                        "1",
                        "-np",
                        "1",
                        "-c",
                        "1024",
                        "--alias",
                        "smollm2",
                    ]
                    .map(String::from)
                    .to_vec(),
                    container_port: 8080,
                    host_port: free_port(),
                    owner: owner.clone(),
                    start_timeout_s: 120,
                    stop_timeout_s: 5,
                    probe: ProbeConfig {
                        inference_every: 1,
                        inference_timeout_ms: 60_000,
                        ..ProbeConfig::default()
                    },
                    ..DockerConfig::default()
                },
            )
            .unwrap(),
        );
        let t0 = std::time::Instant::now();
        server.start().await.unwrap();
        eprintln!("llama-server container healthy after {:?}", t0.elapsed());
        server.check().await.unwrap(); // /health and a one-token chat

        // A real request, answered by llama-server in the container.
        let client = Client::with_config(
            ClientConfig::new(server.url()).total_timeout(Duration::from_secs(120)),
        )
        .unwrap();
        let answer = client
            .chat(
                &ChatRequest::new(
                    "smollm2",
                    vec![ChatMessage::user("What is the capital of France?")],
                )
                .max_tokens(8)
                .temperature(0.0),
            )
            .await
            .unwrap();
        eprintln!("llama-server answered: {:?}", answer.text());
        assert!(!answer.text().trim().is_empty());
        assert_eq!(answer.model, "smollm2");

        // Labels and a loopback-only published port.
        let inspect = docker
            .inspect_container(server.container_name(), None)
            .await
            .unwrap();
        let labels = inspect.config.unwrap().labels.unwrap();
        assert_eq!(labels[LABEL_MANAGED], "true");
        assert_eq!(labels[LABEL_NAME], "chat");
        assert_eq!(labels[LABEL_OWNER], owner);
        let bindings = inspect.host_config.unwrap().port_bindings.unwrap();
        let b = &bindings["8080/tcp"].clone().unwrap()[0];
        assert_eq!(b.host_ip.as_deref(), Some("127.0.0.1"));

        // A crash: `docker kill`, seen by the supervisor, restarted.
        let supervisor = Supervisor::spawn(server.clone(), fast_supervisor());
        wait_until("the supervisor's first check", LIMIT, || async {
            supervisor.status().state == ServerState::Healthy
        })
        .await;
        let first_id = server.container_id().unwrap();
        docker_cli(&["kill", server.container_name()]);
        let status = wait_until("the restart after docker kill", LIMIT, || async {
            let s = supervisor.status();
            (s.restarts >= 1 && s.state == ServerState::Healthy).then_some(s)
        })
        .await;
        let last = status.last_error.unwrap_or_default();
        assert!(last.contains("exited with code 137"), "last error: {last}");
        assert_ne!(server.container_id().unwrap(), first_id);
        supervisor.shutdown().await;
        let again = client
            .chat(&ChatRequest::new("smollm2", vec![ChatMessage::user("Hi")]).max_tokens(2))
            .await
            .unwrap();
        assert!(again.usage.is_some());

        // Out of memory: a container over its limit is reported as OOM killed.
        let oom = DockerServer::new(
            docker.clone(),
            DockerConfig {
                name: "oom".into(),
                image: server.config().image.clone(),
                cmd: ["-m", "/models/model.gguf"]
                    .into_iter()
                    .chain(no_mmap_args())
                    .chain(["--host", "0.0.0.0", "--port", "{port}", "-t", "1"])
                    .map(String::from)
                    .collect(),
                container_port: 8080,
                host_port: free_port(),
                memory_mb: Some(48), // the model alone is 98 MB
                owner: owner.clone(),
                start_timeout_s: 60,
                ..DockerConfig::default()
            },
        )
        .unwrap();
        let err = oom.start().await.unwrap_err();
        assert!(
            matches!(&err, ServerError::NotRunning(m) if m.contains("OOM killed")),
            "{err}"
        );

        // Stop: container stopped and removed.
        server.stop().await.unwrap();
        assert_eq!(server.state().await, RunState::NotStarted);
        let left = docker_cli(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={LABEL_OWNER}={owner}"),
        ]);
        assert!(left.is_empty(), "containers left: {left}");
    });
}

fn fake_container(
    test: &str,
    image: &str,
    owner: &str,
    name: &str,
    fake: &FakeConfig,
) -> DockerConfig {
    DockerConfig {
        name: name.into(),
        image: image.into(),
        cmd: ["--exact", test, "--nocapture", "--test-threads=1"]
            .map(String::from)
            .to_vec(),
        // The fake server in the container, published on the container's port.
        env: BTreeMap::from([
            (PUBLISH_ENV.to_owned(), "{port}".to_owned()),
            (
                CHILD_ENV.to_owned(),
                serde_json::to_string(&fake.to_args()).unwrap(),
            ),
        ]),
        container_port: 9000,
        host_port: free_port(),
        owner: owner.into(),
        start_timeout_s: 60,
        stop_timeout_s: 2,
        probe: ProbeConfig {
            inference_every: 1,
            inference_timeout_ms: 1000,
            ..ProbeConfig::default()
        },
        ..DockerConfig::default()
    }
}

#[test]
fn docker_fake_server_crash_hang_and_leftovers() {
    horos_fakeai::run_child_if_requested();
    const TEST: &str = "docker_fake_server_crash_hang_and_leftovers";
    runtime().block_on(async {
        let Some(docker) = docker_or_skip().await else {
            return;
        };
        let exe = std::env::current_exe().unwrap();
        let image = build_image(&[
            "--binary",
            exe.to_str().unwrap(),
            "--tag",
            "horos/servers-test:local",
        ])
        .expect("the test binary image");
        let owner = owner("fake");
        let _cleanup = RemoveOnDrop(owner.clone());

        // Start, health, a real request.
        let crashy = FakeConfig {
            crash_marker: Some("POISON".into()),
            crash_action: CrashAction::ExitProcess,
            ..FakeConfig::default()
        };
        let server = Arc::new(
            DockerServer::new(
                docker.clone(),
                fake_container(TEST, &image, &owner, "crashy", &crashy),
            )
            .unwrap(),
        );
        server.start().await.unwrap();
        server.check().await.unwrap();
        let client = Client::new(server.url()).unwrap();
        let answer = client
            .chat(&ChatRequest::new(
                "fake-model",
                vec![ChatMessage::user("ping")],
            ))
            .await
            .unwrap();
        assert_eq!(answer.text(), "ping");

        // Supervised as a lane's server is: no periodic check, restarts on reported crashes.
        let supervisor = Supervisor::spawn(
            server.clone(),
            SupervisorConfig {
                interval_ms: 0,
                ..fast_supervisor()
            },
        );
        let control = supervisor.handle();
        wait_until("the supervisor's first check", LIMIT, || async {
            supervisor.status().state == ServerState::Healthy
        })
        .await;

        // A poison pill kills the engine: the container exits, the state says how.
        let _ = client
            .chat(&ChatRequest::new(
                "fake-model",
                vec![ChatMessage::user("POISON")],
            ))
            .await
            .unwrap_err();
        let exited = wait_until("the container to exit", LIMIT, || async {
            match server.state().await {
                RunState::Exited(info) => Some(info),
                _ => None,
            }
        })
        .await;
        assert!(exited.code.is_some_and(|c| c != 0), "{exited}");
        assert!(!exited.oom_killed);
        assert!(matches!(
            server.check().await,
            Err(ServerError::NotRunning(_))
        ));
        // Reported through the supervisor's handle (no periodic check: only the report restarts
        // it): restarted at once, healthy again.
        assert!(!control.healthy().await);
        assert_eq!(supervisor.status().restarts, 0);
        control.recover().await.unwrap();
        assert_eq!(supervisor.status().restarts, 1);
        assert!(control.healthy().await);
        supervisor.shutdown().await;

        // A hung engine: /health fine, the tiny inference times out.
        let hung_cfg = FakeConfig {
            fault: Fault::Hang,
            ..FakeConfig::default()
        };
        let hung = DockerServer::new(
            docker.clone(),
            fake_container(TEST, &image, &owner, "hung", &hung_cfg),
        )
        .unwrap();
        hung.start().await.unwrap();
        hung.probe().health().await.unwrap();
        let err = hung.check().await.unwrap_err();
        assert!(matches!(err, ServerError::Hung(_)), "{err}");

        // Leftovers: both containers are "left" by this run; a new instance cleans them up.
        let next_run = DockerServer::new(
            docker.clone(),
            fake_container(TEST, &image, &owner, "next", &crashy),
        )
        .unwrap();
        let mut removed = next_run.cleanup_leftovers().await.unwrap();
        removed.sort();
        assert_eq!(
            removed,
            [
                format!("horos-{owner}-crashy"),
                format!("horos-{owner}-hung")
            ]
        );
        assert_eq!(
            server.state().await.clone(),
            RunState::Exited(horos_servers::ExitInfo {
                detail: "the container is gone".into(),
                ..Default::default()
            })
        );
        let left = docker_cli(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={LABEL_OWNER}={owner}"),
        ]);
        assert!(left.is_empty(), "containers left: {left}");
        // Stopping what is already gone is fine.
        server.stop().await.unwrap();
        hung.stop().await.unwrap();

        // The model pool's backend: a container per model, on the port the pool hands out.
        let factory = DockerBackendFactory {
            docker: docker.clone(),
            template: fake_container(TEST, &image, &owner, "unused", &FakeConfig::default()),
        };
        let backend = factory
            .create("pool-model", &serde_json::Value::Null)
            .unwrap();
        let port = free_port();
        backend
            .start(port, &[], &serde_json::Value::Null)
            .await
            .unwrap();
        assert_eq!(backend.endpoint(), Some(format!("http://127.0.0.1:{port}")));
        backend.health().await.unwrap();
        let names = docker_cli(&[
            "ps",
            "--format",
            "{{.Names}}",
            "--filter",
            &format!("label={LABEL_OWNER}={owner}"),
        ]);
        assert_eq!(names, format!("horos-{owner}-pool-model"));
        backend.stop().await.unwrap();
        assert!(backend.health().await.is_err());
        let left = docker_cli(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={LABEL_OWNER}={owner}"),
        ]);
        assert!(left.is_empty(), "containers left: {left}");
    });
}
