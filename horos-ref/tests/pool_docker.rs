//! A pooled model that is a container of the user's own (the registry's `docker` kind), for
//! real with the Docker engine: `horos-ref run` starts nothing until a request needs it; a
//! request for a path the model does not serve is refused before anything starts; a chat starts
//! the container (an image built here from this test binary, never pulled; its port published
//! on 127.0.0.1 only; health-checked on the model's own health path), books its memory in the
//! VRAM ledger and is answered from inside the container; a more important request for another
//! model evicts it (the container stopped and removed, the memory given back); the container a
//! SIGKILLed run left is removed by the next run; nothing is left at exit.
//!
//! Skips (with a SKIP line) when no Docker engine answers unless `HOROS_REQUIRE_DOCKER=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{curl, fake_server_command, free_port, free_ports, skip_or_fail, spawn_run, wait_for};
use horos_fakeai::{CHILD_ENV, FakeConfig, PUBLISH_ENV};
use serde_json::json;

const TEST: &str = "a_pooled_container_is_started_checked_evicted_and_booked_like_any_model";

/// `docker ARGS...`'s standard output, `None` when it fails.
fn docker(args: &[&str]) -> Option<String> {
    let out = Command::new("docker").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The containers (running or not) of the model named `model`: `(name, owner label)`.
fn containers_of(model: &str) -> Vec<(String, String)> {
    let filter = format!("label=horos.name={model}");
    let format = "{{.Names}} {{.Label \"horos.owner\"}}";
    docker(&["ps", "-a", "--filter", &filter, "--format", format])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, o)| (n.to_owned(), o.to_owned()))
        .collect()
}

/// Removes the containers of `model` when dropped, should the test fail midway.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for (name, _) in containers_of(&self.0) {
            let _ = docker(&["rm", "-f", &name]);
        }
    }
}

/// An image of this test binary (scripts/build_llama_image.sh: the binary and its libraries,
/// imported, nothing pulled); its tag.
fn test_image() -> String {
    let exe = std::env::current_exe().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build_llama_image.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--binary", exe.to_str().unwrap(), "--tag"])
        .arg("horos/ref-pool-test:local")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap().trim().to_owned()
}

