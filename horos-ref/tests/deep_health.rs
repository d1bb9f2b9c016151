//! The deep health check through the binary (issue 48): `GET /health/ready` asks every part
//! that should move (the scheduler, the database, the feeder, the model pool) and answers 200
//! while they do; a database that refuses writes (another process holds its exclusive lock)
//! turns it 503 naming the database, while `/health` (the process answers) stays 200; once the
//! lock is gone it is 200 again.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{free_port, free_ports, listening, spawn_run, wait_for};

const TEST: &str = "the_deep_health_check_names_a_database_that_refuses_writes";

fn ready(base: &str) -> (u16, serde_json::Value) {
    common::curl("GET", &format!("{base}/health/ready"), None, None)
}

#[test]
fn the_deep_health_check_names_a_database_that_refuses_writes() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (lane_port, pool_port, port) = (free_ports(2), free_ports(2), free_port());
    let config = common::lane_and_pool_config(
        TEST,
        (port, lane_port, pool_port),
        "[gpus]\nsource = \"simulated\"\nsimulated_mb = [4096]\ninterval_ms = 100\n",
        false,
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let _run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the coordinator", Duration::from_secs(60), || {
        listening(port)
    });
    let mut answer = serde_json::Value::Null;
    wait_for("ready", Duration::from_secs(30), || {
        let (code, v) = ready(&base);
        answer = v;
        code == 200
    });
    let parts: Vec<&str> = answer["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["part"].as_str())
        .collect();
    assert_eq!(
        parts,
        [
            "scheduler",
            "database",
            "disk",
            "feeder",
            "model_pool",
            "gpu_view"
        ],
        "{answer}"
    );
    assert_eq!(answer["status"], "ready", "{answer}");

    // Wedged on purpose: another process holds the database's exclusive lock.
    let other = rusqlite::Connection::open(dir.path().join("jobs.db")).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let (code, v) = ready(&base);
    assert_eq!(code, 503, "{v}\n{}", log());
    assert_eq!(v["status"], "not_ready", "{v}");
    let failing: Vec<&str> = v["failing"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["part"].as_str())
        .collect();
    assert_eq!(failing, ["database"], "{v}");
    // The process itself still answers.
    let (code, _) = common::curl("GET", &format!("{base}/health"), None, None);
    assert_eq!(code, 200);
    other.execute_batch("COMMIT").unwrap();
    drop(other);
    wait_for("ready again", Duration::from_secs(30), || {
        ready(&base).0 == 200
    });
    assert!(!log().contains("panicked"), "{}", log());
}
