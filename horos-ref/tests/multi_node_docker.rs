//! Three `horos-ref run` nodes as Docker containers on two networks the test creates: one to a
//! PostgreSQL cluster of the test's own (listening on that network's gateway), one to the lane
//! server they share (fakeai on the host, 300 ms a request). While they drain 3,000 jobs:
//! - node-1 is SIGKILLed (`docker kill`): its leases expire and the others finish its jobs;
//! - node-2 is cut off from the database (`docker network disconnect`) mid-batch, for longer
//!   than its leases (20 s), then connected again: its jobs are taken over meanwhile (the server
//!   ends its silent transactions after 10 s, releasing their locks); what it writes for them
//!   once back is refused by the lease tokens (its log says so, and the test checks it).
//!
//! Every job's answer is stored exactly once and is its own (0 lost, 0 stored twice), nothing is
//! left in the queue or dead, node-2's heartbeat stopped while it was cut off (the cut is real),
//! node-1 is shown silent and node-2 running again.
//!
//! Needs a Docker engine and PostgreSQL installed (the image is made from the binary and its
//! libraries, nothing pulled): skipped without them, failed with `HOROS_REQUIRE_DOCKER=1` /
//! `HOROS_REQUIRE_POSTGRES=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::nodes::{assert_each_stored_once, pg_script, start_cluster, stored, wait_stored};
use common::{BIN, chat_jobs, free_port, skip_or_fail};
use horos_fakeai::{FakeConfig, FakeProcess, PUBLISH_ENV};
use squeueha::{Queue, params};

const TEST: &str = "three_node_containers_survive_a_kill_and_a_partition";
const JOBS: usize = 3000;

fn docker(args: &[&str]) -> Option<String> {
    let out = Command::new("docker").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// What the test made, removed however it ends: containers, the network, the cluster.
struct Cleanup {
    containers: Vec<String>,
    networks: Vec<String>,
    /// The firewall rule that keeps the lane network off the database (iptables arguments).
    rule: Option<Vec<String>>,
    cluster: Option<(std::path::PathBuf, u16)>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", c]);
        }
        if let Some((dir, port)) = &self.cluster {
            let _ = pg_script("stop_postgres.sh", dir, *port, &[]);
        }
        if let Some(rule) = &self.rule {
            let _ = Command::new("iptables").arg("-D").args(rule).status();
        }
        for n in &self.networks {
            let _ = docker(&["network", "rm", n]);
        }
    }
}

