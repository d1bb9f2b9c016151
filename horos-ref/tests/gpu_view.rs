//! One view of the GPUs (issue 47): the demo's shape (`[allocator] initial = ["chat", "pool"]`,
//! a chat lane, a pinned pooled model preloaded right after the coordinator starts) on two
//! simulated GPUs, with fakeai for the servers. The pinned model is placed only on the GPU the
//! allocator gave the pool, never beside the chat lane's server, and the ledger, the modes board
//! and the pool's slots say the same.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{free_port, free_ports, leases, listening, spawn_run, wait_for};

const TEST: &str = "a_pinned_model_is_placed_on_the_pools_gpu_only";

#[test]
fn a_pinned_model_is_placed_on_the_pools_gpu_only() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (lane_port, pool_port, port) = (free_ports(2), free_ports(2), free_port());
    let config = common::lane_and_pool_config(
        TEST,
        (port, lane_port, pool_port),
        "[gpus]\nsource = \"simulated\"\nsimulated_mb = [4096, 4096]\ninterval_ms = 100\n\
         [allocator]\ngpus = [0, 1]\ninitial = [\"chat\", \"pool\"]\ntick_s = 0.2\n\
         min_dwell_s = 3600\n[allocator.pool]\nswap_in_s = 5.0\n",
        true,
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let _run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the coordinator", Duration::from_secs(60), || {
        listening(port)
    });
    wait_for("the pinned model loaded", Duration::from_secs(60), || {
        common::status_slot(&base, "minilm")["state"] == "READY"
    });
    wait_for("the chat lane's server", Duration::from_secs(60), || {
        leases(&path).iter().any(|l| l.0 == "lane:chat")
    });
    let l = leases(&path);
    let on = |owner: &str| -> Vec<u64> { l.iter().filter(|x| x.0 == owner).map(|x| x.1).collect() };
    assert_eq!(
        on("pool:minilm"),
        [1],
        "the pool's GPU only: {l:?}\n{}",
        log()
    );
    assert_eq!(on("lane:chat"), [0], "{l:?}");
    // The pool's own view: the slot's shares are on GPU 1.
    let (code, v) = common::curl("GET", &format!("{base}/api/v1/models"), None, None);
    assert_eq!(code, 200, "{v}");
    let slot = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["model"] == "minilm")
        .cloned()
        .unwrap_or_default();
    let gpus: Vec<u64> = slot["gpus"]
        .as_array()
        .map(|s| s.iter().filter_map(|x| x["gpu"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(gpus, [1], "{slot}");
    // The modes board says the same: GPU 0 the lane's, GPU 1 the pool's.
    let (_, status) = common::curl("GET", &format!("{base}/api/v1/status"), None, None);
    let mut modes: Vec<(u64, String)> = status["modes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| Some((m["gpu"].as_u64()?, m["mode"].as_str()?.to_owned())))
        .collect();
    modes.sort();
    assert_eq!(modes, [(0, "chat".to_owned()), (1, "pool".to_owned())]);
    // What the GPUs report used follows what runs there: the driver's 300 MB, then the chat
    // lane's server (192 MB) on GPU 0 and minilm (300 MB) on GPU 1, nothing else.
    let (code, g) = common::curl("GET", &format!("{base}/api/v1/gpus"), None, None);
    assert_eq!(code, 200, "{g}");
    let used: Vec<(u64, u64)> = g["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["index"].as_u64().unwrap(),
                x["memory_used_mb"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(used, [(0, 300 + 192), (1, 300 + 300)], "{g}");
    // `ps` says the same: the lane on GPU 0, minilm on GPU 1, the modes as the board has them.
    let ps = common::json(&common::cli(&path, &["ps", "--json"]));
    let lane_gpu = ps["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["queue"] == "chat")
        .map(|l| l["gpu"].to_string())
        .unwrap_or_default();
    assert!(lane_gpu.contains('0') && !lane_gpu.contains('1'), "{ps}");
    let ps_minilm: Vec<u64> = ps["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["model"] == "minilm")
        .flat_map(|m| m["gpus"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["gpu"].as_u64())
        .collect();
    assert_eq!(ps_minilm, [1], "{ps}");
    // The status page's GPUs table: minilm in GPU 1's row only, each GPU's memory as above.
    let (_, page) = common::curl_text(&format!("{base}/status"));
    let table = page
        .split("<h2>GPUs</h2>")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_default();
    let row = |gpu: u32| -> String {
        table
            .split("<tr>")
            .find(|r| r.starts_with(&format!("<td>{gpu}</td>")))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        row(1).contains("minilm") && row(1).contains("600 / 4096 MB"),
        "{table}"
    );
    assert!(
        !row(0).contains("minilm") && row(0).contains("492 / 4096 MB"),
        "{table}"
    );
    // The auditor has looked at least twice (every 2 s) and found the views agree.
    std::thread::sleep(Duration::from_secs(5));
    let (_, metrics) = common::curl_text(&format!("{base}/metrics"));
    common::assert_gpu_view_held(&metrics);
    let (_, page) = common::curl_text(&format!("{base}/status"));
    assert!(
        page.contains("<h2>GPU view</h2>") && page.contains("agree (0 breaches since start)"),
        "{page}"
    );
    // The deep health check asks the GPU view too, and finds it green.
    let (code, ready) = common::curl("GET", &format!("{base}/health/ready"), None, None);
    assert_eq!(code, 200, "{ready}");
    assert!(
        ready["parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["part"] == "gpu_view" && p["ok"] == true),
        "{ready}"
    );
    assert!(!log().contains("panicked"), "{}", log());
}
