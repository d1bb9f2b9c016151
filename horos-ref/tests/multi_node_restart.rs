//! The database restarted under load: three `horos-ref run` nodes drain 2,000 jobs through their
//! lane servers (fakeai, 40 ms a request) on a PostgreSQL cluster of the test's own, which is
//! stopped and started again a third of the way in. Every node reconnects by itself (none is
//! restarted), every answer is stored once and is its own, nothing is left or dead, and every
//! node's heartbeat is fresh again.
//!
//! Needs PostgreSQL installed (`scripts/setup_postgres.sh` starts the cluster in a temporary
//! directory): skipped without it, failed with `HOROS_REQUIRE_POSTGRES=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::nodes::{StopCluster, assert_each_stored_once, pg_script, start_cluster, wait_stored};
use common::{chat_jobs, cli, fake_server_command, free_port, json, spawn_run, stop};
use squeueha::Queue;

const TEST: &str = "every_node_reconnects_by_itself_after_a_database_restart";
const JOBS: usize = 2000;

#[test]
fn every_node_reconnects_by_itself_after_a_database_restart() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let Some(url) = start_cluster(dir.path(), port, &[]) else {
        return;
    };
    let _cluster = StopCluster(dir.path().to_path_buf(), port);

    let queue = Queue::open(&url).unwrap();
    let ids = chat_jobs(&queue, "think", "think-model", JOBS);
    let nodes_dir = tempfile::tempdir().unwrap();
    let configs: Vec<_> = (1..=3)
        .map(|n| {
            let d = nodes_dir.path().join(format!("node-{n}"));
            std::fs::create_dir_all(&d).unwrap();
            let path = d.join("horos.toml");
            std::fs::write(
                &path,
                format!(
                    "database = \"{url}\"\n[node]\nname = \"node-{n}\"\n\
                     [feeder]\ncooldown_s = 0\nidle_poll_ms = 50\nerror_pause_ms = 200\n\
                     [[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:{}\"\n\
                     model = \"think-model\"\nbatch_size = 8\nvisibility_s = 5\nstart_wait_s = 60\n\
                     command = {}\n",
                    free_port(),
                    fake_server_command(
                        TEST,
                        &["--port", "{port}", "--slots", "8", "--latency-ms", "40"]
                    ),
                ),
            )
            .unwrap();
            path
        })
        .collect();
    let mut nodes: Vec<_> = configs
        .iter()
        .map(|c| spawn_run(c, &c.with_file_name("run.log")))
        .collect();
    let logs = || {
        configs
            .iter()
            .map(|c| std::fs::read_to_string(c.with_file_name("run.log")).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };

    wait_stored(&queue, (JOBS / 3) as i64, Duration::from_secs(120), logs);
    let stopped = pg_script("stop_postgres.sh", dir.path(), port, &[]);
    assert!(stopped.status.success(), "{stopped:?}");
    std::thread::sleep(Duration::from_secs(2));
    let again = pg_script("setup_postgres.sh", dir.path(), port, &[]);
    assert!(again.status.success(), "{again:?}");
    wait_stored(&queue, JOBS as i64, Duration::from_secs(240), logs);

    // Every node still running (none restarted), every answer stored once and its own.
    for (n, node) in nodes.iter_mut().enumerate() {
        assert!(
            node.0.try_wait().unwrap().is_none(),
            "node-{} exited\n{}",
            n + 1,
            logs()
        );
    }
    assert_each_stored_once(&queue, "think", &ids);
    std::thread::sleep(Duration::from_secs(3));
    let listed = json(&cli(&configs[0], &["--json", "nodes"]));
    for n in listed.as_array().unwrap() {
        assert_eq!(n["state"], "running", "{listed}");
        assert!(n["heartbeat_age_s"].as_f64().unwrap() < 5.0, "{listed}");
    }
    for node in &mut nodes {
        assert!(stop(&mut node.0, libc::SIGTERM).success(), "{}", logs());
    }
    eprintln!("{JOBS} jobs on 3 nodes across a database restart: every answer stored once");
}