#[test]
fn three_node_containers_survive_a_kill_and_a_partition() {
    horos_fakeai::run_child_if_requested();
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        skip_or_fail("HOROS_REQUIRE_DOCKER", "no Docker engine answers");
        return;
    }
    let tag = format!("{}", std::process::id());
    let (network, lane_net) = (format!("horos-db-{tag}"), format!("horos-lane-{tag}"));
    let mut cleanup = Cleanup {
        containers: Vec::new(),
        networks: vec![network.clone(), lane_net.clone()],
        rule: None,
        cluster: None,
    };
    let ipam = |net: &str, field: &str| {
        docker(&[
            "network",
            "inspect",
            "-f",
            &format!("{{{{(index .IPAM.Config 0).{field}}}}}"),
            net,
        ])
        .unwrap()
    };
    docker(&["network", "create", &network]).expect("docker network create");
    docker(&["network", "create", &lane_net]).expect("docker network create");
    let (subnet, gateway) = (ipam(&network, "Subnet"), ipam(&network, "Gateway"));
    let lane_gateway = ipam(&lane_net, "Gateway");

    // A cluster of the test's own, reachable from the network's containers.
    let pg_dir = tempfile::tempdir().unwrap();
    let pg_port = free_port();
    let listen = format!("127.0.0.1,{gateway}");
    let Some(url) = start_cluster(
        pg_dir.path(),
        pg_port,
        &[("HOROS_PG_LISTEN", &listen), ("HOROS_PG_ALLOW", &subnet)],
    ) else {
        return;
    };
    cleanup.cluster = Some((pg_dir.path().to_path_buf(), pg_port));
    // The database is reached through the database network only: the host would otherwise
    // answer on its gateway address from the lane network too, and a node cut off from the one
    // would still reach the database through the other.
    let lane_bridge = format!(
        "br-{}",
        &docker(&["network", "inspect", "-f", "{{.Id}}", &lane_net]).unwrap()[..12]
    );
    let rule: Vec<String> = [
        "INPUT",
        "-i",
        &lane_bridge,
        "-p",
        "tcp",
        "--dport",
        &pg_port.to_string(),
        "-j",
        "DROP",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let added = Command::new("iptables")
        .arg("-I")
        .args(&rule)
        .status()
        .is_ok_and(|s| s.success());
    assert!(added, "iptables could not add {rule:?}");
    cleanup.rule = Some(rule);
    let inside_url = url.replace("@127.0.0.1:", &format!("@{gateway}:"));

    // The image: this build's horos-ref and its libraries (scripts/build_llama_image.sh).
    let image = {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build_llama_image.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["--binary", BIN, "--tag", "horos/ref-node-test:local"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .trim()
            .to_owned()
    };

    // One lane server for the three nodes, reached on the gateway.
    let lane_port = free_port();
    let fake = FakeConfig {
        model: "think-model".into(),
        slots: 32,
        latency: Duration::from_millis(300),
        ..FakeConfig::default()
    };
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(
            horos_fakeai::CHILD_ENV,
            serde_json::to_string(&fake.to_args()).unwrap(),
        )
        .env(PUBLISH_ENV, lane_port.to_string());
    let mut lane = FakeProcess::spawn_command(cmd).unwrap();

    let queue = Queue::open(&url).unwrap();
    let ids = chat_jobs(&queue, "think", "think-model", JOBS);

    let dirs = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=3).map(|n| format!("node-{n}-{tag}")).collect();
    for (n, name) in names.iter().enumerate() {
        let dir = dirs.path().join(format!("node-{}", n + 1));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("horos.toml"),
            format!(
                "database = \"{inside_url}\"\n[node]\nname = \"node-{}\"\nrun_dir = \"/tmp/run\"\n\
                 [gpus]\nsource = \"none\"\nledger = \"/tmp/vram.db\"\n\
                 [feeder]\ncooldown_s = 0\nidle_poll_ms = 50\nerror_pause_ms = 200\n\
                 [[lane]]\nqueue = \"think\"\nurl = \"http://{lane_gateway}:{lane_port}\"\n\
                 model = \"think-model\"\nbatch_size = 8\nvisibility_s = 3\n",
                n + 1
            ),
        )
        .unwrap();
        let mount = format!("{}:/cfg:ro", dir.display());
        docker(&[
            "run",
            "-d",
            "--name",
            name,
            "--network",
            &network,
            "-v",
            &mount,
            &image,
            "--config",
            "/cfg/horos.toml",
            "run",
        ])
        .expect("docker run");
        cleanup.containers.push(name.clone());
        docker(&["network", "connect", &lane_net, name]).expect("docker network connect");
    }
    let logs_of = |n: usize| {
        let name = &names[n];
        let out = Command::new("docker")
            .args(["logs", name])
            .output()
            .unwrap();
        format!(
            "{name}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let all_logs = || (0..3).map(logs_of).collect::<Vec<_>>().join("\n");

    // node-1 killed once a sixth is stored.
    wait_stored(
        &queue,
        (JOBS / 6) as i64,
        Duration::from_secs(180),
        all_logs,
    );
    docker(&["kill", &names[0]]).expect("docker kill");
    // node-2 cut off mid-batch near the end, for longer than its leases. Expired leases are
    // claimed after the older ready jobs, so it is cut when the backlog is short enough for
    // node-3 to drain it and take node-2's jobs over within the cut.
    wait_stored(
        &queue,
        (JOBS - 150) as i64,
        Duration::from_secs(180),
        all_logs,
    );
    docker(&["network", "disconnect", &network, &names[1]]).expect("disconnect");
    let cut_at = stored(&queue);
    // Longer than the server takes to end its silent transactions (10 s) and its leases (3 s).
    std::thread::sleep(Duration::from_secs(20));
    // Cut off indeed: its heartbeat stopped.
    let beat_age = |name: &str| {
        let r = queue
            .query_opt(
                "SELECT heartbeat_ms FROM horos_nodes WHERE name = ?1",
                params![name],
            )
            .unwrap()
            .unwrap();
        squeueha::now_ms() - r.get::<i64>(0).unwrap()
    };
    let age = beat_age("node-2");
    assert!(
        age > 6_000,
        "node-2 still reached the database while cut off ({age} ms)"
    );
    assert!(
        stored(&queue) > cut_at,
        "node-3 stopped working while node-2 was cut off"
    );
    docker(&["network", "connect", &network, &names[1]]).expect("connect");

    wait_stored(&queue, JOBS as i64, Duration::from_secs(300), all_logs);
    // Time for node-2's late writes to be refused, and nothing more to be stored.
    std::thread::sleep(Duration::from_secs(5));
    assert_each_stored_once(&queue, "think", &ids);

    // node-1 silent, node-2 back; node-2's late answers were refused by their stale leases.
    std::thread::sleep(Duration::from_secs(8));
    let nodes = {
        let rows = queue
            .query("SELECT name, heartbeat_ms FROM horos_nodes", params![])
            .unwrap();
        let now = squeueha::now_ms();
        rows.iter()
            .map(|r| {
                let (name, beat): (String, i64) = (r.get(0).unwrap(), r.get(1).unwrap());
                (name, now - beat)
            })
            .collect::<HashMap<_, _>>()
    };
    assert!(nodes["node-1"] > 10_000, "node-1 still beating: {nodes:?}");
    assert!(
        nodes["node-2"] < 10_000,
        "node-2 did not come back: {nodes:?}"
    );
    assert!(nodes["node-3"] < 10_000, "{nodes:?}");
    let node2 = logs_of(1);
    // Back on the network, it wrote what it had for the jobs taken over: refused, since their
    // lease tokens are no longer its own (the count above shows none was stored twice).
    let refused = node2.matches("lease went stale").count();
    assert!(
        refused > 0,
        "node-2 wrote nothing refused after its partition:\n{node2}"
    );
    let _ = lane.kill();
    eprintln!(
        "{JOBS} jobs on 3 containers (one killed, one cut off 20 s): every answer stored once; \
         node-2 had {refused} late write(s) refused"
    );
}
