//! The binary end to end against a REAL llama-server on CPU (SmolLM2-135M), started by the binary
//! itself from the lane's `command`: 200 mixed jobs over two lanes; the binary SIGKILLed mid-run and
//! started again; the server SIGKILLed mid-batch. Needs `HOROS_LLAMA_SERVER` and
//! `HOROS_SMOLLM2_GGUF` (scripts/setup_llama.sh writes them); skips without them unless
//! `HOROS_REQUIRE_LLAMA=1`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use horos_feeder::TableSink;
use squeueha::{NewJob, Queue};

mod common;

use common::{BIN, free_port, stop, wait_for};

/// One test at a time: each starts its own llama-servers, and on 2 cores several at once only
/// slow each other down.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Llama {
    server: String,
    model: String,
}

fn llama() -> Option<Llama> {
    match (
        std::env::var("HOROS_LLAMA_SERVER"),
        std::env::var("HOROS_SMOLLM2_GGUF"),
    ) {
        (Ok(server), Ok(model)) if Path::new(&server).exists() && Path::new(&model).exists() => {
            Some(Llama { server, model })
        }
        _ => {
            assert!(
                std::env::var("HOROS_REQUIRE_LLAMA").as_deref() != Ok("1"),
                "HOROS_REQUIRE_LLAMA=1 but HOROS_LLAMA_SERVER / HOROS_SMOLLM2_GGUF are not set \
                 to existing files (run scripts/setup_llama.sh and source its env file)"
            );
            eprintln!(
                "SKIP: no llama-server (set HOROS_LLAMA_SERVER and HOROS_SMOLLM2_GGUF; \
                 scripts/setup_llama.sh installs them)"
            );
            None
        }
    }
}

/// A lane whose llama-server the binary starts itself.
fn lane(queue: &str, port: u16, llama: &Llama, batch: usize, refill: usize) -> String {
    format!(
        "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"smollm2\"\n\
         batch_size = {batch}\nrefill = {refill}\nvisibility_s = 20\nrequest_timeout_s = 60\n\
         start_wait_s = 120\n\
         command = [{server:?}, \"--host\", \"127.0.0.1\", \"--port\", \"{port}\", \"-m\", {model:?}, \
         \"--alias\", \"smollm2\", \"-t\", \"1\", \"-np\", \"4\", \"-c\", \"2048\"]\n",
        server = llama.server,
        model = llama.model,
    )
}

fn write_config(dir: &Path, lanes: &str) -> PathBuf {
    let path = dir.join("horos.toml");
    std::fs::write(
        &path,
        format!(
            "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 50\n\
             release_delay_ms = 200\nhealth_interval_s = 1.0\n\n{lanes}"
        ),
    )
    .unwrap();
    path
}

fn spawn_run(config: &Path, log: &Path) -> Child {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .arg("--json")
        .arg("run")
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Pids of the llama-servers listening on `port` (the server of a lane).
fn server_pids(port: u16) -> Vec<i32> {
    common::llama_servers()
        .into_iter()
        .filter(|(_, args)| common::port_arg(args) == Some(port))
        .map(|(pid, _)| pid)
        .collect()
}

/// Counts every store into the results table (an `INSERT OR REPLACE` would hide a second
/// completion of the same job; the audit table sees it).
fn audit_stores(queue: &Queue) {
    queue
        .transaction(|tx| -> squeueha::Result<()> {
            tx.connection()?.execute_batch(
                "CREATE TABLE IF NOT EXISTS horos_feeder_results (
                     job_id INTEGER PRIMARY KEY, queue TEXT NOT NULL, text TEXT NOT NULL,
                     response TEXT NOT NULL, completed_at INTEGER NOT NULL);
                 CREATE TABLE test_stores (job_id INTEGER NOT NULL);
                 CREATE TRIGGER test_audit AFTER INSERT ON horos_feeder_results
                 BEGIN INSERT INTO test_stores (job_id) VALUES (new.job_id); END;",
            )?;
            Ok(())
        })
        .unwrap();
}

fn stores(queue: &Queue) -> (u64, u64) {
    queue
        .transaction(|tx| -> squeueha::Result<(u64, u64)> {
            Ok(tx.connection()?.query_row(
                "SELECT COUNT(*), COUNT(DISTINCT job_id) FROM test_stores",
                [],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )?)
        })
        .unwrap()
}

