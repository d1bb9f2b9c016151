//! Three `horos-ref run` nodes on one PostgreSQL database (`database = "postgres://..."`), each
//! with its own lane server (fakeai, 40 ms a request): 3,000 chat jobs are drained by the three;
//! one node is SIGKILLed mid-batch, its leases expire and the other two finish its jobs. Every
//! job's answer is stored exactly once and is its own (0 lost, 0 stored twice), nothing is left in
//! the queue or dead, and the nodes table shows the killed node silent and the others stopped
//! after their SIGTERM. Each node also serves the coordinator: an async job submitted to one node
//! is answered, and read back, through another, and every node's status API lists all three.
//!
//! Needs `HOROS_PG_URL` (`scripts/setup_postgres.sh` prints it): skipped without it, failed
//! with `HOROS_REQUIRE_POSTGRES=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::nodes::{Schema, assert_each_stored_once, stored};
use common::{
    chat_jobs, cli, curl, fake_server_command, free_port, json, listening, skip_or_fail, spawn_run,
    stop, wait_for,
};
use squeueha::Queue;

const TEST: &str = "three_nodes_share_one_database_and_finish_a_killed_nodes_jobs";
const JOBS: usize = 3000;

/// The processes whose parent is `pid` (the lane servers a node started).
fn children_of(pid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the command may hold spaces, the ')' ends it.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

#[test]
fn three_nodes_share_one_database_and_finish_a_killed_nodes_jobs() {
    horos_fakeai::run_child_if_requested();
    let Ok(base) = std::env::var("HOROS_PG_URL") else {
        skip_or_fail(
            "HOROS_REQUIRE_POSTGRES",
            "HOROS_PG_URL is not set (scripts/setup_postgres.sh prints it)",
        );
        return;
    };
    let schema = Schema::create(&base, "horos_nodes");
    let url = schema.url();
    let dir = tempfile::tempdir().unwrap();

    // The jobs first, so that every node starts with a backlog to share.
    let queue = Queue::open(&url).unwrap();
    let ids = chat_jobs(&queue, "think", "think-model", JOBS);

    // Six ports (three APIs, three lane servers), each handed out once.
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let api_ports = &ports[..3];
    let configs: Vec<_> = (1..=3)
        .map(|n| {
            let node_dir = dir.path().join(format!("node-{n}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            let config = format!(
                "database = \"{url}\"\n[node]\nname = \"node-{n}\"\n\
                 [coordinator]\nbind = \"127.0.0.1:{api}\"\n\
                 [feeder]\ncooldown_s = 0\nidle_poll_ms = 50\nerror_pause_ms = 100\n\
                 [[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:{port}\"\n\
                 model = \"think-model\"\nbatch_size = 8\nvisibility_s = 3\nstart_wait_s = 60\n\
                 command = {}\n",
                fake_server_command(
                    TEST,
                    &["--port", "{port}", "--slots", "8", "--latency-ms", "40"]
                ),
                port = ports[3 + n - 1],
                api = api_ports[n - 1],
            );
            let path = node_dir.join("horos.toml");
            std::fs::write(&path, config).unwrap();
            path
        })
        .collect();
    let mut nodes: Vec<_> = configs
        .iter()
        .map(|c| spawn_run(c, &c.with_file_name("run.log")))
        .collect();
    let log = |n: usize| {
        std::fs::read_to_string(configs[n].with_file_name("run.log")).unwrap_or_default()
    };

    // Node 2 dies mid-batch once a sixth of the work is stored.
    let deadline = Instant::now() + Duration::from_secs(120);
    while stored(&queue) < (JOBS / 6) as i64 {
        assert!(
            Instant::now() < deadline,
            "too slow before the kill: {} stored\nnode-1:\n{}",
            stored(&queue),
            log(0)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let victim = nodes[1].0.id();
    let servers = children_of(victim);
    stop(&mut nodes[1].0, libc::SIGKILL);
    for s in servers {
        unsafe { libc::kill(s, libc::SIGKILL) };
    }
    let at_kill = stored(&queue);
    assert!(at_kill < JOBS as i64, "all done before the kill");

    // The two others finish everything, the killed node's claimed jobs included.
    let deadline = Instant::now() + Duration::from_secs(240);
    while stored(&queue) < JOBS as i64 {
        assert!(
            Instant::now() < deadline,
            "{} of {JOBS} stored\nnode-1:\n{}\nnode-3:\n{}",
            stored(&queue),
            log(0),
            log(2)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Exactly once, each answer its own; nothing left.
    assert_each_stored_once(&queue, "think", &ids);

    // The coordinator's async jobs are shared too: submitted on node 1, read on node 3.
    let (node1, node3) = (
        format!("http://127.0.0.1:{}", api_ports[0]),
        format!("http://127.0.0.1:{}", api_ports[2]),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(listening(api_ports[0]) && listening(api_ports[2])) {
        assert!(
            Instant::now() < deadline,
            "the coordinators of nodes 1 and 3 are not listening (on {} and {})\nnode-1:\n{}\nnode-3:\n{}",
            api_ports[0],
            api_ports[2],
            log(0),
            log(2)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, v) = curl(
        "POST",
        &format!("{node1}/v1/jobs"),
        Some(
            &serde_json::json!({"kind": "chat", "request": {"model": "think-model",
            "messages": [{"role": "user", "content": "shared job"}]}}),
        ),
        None,
    );
    assert_eq!(code, 202, "{v}");
    let job = v["id"].as_i64().unwrap();
    wait_for("the async job answered", Duration::from_secs(60), || {
        curl("GET", &format!("{node3}/v1/jobs/{job}"), None, None).1["state"] == "succeeded"
    });
    let (_, v) = curl("GET", &format!("{node3}/v1/jobs/{job}"), None, None);
    assert_eq!(
        v["result"]["choices"][0]["message"]["content"]
            .as_str()
            .map(str::trim),
        Some("shared job"),
        "{v}"
    );
    let (code, status) = curl("GET", &format!("{node3}/api/v1/status"), None, None);
    assert_eq!(code, 200, "{status}");
    let listed: Vec<_> = status["sections"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ["node-1", "node-2", "node-3"], "{status}");

    // The nodes table: the killed node falls silent; the others stop cleanly on SIGTERM.
    std::thread::sleep(Duration::from_secs(11));
    let listed = json(&cli(&configs[0], &["--json", "nodes"]));
    let state = |v: &serde_json::Value, name: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .map(|n| n["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(
        state(&listed, "node-1").as_deref(),
        Some("running"),
        "{listed}"
    );
    assert_eq!(
        state(&listed, "node-2").as_deref(),
        Some("silent"),
        "{listed}"
    );
    assert_eq!(
        state(&listed, "node-3").as_deref(),
        Some("running"),
        "{listed}"
    );
    for n in [0, 2] {
        let status = stop(&mut nodes[n].0, libc::SIGTERM);
        assert!(
            status.success(),
            "node-{} exited with {status}\n{}",
            n + 1,
            log(n)
        );
    }
    let listed = json(&cli(&configs[0], &["--json", "nodes"]));
    assert_eq!(
        state(&listed, "node-1").as_deref(),
        Some("stopped"),
        "{listed}"
    );
    assert_eq!(
        state(&listed, "node-3").as_deref(),
        Some("stopped"),
        "{listed}"
    );
    eprintln!(
        "{JOBS} jobs on 3 nodes, node-2 killed at {at_kill} stored: every answer stored once"
    );
}
