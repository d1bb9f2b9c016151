//! Shared test helpers: fake servers as child processes of the test binary, Docker fixtures.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;

use horos_fakeai::{CHILD_ENV, FakeConfig};
use horos_servers::{ProbeConfig, ProcessConfig, SupervisorConfig};
use horos_testkit::free_port;

/// The command and environment that run this test binary as a fake server for `config`, its
/// port being the `{port}` placeholder. The test named `test` must call
/// `horos_fakeai::run_child_if_requested()` first.
pub fn fake_server_command(
    test: &str,
    config: &FakeConfig,
) -> (Vec<String>, BTreeMap<String, String>) {
    let exe = std::env::current_exe().unwrap();
    let argv = vec![
        exe.to_string_lossy().into_owned(),
        "--exact".into(),
        test.into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ];
    let mut args = config.to_args();
    set_port_placeholder(&mut args);
    let env = BTreeMap::from([(CHILD_ENV.to_owned(), serde_json::to_string(&args).unwrap())]);
    (argv, env)
}

fn set_port_placeholder(args: &mut [String]) {
    if let Some(i) = args.iter().position(|a| a == "--port") {
        args[i + 1] = "{port}".into();
    }
}

/// A process server running this test binary as the fake server `fake` (the test named
/// `test` calls `horos_fakeai::run_child_if_requested()` first), its files in `dir`; a one-token
/// inference at every check.
pub fn process_config(test: &str, fake: &FakeConfig, dir: &std::path::Path) -> ProcessConfig {
    let (command, env) = fake_server_command(test, fake);
    ProcessConfig {
        name: test.to_owned(),
        command,
        env,
        port: free_port(),
        log_path: Some(dir.join("server.log")),
        pidfile: Some(dir.join("server.pid")),
        start_timeout_s: 60,
        stop_timeout_s: 5,
        probe: ProbeConfig {
            inference_every: 1,
            inference_timeout_ms: 2000,
            ..ProbeConfig::default()
        },
        ..ProcessConfig::default()
    }
}

/// Checks every 100 ms, a restart after two failed checks, a back-off from 50 ms.
pub fn fast_supervisor() -> SupervisorConfig {
    SupervisorConfig {
        interval_ms: 100,
        failure_threshold: 2,
        backoff_initial_ms: 50,
        backoff_max_ms: 400,
        reset_after_ms: 60_000,
    }
}

/// Whether `pid` still runs (not a zombie).
pub fn alive(pid: u32) -> bool {
    horos_servers::pidfile::is_alive(pid as i32)
}

/// The Docker engine, or `None` (after a SKIP line) when none answers and
/// `HOROS_REQUIRE_DOCKER=1` is not set.
pub async fn docker_or_skip() -> Option<horos_servers::bollard::Docker> {
    let found = match horos_servers::connect_docker(None).await {
        Ok(d) => match d.ping().await {
            Ok(_) => Ok(d),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    match found {
        Ok(d) => Some(d),
        Err(e) => {
            horos_testkit::skip_or_fail(
                "HOROS_REQUIRE_DOCKER",
                &format!("no Docker engine answers ({e})"),
            );
            None
        }
    }
}

/// Runs scripts/build_llama_image.sh with `args`: `Ok(tag)`, `Err(None)` when an input is
/// absent (exit status 3), panics on other failures.
pub fn build_image(args: &[&str]) -> Result<String, Option<String>> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build_llama_image.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .expect("cannot run bash");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_owned()),
        Some(3) => Err(Some(stderr)),
        _ => panic!("{} failed ({}): {stderr}", script.display(), out.status),
    }
}

/// `docker CMD...` through the CLI (what an operator would do by hand).
pub fn docker_cli(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("cannot run the docker CLI");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Removes every container of `owner` when dropped, so that a failing test leaves none behind.
pub struct RemoveOnDrop(pub String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let filter = format!("label={}={}", horos_servers::LABEL_OWNER, self.0);
        if let Ok(out) = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", id])
                    .output();
            }
        }
    }
}