#[test]
fn a_pooled_container_is_started_checked_evicted_and_booked_like_any_model() {
    horos_fakeai::run_child_if_requested();
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        skip_or_fail("HOROS_REQUIRE_DOCKER", "no Docker engine answers");
        return;
    }
    let image = test_image();
    let boxed = format!("boxed-{}", std::process::id());
    let _cleanup = RemoveOnDrop(boxed.clone());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_port = free_ports(3);
    let base = format!("http://127.0.0.1:{port}");
    // In the container: this binary as a fake OpenAI server for `boxed`, published on the
    // container's port. Its health check asks /v1/models (a server of the user's own).
    let child_args = FakeConfig {
        model: boxed.clone(),
        ..FakeConfig::default()
    }
    .to_args();
    let toml_string = |s: &str| serde_json::to_string(s).unwrap();
    let config = format!(
        "database = \"jobs.db\"\n[gpus]\nsource = \"none\"\nledger = \"vram.db\"\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\ndefault_budget_s = 90\n\
         [coordinator.pool]\nmemory_mb = 1000\nmargin_mb = 0\nport_min = {pool_port}\n\
         port_max = {}\nstart_timeout_s = 60\n\
         [[coordinator.pool.model]]\nname = \"{boxed}\"\nvram_mb = 600\n\
         paths = [\"/v1/chat/completions\"]\nhealth_path = \"/v1/models\"\n\
         [coordinator.pool.model.docker]\nimage = \"{image}\"\n\
         cmd = [\"--exact\", \"{TEST}\", \"--nocapture\", \"--test-threads=1\"]\n\
         container_port = 9000\nenv = {{ {PUBLISH_ENV} = \"{{port}}\", {CHILD_ENV} = {} }}\n\
         [[coordinator.pool.model]]\nname = \"local\"\nvram_mb = 600\ncommand = {}\n",
        pool_port + 2,
        toml_string(&serde_json::to_string(&child_args).unwrap()),
        fake_server_command(TEST, &["--port", "{port}", "--model", "local"]),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    let chat = |model: &str, priority: i32| {
        curl(
            "POST",
            &format!("{base}/v1/chat/completions"),
            Some(
                &json!({"model": model, "x_priority": priority, "x_timeout_s": 80,
                         "messages": [{"role": "user", "content": format!("hello {model}")}]}),
            ),
            None,
        )
    };

    // Nothing runs until asked for; a path the container does not serve is refused before
    // anything starts.
    assert!(containers_of(&boxed).is_empty());
    let (code, answer) = curl(
        "POST",
        &format!("{base}/v1/embeddings"),
        Some(&json!({"model": boxed, "input": "a"})),
        None,
    );
    assert_eq!(code, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "unsupported_endpoint", "{answer}");
    assert_eq!(answer["error"]["serves"], json!(["/v1/chat/completions"]));
    assert!(
        containers_of(&boxed).is_empty(),
        "a refused request started the container"
    );
    assert!(common::leases(&path).is_empty());

    // A chat starts the container and is answered from inside it.
    let (code, answer) = chat(&boxed, 5);
    assert_eq!(code, 200, "{answer}\n{}", log());
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        format!("hello {boxed}")
    );
    assert_eq!(answer["model"], boxed.as_str());
    let running = containers_of(&boxed);
    assert_eq!(running.len(), 1, "{running:?}");
    let (name, owner) = &running[0];
    assert!(
        owner.ends_with("-pool"),
        "the pool's containers have their own owner: {owner}"
    );
    // Published on the loopback only, at the port the pool handed out.
    let published = docker(&["port", name, "9000/tcp"]).unwrap();
    let (host, host_port) = published.lines().next().unwrap().rsplit_once(':').unwrap();
    assert_eq!(host, "127.0.0.1", "{published}");
    let host_port: u16 = host_port.parse().unwrap();
    assert!(
        (pool_port..=pool_port + 2).contains(&host_port),
        "{published}"
    );
    // Booked in the VRAM ledger like any pooled model.
    assert_eq!(common::leases(&path), [(format!("pool:{boxed}"), 0, 600)]);

    // A more important request for another model: the container (idle, less important) is
    // evicted, stopped and removed, its memory given back, before the other model starts.
    let (code, answer) = chat("local", 1);
    assert_eq!(code, 200, "{answer}\n{}", log());
    assert_eq!(answer["choices"][0]["message"]["content"], "hello local");
    assert!(
        containers_of(&boxed).is_empty(),
        "the evicted container is left: {:?}",
        containers_of(&boxed)
    );
    assert_eq!(common::leases(&path), [("pool:local".to_owned(), 0, 600)]);

    // Asked for again, it comes back. A SIGKILLed binary leaves it running; the next run
    // removes it when it builds its pool.
    let (code, answer) = chat(&boxed, 0);
    assert_eq!(code, 200, "{answer}\n{}", log());
    assert_eq!(containers_of(&boxed).len(), 1);
    common::stop(&mut run.0, libc::SIGKILL);
    assert_eq!(containers_of(&boxed).len(), 1, "SIGKILL cleans nothing up");
    let mut run = spawn_run(&path, &dir.path().join("run2.log"));
    wait_for("the second run", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    assert!(
        containers_of(&boxed).is_empty(),
        "the leftover of the killed run: {:?}",
        containers_of(&boxed)
    );

    // At exit nothing the pool started is left.
    let (code, answer) = chat(&boxed, 0);
    assert_eq!(code, 200, "{answer}");
    assert!(common::stop(&mut run.0, libc::SIGTERM).success());
    assert!(
        containers_of(&boxed).is_empty(),
        "containers left after exit: {:?}",
        containers_of(&boxed)
    );
}