/// 200 chat jobs of many shapes: two lanes, priorities, system prompts, lengths, sampling.
fn submit_mixed(queue: &Queue, lanes: &[&str], n: usize) -> Vec<i64> {
    let topics = [
        "the sea", "a cat", "rust", "snow", "a city", "the moon", "bread",
    ];
    let mut ids = Vec::new();
    for i in 0..n {
        let mut messages = Vec::new();
        if i % 3 == 0 {
            messages.push(serde_json::json!({"role": "system", "content": "Answer briefly."}));
        }
        messages.push(serde_json::json!({
            "role": "user",
            "content": format!("Job {i}: say one thing about {}.", topics[i % topics.len()])
        }));
        let mut request = serde_json::json!({
            "model": "smollm2",
            "messages": messages,
            "max_tokens": 2 + (i % 7) * 2,
        });
        if i % 2 == 0 {
            request["temperature"] = serde_json::json!(0.0);
        } else {
            request["temperature"] = serde_json::json!(0.8);
            request["seed"] = serde_json::json!(i);
        }
        let lane = lanes[i % lanes.len()];
        let job = NewJob::json(&request).unwrap().priority((i % 4) as i32);
        ids.push(queue.enqueue(lane, job).unwrap().id());
    }
    ids
}

fn backlog(queue: &Queue, lanes: &[&str]) -> u64 {
    lanes
        .iter()
        .map(|l| {
            let s = queue.stats(l).unwrap();
            s.ready + s.in_flight + s.delayed
        })
        .sum()
}

fn last_event(log: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(log).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// (1) 200 mixed jobs over two lanes, each with its own llama-server started by the binary: all
/// answered, each stored once, nothing dead; the servers are gone after SIGTERM.
#[test]
fn two_hundred_mixed_jobs_through_real_llama_servers() {
    let _serial = serial();
    let Some(llama) = llama() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (think, vision) = (free_port(), free_port());
    let config = write_config(
        dir.path(),
        &format!(
            "{}\n{}",
            lane("think", think, &llama, 8, 64),
            lane("vision", vision, &llama, 8, 0)
        ),
    );
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    audit_stores(&queue);
    let ids = submit_mixed(&queue, &["think", "vision"], 200);

    let log = dir.path().join("run.log");
    let mut run = spawn_run(&config, &log);
    wait_for("200 jobs drained", Duration::from_secs(600), || {
        backlog(&queue, &["think", "vision"]) == 0
    });
    assert!(stop(&mut run, libc::SIGTERM).success());

    let sink = TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 200);
    assert_eq!(stores(&queue), (200, 200), "a job was stored twice");
    for id in &ids {
        let text = sink.result_text(*id).unwrap();
        assert!(text.is_some(), "job {id} has no answer");
    }
    for l in ["think", "vision"] {
        let s = queue.stats(l).unwrap();
        assert_eq!((s.pending(), s.dead), (0, 0), "{l}: {s:?}");
    }
    let stopped = last_event(&log);
    assert_eq!(stopped["event"], "stopped", "{stopped}");
    assert_eq!(stopped["completed"], 200, "{stopped}");
    wait_for("the servers stopped", Duration::from_secs(10), || {
        server_pids(think).is_empty() && server_pids(vision).is_empty()
    });
}

/// (2) The binary SIGKILLed mid-run (its server left behind, jobs in flight) and started again:
/// every job completes, none is stored twice.
#[test]
fn sigkilled_binary_restarts_and_loses_nothing() {
    let _serial = serial();
    let Some(llama) = llama() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(dir.path(), &lane("think", port, &llama, 8, 0));
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    audit_stores(&queue);
    let ids = submit_mixed(&queue, &["think"], 60);

    let log = dir.path().join("run1.log");
    let mut run = spawn_run(&config, &log);
    wait_for(
        "some jobs done and a batch in flight",
        Duration::from_secs(300),
        || stores(&queue).0 >= 10 && queue.stats("think").unwrap().in_flight > 0,
    );
    assert!(!stop(&mut run, libc::SIGKILL).success());
    let s = queue.stats("think").unwrap();
    assert!(
        s.in_flight > 0,
        "the kill should leave jobs in flight: {s:?}"
    );

    let log = dir.path().join("run2.log");
    let mut run = spawn_run(&config, &log);
    wait_for("the rest drained", Duration::from_secs(300), || {
        backlog(&queue, &["think"]) == 0
    });
    assert!(stop(&mut run, libc::SIGTERM).success());
    let sink = TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 60);
    assert_eq!(stores(&queue), (60, 60), "a job was stored twice");
    for id in &ids {
        assert!(sink.result_text(*id).unwrap().is_some(), "job {id} lost");
    }
    let s = queue.stats("think").unwrap();
    assert_eq!((s.pending(), s.dead), (0, 0), "{s:?}");
    wait_for("no server left", Duration::from_secs(10), || {
        server_pids(port).is_empty()
    });
}

/// (4) The server SIGKILLed while a batch is in flight: the feeder sees the cut connections,
/// restarts the server, and every job still completes (none is mistaken for a poison pill).
#[test]
fn a_server_killed_mid_batch_is_restarted_and_its_jobs_complete() {
    let _serial = serial();
    let Some(llama) = llama() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(dir.path(), &lane("think", port, &llama, 8, 0));
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    audit_stores(&queue);
    submit_mixed(&queue, &["think"], 40);

    let log = dir.path().join("run.log");
    let mut run = spawn_run(&config, &log);
    wait_for("a batch in flight", Duration::from_secs(300), || {
        queue.stats("think").unwrap().in_flight > 0 && server_pids(port).len() == 1
    });
    let victim = server_pids(port)[0];
    unsafe { libc::kill(victim, libc::SIGKILL) };
    wait_for("all jobs done", Duration::from_secs(300), || {
        backlog(&queue, &["think"]) == 0
    });
    let restarted = server_pids(port);
    assert_eq!(restarted.len(), 1, "one server again");
    assert_ne!(restarted[0], victim, "a new server process");
    assert!(stop(&mut run, libc::SIGTERM).success());
    let s = queue.stats("think").unwrap();
    assert_eq!((s.pending(), s.dead), (0, 0), "{s:?}");
    assert_eq!(stores(&queue), (40, 40));
    let stopped = last_event(&log);
    assert!(stopped["restarts"].as_u64().unwrap() >= 1, "{stopped}");
    assert_eq!(stopped["poisoned"], 0, "{stopped}");
}

fn docker(args: &[&str]) -> Option<String> {
    let out = Command::new("docker").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The llama-server image built from local files (scripts/build_llama_image.sh), or `None`
/// (skip) when Docker or llama-server is absent and not required.
fn llama_image() -> Option<String> {
    let required = |v: &str| std::env::var(v).as_deref() == Ok("1");
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        assert!(
            !required("HOROS_REQUIRE_DOCKER"),
            "HOROS_REQUIRE_DOCKER=1 but no Docker engine answers"
        );
        eprintln!("SKIP: no Docker engine answers");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build_llama_image.sh");
    let out = Command::new("bash").arg(script).output().unwrap();
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !(required("HOROS_REQUIRE_LLAMA") && required("HOROS_REQUIRE_DOCKER")),
            "the llama-server image cannot be built: {why}"
        );
        eprintln!("SKIP: the llama-server image cannot be built: {why}");
        return None;
    }
    Some("horos/llama-server:local".to_owned())
}

/// A lane whose server is a Docker container: started by `run`, `docker kill`ed mid-run (the
/// feeder restarts it, every job completes), removed at exit.
#[test]
fn a_docker_lane_survives_docker_kill() {
    let _serial = serial();
    let Some(image) = llama_image() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(
        dir.path(),
        &format!(
            "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"smollm2\"\n\
             batch_size = 4\nvisibility_s = 30\nrequest_timeout_s = 60\nstart_wait_s = 120\n\
             [lane.docker]\nimage = \"{image}\"\ncontainer_port = 8080\n\
             cmd = [\"-m\", \"/models/model.gguf\", \"--host\", \"0.0.0.0\", \"--port\", \"{{port}}\", \
             \"-t\", \"1\", \"-np\", \"4\", \"-c\", \"2048\", \"--alias\", \"smollm2\"]\n"
        ),
    );
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    audit_stores(&queue);
    submit_mixed(&queue, &["think"], 40);
    let container = || docker(&["ps", "-q", "--filter", &format!("publish={port}")]).unwrap();

    let log = dir.path().join("run.log");
    let mut run = spawn_run(&config, &log);
    wait_for(
        "jobs done and a batch in flight",
        Duration::from_secs(300),
        || stores(&queue).0 >= 4 && queue.stats("think").unwrap().in_flight > 0,
    );
    let first = container();
    assert!(!first.is_empty(), "no container publishes port {port}");
    docker(&["kill", &first]).unwrap();
    wait_for("all jobs done", Duration::from_secs(300), || {
        backlog(&queue, &["think"]) == 0
    });
    let second = container();
    assert!(!second.is_empty() && second != first, "a new container");
    assert!(stop(&mut run, libc::SIGTERM).success());
    let s = queue.stats("think").unwrap();
    assert_eq!((s.pending(), s.dead), (0, 0), "{s:?}");
    assert_eq!(stores(&queue), (40, 40));
    let stopped = last_event(&log);
    assert!(stopped["restarts"].as_u64().unwrap() >= 1, "{stopped}");
    assert_eq!(
        docker(&["ps", "-aq", "--filter", &format!("publish={port}")]).unwrap(),
        "",
        "the container is removed at exit"
    );
}
