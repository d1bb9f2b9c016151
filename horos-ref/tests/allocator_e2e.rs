//! `[allocator]` end to end: two lanes share one GPU; gpu-alloc's allocator moves the GPU to the
//! lane that has the work, the switch stops one server and starts the other, the closed lane's
//! jobs are never touched while it waits, and every switch is on the status page with its reason.
//! With REAL llama-servers: needs `HOROS_LLAMA_SERVER` and `HOROS_SMOLLM2_GGUF`
//! (scripts/setup_llama.sh); skips without them unless HOROS_REQUIRE_LLAMA=1. With fake servers
//! (this test binary re-executed): always runs.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/allocator.rs"]
mod kit;

use std::process::Command;
use std::time::Duration;

use horos_gpu_alloc::allocator::{SwapCosts, SwapKind};
use horos_gpu_alloc::catalogue::SleepLevel;
use horos_gpu_alloc::cost_store::CostStore;

use common::{chat_via, free_port, free_ports, leases, listening, spawn_run, stop, wait_for};
use serde_json::{Value, json};
use squeueha::Queue;

use kit::{
    all_done, check_ledger, decisions, fake_jobs, fake_lane, lane, llama, llama_lane, model_lane,
    submit, visible_devices,
};

#[test]
fn the_shared_gpu_follows_the_work_between_two_real_servers() {
    let Some((server, model)) = llama() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, coord_port) = (free_port(), free_port(), free_port());
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 50\nhealth_interval_s = 1.0\n\
         [allocator]\ntick_s = 0.5\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         [coordinator]\nbind = \"127.0.0.1:{coord_port}\"\n\n{}{}",
        lane("think", think_port, &server, &model),
        lane("vision", vision_port, &server, &model),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let base = format!("http://127.0.0.1:{coord_port}");
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    // The first lane serves at start; the second's server is not running.
    wait_for("the think server", Duration::from_secs(120), || {
        listening(think_port)
    });
    assert!(!listening(vision_port), "the waiting lane's server runs");

    // Work for vision only: the GPU moves there.
    let vision = submit(&queue, "vision", 12);
    wait_for("the vision jobs", Duration::from_secs(240), || {
        all_done(&queue, &vision)
    });
    assert!(listening(vision_port));
    assert!(
        !listening(think_port),
        "the think server still runs after the switch"
    );

    // Think jobs wait, untouched, until the GPU comes back to think.
    let think = submit(&queue, "think", 6);
    wait_for("the think jobs", Duration::from_secs(240), || {
        all_done(&queue, &think)
    });
    assert!(listening(think_port) && !listening(vision_port));
    for id in vision.iter().chain(&think) {
        if let Some(j) = queue.get(*id).unwrap() {
            assert_eq!(j.attempts, 1, "job {id} ran more than once: {j:?}");
        }
    }
    let sink = horos_feeder::TableSink::new(queue.clone()).unwrap();
    assert_eq!(
        sink.count().unwrap(),
        18,
        "every job answered and stored once"
    );
    assert_eq!(queue.stats("think").unwrap().dead, 0);
    assert_eq!(queue.stats("vision").unwrap().dead, 0);

    // Both switches, with their reasons, on the status page.
    wait_for(
        "the decisions on the status page",
        Duration::from_secs(10),
        || {
            decisions(&base)
                .iter()
                .filter(|(a, _)| a == "switched")
                .count()
                >= 2
        },
    );
    let d = decisions(&base);
    eprintln!("allocator decisions: {d:#?}");
    let switches: Vec<&String> = d
        .iter()
        .filter(|(a, _)| a == "switch")
        .map(|(_, r)| r)
        .collect();
    assert!(
        switches[0].starts_with("think -> vision: {\"code\":"),
        "{d:?}"
    );
    assert!(
        switches[1].starts_with("vision -> think: {\"code\":"),
        "{d:?}"
    );

    // The mode the GPU serves, on the status page and in /metrics.
    let page = Command::new("curl")
        .args(["-s", &format!("{base}/status")])
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains("<h2>Modes</h2>") && page.contains("<td>think</td><td>serving</td>"),
        "{page}"
    );

    assert!(stop(&mut run.0, libc::SIGTERM).success());
    assert!(!listening(think_port) && !listening(vision_port));
}

/// The same switches with fake servers (no llama-server needed): each lane's server is owned by
/// a supervisor, which the allocator asks to stop one server and start the other.
#[test]
fn the_shared_gpu_follows_the_work_between_two_supervised_fake_servers() {
    const TEST: &str = "the_shared_gpu_follows_the_work_between_two_supervised_fake_servers";
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port) = (free_port(), free_port());
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\n{}{}",
        fake_lane("think", think_port, TEST),
        fake_lane("vision", vision_port, TEST),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the think server", Duration::from_secs(60), || {
        listening(think_port)
    });
    assert!(!listening(vision_port), "the waiting lane's server runs");

    let vision = fake_jobs(&queue, "vision", 12);
    wait_for("the vision jobs", Duration::from_secs(60), || {
        all_done(&queue, &vision)
    });
    assert!(listening(vision_port), "{}", log());
    wait_for("the think server stopped", Duration::from_secs(10), || {
        !listening(think_port)
    });

    let think = fake_jobs(&queue, "think", 6);
    wait_for("the think jobs", Duration::from_secs(60), || {
        all_done(&queue, &think)
    });
    assert!(listening(think_port), "{}", log());
    wait_for("the vision server stopped", Duration::from_secs(10), || {
        !listening(vision_port)
    });
    for id in vision.iter().chain(&think) {
        if let Some(j) = queue.get(*id).unwrap() {
            assert_eq!(j.attempts, 1, "job {id} ran more than once: {j:?}");
        }
    }
    let sink = horos_feeder::TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 18, "every job answered once");
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("both servers gone", Duration::from_secs(10), || {
        !listening(think_port) && !listening(vision_port)
    });
}

/// `GET /is_sleeping` of the fake server on `port`.
fn is_sleeping(port: u16) -> Option<bool> {
    let out = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{port}/is_sleeping")])
        .output()
        .ok()?;
    serde_json::from_slice::<Value>(&out.stdout).ok()?["is_sleeping"].as_bool()
}

/// With `[allocator] sleep = true` and `[lane.sleep] can_sleep`, the lane the GPU leaves is put
/// to sleep (its server still runs, asleep), woken when the GPU comes back (not started again),
/// and `/metrics` counts the swaps by kind and the load the wake avoided. The servers are fake
/// vLLMs with sleep mode (their command says `--enable-sleep-mode`, as vLLM's would).
#[test]
fn a_lane_left_sleeps_and_is_woken_and_metrics_count_the_swaps() {
    const TEST: &str = "a_lane_left_sleeps_and_is_woken_and_metrics_count_the_swaps";
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, coord_port) = (free_port(), free_port(), free_port());
    let sleepy_lane = |queue: &str, port: u16| {
        let args = [
            "--port",
            "{port}",
            "--slots",
            "4",
            "--enable-sleep-mode",
            "--sleep-latency-ms",
            "100",
            "--wake-l1-latency-ms",
            "200",
        ];
        let mut cmd: Vec<String> =
            serde_json::from_str(&common::fake_server_command(TEST, &args)).unwrap();
        // sh's $0, unused: the command line says what vLLM's would.
        cmd.push("--enable-sleep-mode".into());
        let plain = fake_lane(queue, port, TEST);
        let (head, _) = plain.split_once("command = ").unwrap();
        format!(
            "{head}command = {}\n[lane.sleep]\ncan_sleep = true\nsleep_s = 0.01\nwake_l1_s = 0.01\n",
            serde_json::to_string(&cmd).unwrap()
        )
    };
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         sleep = true\n[coordinator]\nbind = \"127.0.0.1:{coord_port}\"\n\n{}{}",
        sleepy_lane("think", think_port),
        sleepy_lane("vision", vision_port),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let base = format!("http://127.0.0.1:{coord_port}");
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the think server", Duration::from_secs(60), || {
        listening(think_port)
    });
    assert!(!listening(vision_port), "the waiting lane's server runs");

    let vision = fake_jobs(&queue, "vision", 12);
    wait_for("the vision jobs", Duration::from_secs(60), || {
        all_done(&queue, &vision)
    });
    assert_eq!(is_sleeping(think_port), Some(true), "{}", log());
    assert_eq!(is_sleeping(vision_port), Some(false));

    let think = fake_jobs(&queue, "think", 6);
    wait_for("the think jobs", Duration::from_secs(60), || {
        all_done(&queue, &think)
    });
    assert_eq!(is_sleeping(think_port), Some(false), "{}", log());
    wait_for("vision asleep", Duration::from_secs(10), || {
        is_sleeping(vision_port) == Some(true)
    });
    // A switch's swaps are counted at the executor's next tick.
    let metrics = || {
        let out = Command::new("curl")
            .args(["-s", &format!("{base}/metrics")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_for("the second switch counted", Duration::from_secs(10), || {
        metrics().contains("horos_swaps_total{kind=\"wake\"} 1")
    });
    let metrics = metrics();
    for series in [
        "horos_swaps_total{kind=\"sleep\"} 2",
        "horos_swaps_total{kind=\"wake\"} 1",
        "horos_swaps_total{kind=\"load\"} 1",
        "horos_swaps_total{kind=\"stop\"} 0",
        "horos_swaps_avoided_total 1",
        "# TYPE horos_swap_seconds histogram",
        "horos_swap_seconds_count{mode=\"think\",kind=\"wake\"} 1",
        "horos_swap_seconds_bucket{mode=\"think\",kind=\"wake\",le=\"+Inf\"} 1",
        "horos_swap_seconds_count{mode=\"think\",kind=\"sleep\"} 1",
        "horos_swap_seconds_count{mode=\"vision\",kind=\"load\"} 1",
    ] {
        assert!(metrics.contains(series), "{series} not in {metrics}");
    }
    // The histograms pass Prometheus' own lint, where promtool is installed.
    common::promtool_accepts(&metrics);
    // The status page's Swaps section: each swap's measured cost, the GPU time they took.
    let status = common::json(
        &Command::new("curl")
            .args(["-s", &format!("{base}/api/v1/status")])
            .output()
            .unwrap(),
    );
    let swaps = &status["sections"]["swaps"];
    let costs = swaps["costs"].as_array().cloned().unwrap_or_default();
    let cost = |mode: &str, kind: &str| {
        costs
            .iter()
            .find(|c| c["mode"] == mode && c["kind"] == kind)
            .map(|c| (c["mean_s"].as_f64().unwrap_or(-1.0), c["count"].clone()))
    };
    let (wake_s, wakes) = cost("think", "wake l1").unwrap_or_else(|| panic!("{swaps}"));
    assert!(wake_s >= 0.2 && wakes == 1, "{swaps}");
    assert!(cost("vision", "load").is_some(), "{swaps}");
    assert_eq!(swaps["avoided"], 1, "{swaps}");
    let lost: f64 = swaps["lost_s_by_minute"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_f64).sum())
        .unwrap_or(0.0);
    assert!(lost >= wake_s, "{swaps}");
    let d = decisions(&base);
    assert!(!d.iter().any(|(a, _)| a == "fallback"), "{d:?}");
    assert!(
        d.iter()
            .any(|(a, r)| a == "retire" && r.starts_with("think: asleep at level 1")),
        "{d:?}"
    );
    // `ps` shows the lane asleep, with its level; the lane serving is healthy.
    let mut ps = Value::Null;
    wait_for("ps to show vision asleep", Duration::from_secs(10), || {
        ps = common::json(&common::cli(&path, &["--json", "ps"]));
        ps["lanes"].as_array().is_some_and(|lanes| {
            lanes
                .iter()
                .any(|l| l["queue"] == "vision" && l["server"] == "asleep l1" && l["asleep"] == 1)
        })
    });
    let lanes = ps["lanes"].as_array().unwrap();
    assert!(
        lanes
            .iter()
            .any(|l| l["queue"] == "think" && l["server"] == "healthy" && l["asleep"].is_null()),
        "{ps}"
    );
    let table = common::cli(&path, &["ps"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("vision") && l.contains("asleep l1")),
        "{table}"
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("both servers gone", Duration::from_secs(10), || {
        !listening(think_port) && !listening(vision_port)
    });

    // The swaps measured are kept in the ledger's file, per (mode, GPU, kind, level)...
    let ledger = dir.path().join("vram-ledger.db");
    let kept = || CostStore::open(&ledger).unwrap().load().unwrap();
    let count =
        |costs: &SwapCosts, mode: &str, kind| costs.measured(mode, 0, kind).map_or(0, |m| m.count);
    let first = kept();
    let asleep = SwapKind::Sleep(SleepLevel::One);
    assert_eq!(count(&first, "think", asleep), 1, "{first:?}");
    assert_eq!(count(&first, "vision", asleep), 1, "{first:?}");
    assert_eq!(count(&first, "vision", SwapKind::Load), 1, "{first:?}");
    assert_eq!(count(&first, "think", SwapKind::Wake(SleepLevel::One)), 1);
    // The scripted 200 ms wake, measured.
    let wake = first
        .measured("think", 0, SwapKind::Wake(SleepLevel::One))
        .unwrap();
    assert!(wake.mean_s >= 0.2, "{wake:?}");
    // ... read back by the next run, which plans with them: think's measured sleep and wake
    // (100 + 200 ms scripted) now cost more than its 0.2 s load, so think is stopped, not put
    // to sleep as the priors (0.01 s each) had it.
    let log2 = dir.path().join("run2.log");
    let mut run = spawn_run(&path, &log2);
    let log2 = || std::fs::read_to_string(dir.path().join("run2.log")).unwrap_or_default();
    wait_for("the costs read back", Duration::from_secs(60), || {
        log2().contains("swap costs measured earlier") && log2().contains("measured=4")
    });
    wait_for("the think server again", Duration::from_secs(60), || {
        listening(think_port)
    });
    let vision = fake_jobs(&queue, "vision", 6);
    wait_for("the vision jobs again", Duration::from_secs(60), || {
        all_done(&queue, &vision)
    });
    wait_for("the switch kept", Duration::from_secs(10), || {
        count(&kept(), "think", SwapKind::Stop) == 1
    });
    assert_eq!(count(&kept(), "think", asleep), 1, "{}", log2());
    assert_eq!(count(&kept(), "vision", SwapKind::Load), 2, "{}", log2());
    assert!(
        log2().contains("action=\"retire\" reason=think: stopped"),
        "{}",
        log2()
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("both servers gone", Duration::from_secs(10), || {
        !listening(think_port) && !listening(vision_port)
    });
}

/// A request through the coordinator for the model of a lane the allocator has parked is never
/// a connection error: it counts as the lane's demand, and either waits within its budget while
/// the allocator switches, or is answered 503 with `Retry-After` at once when the switch cannot
/// fit its budget (the switch then happens anyway).
#[test]
fn a_request_for_a_parked_lanes_model_switches_the_gpu_and_is_answered() {
    const TEST: &str = "a_request_for_a_parked_lanes_model_switches_the_gpu_and_is_answered";
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, port) = (free_port(), free_port(), free_port());
    // One request is 1 s of work: more than the 0.2 s switch, so the allocator serves it.
    let lane = |queue: &str, lane_port: u16| model_lane(queue, lane_port, TEST);
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\nretry_backoff_s = 0.05\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\n{}{}",
        lane("think", think_port),
        lane("vision", vision_port),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the think server", Duration::from_secs(60), || {
        listening(think_port)
    });
    wait_for("the coordinator", Duration::from_secs(30), || {
        listening(port)
    });
    assert!(!listening(vision_port));

    // The served lane's model answers at once.
    let (code, _, v) = chat_via(&base, "think-model", 30.0);
    assert_eq!(code, 200, "{v}\n{}", log());

    // The parked lane's model, with a budget shorter than the switch: 503 + Retry-After, and
    // the request's demand moves the GPU anyway.
    let (code, retry_after, v) = chat_via(&base, "vision-model", 0.1);
    assert_eq!(code, 503, "{v}\n{}", log());
    assert_eq!(v["error"]["code"], "model_loading", "{v}");
    assert!(
        v["error"]["estimated_ready_s"].as_f64().unwrap() > 0.1,
        "{v}"
    );
    assert!(retry_after.is_some(), "{v}");
    wait_for("the switch to vision", Duration::from_secs(60), || {
        listening(vision_port) && !listening(think_port)
    });
    let (code, _, v) = chat_via(&base, "vision-model", 30.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    assert_eq!(
        v["choices"][0]["message"]["content"], "hello vision-model",
        "{v}"
    );

    // Think is parked now: a request with a budget waits while the allocator switches back.
    let (code, _, v) = chat_via(&base, "think-model", 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    assert!(listening(think_port) && !listening(vision_port));
    assert!(
        log().contains("switch"),
        "the allocator's switches are logged:\n{}",
        log()
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
}

/// Two GPUs, two lanes: each lane has a server instance per GPU (its URL's port plus the GPU's
/// slot, told its GPU), and the allocator moves each GPU on its own: a vision backlog takes both
/// GPUs, think work brings one back, a request for a parked model is answered, and no instance
/// runs on a GPU that does not serve its lane. Each running instance books its 600 MB in the
/// VRAM ledger of the simulated 2 × 1,000 MB fleet, where a lease taken through the CLI also
/// lives: nothing is ever double-booked.
#[test]
fn two_gpus_switch_each_its_own_server_instances() {
    const TEST: &str = "two_gpus_switch_each_its_own_server_instances";
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, port) = (free_ports(2), free_ports(2), free_port());
    // Each fake answers after 20 ms, so that one GPU takes seconds over the backlog below.
    let lane = |queue: &str, lane_port: u16| {
        model_lane(queue, lane_port, TEST).replace(
            &common::fake_server_command(TEST, &["--port", "{port}", "--slots", "4"]),
            &common::fake_server_command(
                TEST,
                &["--port", "{port}", "--slots", "4", "--latency-ms", "20"],
            ),
        )
    };
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\nretry_backoff_s = 0.05\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [1000, 1000]\n\
         [allocator]\ngpus = [0, 1]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\n\
         max_wait_s = 60\nbacklog_time_constant_s = 0.2\n\n{}{}",
        lane("think", think_port),
        lane("vision", vision_port),
    )
    .replace("job_s = 1.0\n", "job_s = 1.0\nvram_mb = 600\n");
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    // At start GPU 0 serves think (its first instance), GPU 1 vision (its second).
    wait_for("the initial servers", Duration::from_secs(60), || {
        listening(think_port) && listening(vision_port + 1)
    });
    assert!(!listening(think_port + 1) && !listening(vision_port));
    assert_eq!(visible_devices(dir.path(), "think").as_deref(), Some("0"));
    assert_eq!(
        visible_devices(dir.path(), "vision-gpu1").as_deref(),
        Some("1")
    );
    let instances = [
        ("think", think_port),
        ("think-gpu1", think_port + 1),
        ("vision", vision_port),
        ("vision-gpu1", vision_port + 1),
    ];
    check_ledger(&path, &instances);

    // Another process books memory through the CLI: only what the lanes left is there.
    let acquire = |mb: u64| common::acquire_lease(&path, "train:e2e", 1, mb);
    let refused = acquire(500);
    assert!(
        !refused.status.success(),
        "500 MB booked beside 600 of 1,000"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("400"),
        "{refused:?}"
    );
    assert!(acquire(300).status.success());
    let l = check_ledger(&path, &instances);
    eprintln!("ledger after the CLI lease: {l:?}");
    assert!(l.contains(&("train:e2e".into(), 1, 300)));

    // A vision backlog beyond what one GPU does within the allocator's horizon (200 jobs of
    // 1 s against 60 s; the backlog's moving average follows within 0.2 s), nothing for think:
    // GPU 0 goes to vision too.
    let vision = fake_jobs(&queue, "vision", 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(listening(vision_port) && listening(vision_port + 1) && !listening(think_port)) {
        assert!(
            std::time::Instant::now() < deadline,
            "GPU 0 did not go to vision:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(visible_devices(dir.path(), "vision").as_deref(), Some("0"));
    check_ledger(&path, &instances);
    // `ps`: each instance where it runs (its gate open exactly while its server listens, once
    // the switch has opened it), each GPU with what it serves.
    let mut ps = Value::Null;
    wait_for(
        "ps to show the switch done",
        Duration::from_secs(10),
        || {
            ps = common::json(&common::cli(&path, &["--json", "ps"]));
            ps["lanes"].as_array().is_some_and(|lanes| {
                lanes.len() == 4
                    && lanes.iter().all(|l| {
                        let port: u16 = l["url"]
                            .as_str()
                            .and_then(|u| u.rsplit(':').next())
                            .and_then(|p| p.parse().ok())
                            .unwrap_or(0);
                        (l["gate"] == "open") == listening(port)
                    })
            })
        },
    );
    let lanes = ps["lanes"].as_array().unwrap();
    assert!(
        lanes
            .iter()
            .any(|l| l["queue"] == "vision" && l["gpu"] == 1 && l["gate"] == "open"),
        "{ps}"
    );
    assert_eq!(ps["gpus"].as_array().unwrap().len(), 2, "{ps}");
    let table = common::cli(&path, &["ps"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("LANE") && table.contains("vision"),
        "{table}"
    );
    wait_for("the vision jobs", Duration::from_secs(120), || {
        all_done(&queue, &vision)
    });

    // Think is parked on both GPUs: a request for its model waits for a switch and is answered
    // by an instance the switch started.
    let (code, _, v) = chat_via(&base, "think-model", 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    assert!(
        listening(think_port) || listening(think_port + 1),
        "{}",
        log()
    );
    for k in 0..2 {
        assert!(
            !(listening(think_port + k) && listening(vision_port + k)),
            "GPU {k} runs both lanes' servers"
        );
    }
    check_ledger(&path, &instances);
    let sink = horos_feeder::TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 200, "every vision job answered once");
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("every server gone", Duration::from_secs(10), || {
        (0..2).all(|k| !listening(think_port + k) && !listening(vision_port + k))
    });
    assert_eq!(
        leases(&path),
        vec![("train:e2e".to_owned(), 1, 300)],
        "the lanes' leases outlived their servers"
    );
}

/// Pages the ingest pipeline has to read with the vision model count as the vision lane's
/// demand: with the vision lane parked (its server stopped) and nothing in its queue, a
/// document submitted for ingest moves the GPU to it, and the document is read there. The
/// pipeline calls the vision server directly (not through a coordinator), so only the pipeline's
/// own backlog can move the GPU.
#[test]
fn ingests_pending_pages_move_the_gpu_to_the_vision_lane() {
    const TEST: &str = "ingests_pending_pages_move_the_gpu_to_the_vision_lane";
    horos_fakeai::run_child_if_requested();
    // Born-digital: its text layer is ignored, so that its pages wait for the vision model.
    let Some(pdf) = common::excerpt() else { return };
    let rt = common::runtime();
    let embeddings = rt
        .block_on(horos_fakeai::FakeServer::start(
            horos_fakeai::FakeConfig::default(),
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("inbox")).unwrap();
    std::fs::copy(&pdf, dir.path().join("inbox/manual.pdf")).unwrap();
    let (think_port, vision_port, port) = (free_port(), free_port(), free_port());
    // The status page from the control plane's own thread and port.
    let control = free_port();
    let lane = |queue: &str, lane_port: u16| model_lane(queue, lane_port, TEST);
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\ncontrol_bind = \"127.0.0.1:{control}\"\n\
         [ingest]\ninbox = \"inbox\"\nreader = \"openai\"\nvision_url = \"http://127.0.0.1:{vision_port}\"\n\
         vision_model = \"vision-model\"\nembeddings_url = \"{}\"\nembeddings_model = \"fake-embed\"\n\
         retry_delay_s = 1\nmax_attempts = 30\ntext_layer = \"ignore\"\n\n{}{}",
        embeddings.url(),
        lane("think", think_port),
        lane("vision", vision_port),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the think server", Duration::from_secs(60), || {
        listening(think_port)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!listening(vision_port), "vision serves with nothing to do");

    let queued = common::json(&common::cli(&path, &["--json", "ingest", "manual.pdf"]));
    assert_eq!(queued["status"], "queued", "{queued}");
    wait_for("the switch to vision", Duration::from_secs(60), || {
        listening(vision_port) && !listening(think_port)
    });
    let mut doc = Value::Null;
    wait_for("the document read", Duration::from_secs(120), || {
        doc = common::json(&common::cli(&path, &["--json", "docs"]))[0].clone();
        doc["status"] != "pending"
    });
    assert_eq!(doc["status"], "done", "{doc}\n{}", log());
    assert_eq!(doc["pages"], 4, "{doc}");
    // The parked lane was waited for, not fallen back from: the model read every page.
    let id = doc["id"].to_string();
    let pages = common::json(&common::cli(&path, &["--json", "docs", "pages", &id]));
    let by: Vec<&str> = pages
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["read_by"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(by, ["vision_model"; 4], "{pages}");
    assert!(
        log().contains("ingest's waiting work counts as this lane's demand"),
        "{}",
        log()
    );
    // The status page shows the lanes (vision open, think closed) and the document read.
    let mut page = String::new();
    wait_for(
        "the document on the status page",
        Duration::from_secs(10),
        || {
            let out = Command::new("curl")
                .args(["-s", &format!("http://127.0.0.1:{control}/status")])
                .output()
                .unwrap();
            page = String::from_utf8_lossy(&out.stdout).into_owned();
            page.contains("<td>manual</td><td>done</td><td>4 / 4</td>")
        },
    );
    assert!(page.contains("<h2>Lanes</h2>"), "{page}");
    for (lane, gate) in [("think", "closed"), ("vision", "open")] {
        let url = format!(
            "http://127.0.0.1:{}",
            if lane == "think" {
                think_port
            } else {
                vision_port
            }
        );
        assert!(
            page.contains(&format!(
                "<tr><td>{lane}</td><td>0</td><td>{url}</td><td>{gate}</td>"
            )),
            "{lane} {gate}: {page}"
        );
    }
    assert!(
        page.contains("<h2>Ingest</h2><p>1 documents: 0 in progress, 1 done, 0 failed · "),
        "{page}"
    );
    // Its report, as `docs show` prints it for scripts.
    let report = common::json(&common::cli(&path, &["--json", "docs", "show", "1"]));
    assert_eq!(report["document"]["status"], "done", "{report}");
    assert_eq!(report["pages"], 4, "{report}");
    assert!(
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["stage"] == "image_to_ocr" && s["jobs"].as_u64() >= Some(4)),
        "{report}"
    );

    // The same pages through the coordinator's /v1/search, whatever the text typed (the fake
    // reader wrote each page as its prompt and an "[image image/png]" note).
    let search = |body: Value| {
        common::curl(
            "POST",
            &format!("http://127.0.0.1:{port}/v1/search"),
            Some(&body),
            None,
        )
    };
    let (code, v) = search(json!({"query": "image \"unbalanced C++ AND (", "k": 3}));
    assert_eq!(code, 200, "{v}");
    let hits = v["data"].as_array().unwrap();
    assert!(!hits.is_empty() && hits.len() <= 3, "{v}");
    assert!(hits.iter().all(|h| h["document"] == 1), "{v}");
    let (code, v) = search(json!({"query": "image", "document": 2}));
    assert_eq!(
        (code, v["data"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{v}"
    );
    for (body, param) in [
        (json!({"k": 3}), "query"),
        (json!({"query": "image", "k": 0}), "k"),
    ] {
        let (code, v) = search(body);
        assert_eq!(
            (code, v["error"]["param"].as_str()),
            (400, Some(param)),
            "{v}"
        );
    }
    let (code, v) = search(json!({"query": "image", "mode": "sideways"}));
    assert_eq!(code, 400, "{v}");
    // By meaning (the chunks' vectors, from the fake embeddings server), and fused: without a
    // late-interaction model, hybrid fuses full text and vectors.
    for mode in ["vector", "hybrid"] {
        let (code, v) = search(json!({"query": "image", "mode": mode, "k": 2}));
        assert_eq!(code, 200, "{mode}: {v}");
        let hits = v["data"].as_array().unwrap();
        assert!(!hits.is_empty() && hits.len() <= 2, "{mode}: {v}");
    }
    // The pipeline's workers, changed while it runs (admin API; no key configured here).
    let workers = |method: &str, body: Option<Value>| {
        common::curl(
            method,
            &format!("http://127.0.0.1:{port}/api/v1/ingest/workers"),
            body.as_ref(),
            None,
        )
    };
    let (code, v) = workers("PUT", Some(json!({"image_to_ocr": 3, "embed_text": 1})));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["image_to_ocr"]["workers"], 3, "{v}");
    assert_eq!(v["embed_text"]["workers"], 1, "{v}");
    wait_for("3 OCR workers running", Duration::from_secs(10), || {
        workers("GET", None).1["image_to_ocr"]["running"] == 3
    });
    let (code, v) = workers("PUT", Some(json!({"image_to_ocr": 3, "no_such_stage": 1})));
    assert_eq!(code, 400, "{v}");
    let (code, v) = workers("PUT", Some(json!({"embed_text": 1000})));
    assert_eq!(code, 400, "{v}");
    assert_eq!(workers("GET", None).1["embed_text"]["workers"], 1);

    // Visual search needs a late-interaction model: the offline fallback says so.
    let (code, v) = search(json!({"query": "image", "mode": "visual"}));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("visual")),
        "{v}"
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
}

/// Real llama-servers on a simulated fleet of two 1,000 MB GPUs, both serving `think` at start:
/// a chat for the parked `vision` model with a budget shorter than a switch is answered 503 with
/// `Retry-After` at once, its demand moves a GPU anyway, and the same chat with a budget is
/// answered by the vision server the switch started; a lease taken through the CLI shrinks
/// what the model pool may load; the ledger never books a GPU beyond its size, and each lane
/// server's lease lives exactly as long as the server.
#[test]
fn real_llama_servers_share_a_simulated_two_gpu_fleet() {
    let Some((server, model)) = llama() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, pool_port, port) =
        (free_ports(2), free_ports(2), free_ports(2), free_port());
    let pooled = serde_json::to_string(&[
        server.as_str(),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "-m",
        &model,
        "--alias",
        "pooled",
        "-t",
        "1",
        "-c",
        "512",
    ])
    .unwrap();
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 50\nhealth_interval_s = 1.0\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [1000, 1000]\n\
         [allocator]\ngpus = [0, 1]\ninitial = [\"think\", \"think\"]\ntick_s = 0.2\nmin_dwell_s = 0\n\
         hysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\nretry_backoff_s = 0.05\n\
         [coordinator.pool]\nmargin_mb = 0\nport_min = {pool_port}\nport_max = {}\nstart_timeout_s = 120\n\
         [[coordinator.pool.model]]\nname = \"pooled\"\ncommand = {pooled}\nvram_mb = 300\n\n{}{}",
        pool_port + 1,
        llama_lane("think", think_port, &server, &model),
        llama_lane("vision", vision_port, &server, &model),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    let instances = [
        ("think", think_port),
        ("think-gpu1", think_port + 1),
        ("vision", vision_port),
        ("vision-gpu1", vision_port + 1),
    ];
    wait_for("both think servers", Duration::from_secs(120), || {
        listening(think_port) && listening(think_port + 1)
    });
    wait_for("the coordinator", Duration::from_secs(30), || {
        listening(port)
    });
    check_ledger(&path, &instances);

    // The parked model with a budget shorter than a switch: 503 + Retry-After, at once.
    let (code, retry_after, v) = chat_via(&base, "vision-model", 0.1);
    assert_eq!(code, 503, "{v}\n{}", log());
    assert_eq!(v["error"]["code"], "model_loading", "{v}");
    assert!(retry_after.is_some(), "{v}");
    // Its demand moves one GPU; the same request with a budget is answered by real vision.
    let (code, _, v) = chat_via(&base, "vision-model", 120.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    assert_eq!(v["model"], "vision-model", "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    assert!(
        listening(vision_port) || listening(vision_port + 1),
        "{}",
        log()
    );
    for k in 0..2 {
        assert!(
            !(listening(think_port + k) && listening(vision_port + k)),
            "GPU {k} runs both lanes' servers"
        );
    }
    check_ledger(&path, &instances);

    // The ledger leaves the pool 400 MB on each GPU, where a 300 MB model fits (split over both
    // GPUs, even with 200 MB left on each) until another process books 350 MB of each through
    // the CLI. (The simulated GPUs hold what runs there, their driver's 300 MB and each lane
    // server's 600: by what they report, 100 MB is free on each, too little as well. Nothing is
    // loaded either way.)
    for gpu in [0, 1] {
        let out = common::acquire_lease(&path, "train:e2e", gpu, 350);
        assert!(out.status.success(), "{out:?}");
    }
    let (code, _, v) = chat_via(&base, "pooled", 5.0);
    assert_eq!(code, 503, "the pool took leased memory: {v}\n{}", log());
    let booked = check_ledger(&path, &instances);
    assert!(!booked.iter().any(|l| l.0.contains("pooled")), "{booked:?}");
    // Through the switches, the plan, the leases and the memory used agreed.
    common::assert_gpu_view_held(&common::curl_text(&format!("{base}/metrics")).1);
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("every lane server gone", Duration::from_secs(30), || {
        instances.iter().all(|(_, p)| !listening(*p))
    });
    let left = leases(&path);
    assert!(
        left.iter().all(|l| l.0 == "train:e2e"),
        "lane leases outlived their servers: {left:?}"
    );
}

/// Memory a process outside HOROS takes on the GPU (read from the GPU, here a simulated one)
/// closes the gate: a switch whose server would not fit beside it fails, and nothing is done
/// behind its back (the vision jobs wait, no vision server runs or books memory); the lane it
/// left comes back, its memory still free beside the foreign process. The simulated GPU holds
/// what runs there: the driver's 300 MB, think's server's 500 MB, then the foreign 850 MB, so
/// vision's 900 MB does not fit once think's server is gone (850 MB free).
#[test]
fn a_foreign_process_using_the_gpu_closes_the_gate() {
    const TEST: &str = "a_foreign_process_using_the_gpu_closes_the_gate";
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port) = (free_port(), free_port());
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [2000]\n\
         [[gpus.simulated_process]]\ngpu = 0\nmb = 850\nat_ms = 5000\nname = \"train\"\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         backlog_time_constant_s = 0.2\n\n{}{}",
        fake_lane("think", think_port, TEST)
            .replace("job_s = 0.1\n", "job_s = 1.0\nvram_mb = 500\n"),
        fake_lane("vision", vision_port, TEST)
            .replace("job_s = 0.1\n", "job_s = 1.0\nvram_mb = 900\n"),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the think server", Duration::from_secs(60), || {
        listening(think_port)
    });
    // It appears 5 s after start-up: after think's server started and booked its memory.
    wait_for("the foreign process", Duration::from_secs(30), || {
        log().contains("simulated process takes GPU memory")
    });
    let vision = fake_jobs(&queue, "vision", 100);
    wait_for("the failed switch", Duration::from_secs(60), || {
        log().contains("action=\"switch_failed\"")
    });
    let l = log();
    assert!(
        l.contains("no GPU memory for lane:vision") && l.contains("actual"),
        "{l}"
    );
    wait_for("think's server back", Duration::from_secs(30), || {
        listening(think_port)
    });
    assert!(!listening(vision_port), "{}", log());
    let booked = leases(&path);
    assert!(
        booked.iter().all(|b| b.0 == "lane:think"),
        "vision's memory booked beside the foreign process: {booked:?}"
    );
    assert!(
        !all_done(&queue, &vision[..1]),
        "a vision job ran with the gate closed"
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
}

fn fifo_swaps(first: &str, trace: &[&str]) -> usize {
    let mut at = first;
    let mut swaps = 0;
    for lane in trace {
        if *lane != at {
            swaps += 1;
            at = lane;
        }
    }
    swaps
}

/// The A B A A C trace (issue 35; llama-swap's #612) through the binary: one GPU, three lanes,
/// the jobs arriving A B A A C while A serves. FIFO makes three swaps (A -> B -> A -> C); the
/// allocator serves A's three jobs first, then B, then C: two swaps, and no job waits past the
/// maximum wait (`max_wait_s`: every job done within it of its arrival). The starvation margin is
/// 1 s and a job is a second of work: with the default 60 s margin, more than the bound, every
/// waiting class counted as starving from its first moment and the starvation rule alone
/// decided, in the lanes' order (a lane with a job ready could lose the GPU to the next: a
/// third swap, 2 runs in 12 under the load of the whole test binary).
#[test]
fn the_a_b_a_a_c_trace_makes_fewer_swaps_than_fifo_and_no_job_waits_past_its_maximum() {
    const TEST: &str =
        "the_a_b_a_a_c_trace_makes_fewer_swaps_than_fifo_and_no_job_waits_past_its_maximum";
    const MAX_WAIT_S: u64 = 30;
    horos_fakeai::run_child_if_requested();
    // A job is a second of work to the allocator: one job pays for a 0.2 s swap, so the
    // switches are the improving moves', not the starvation rule's.
    let worth_a_switch =
        |queue: &str, port: u16| fake_lane(queue, port, TEST).replace("job_s = 0.1", "job_s = 1.0");
    let dir = tempfile::tempdir().unwrap();
    let (a_port, b_port, c_port, coord_port) = (free_port(), free_port(), free_port(), free_port());
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nhealth_interval_s = 1.0\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\n\
         max_wait_s = {MAX_WAIT_S}\nstarvation_margin_s = 1\ninitial = [\"a\"]\n\
         [coordinator]\nbind = \"127.0.0.1:{coord_port}\"\n\n{}{}{}",
        worth_a_switch("a", a_port),
        worth_a_switch("b", b_port),
        worth_a_switch("c", c_port),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let base = format!("http://127.0.0.1:{coord_port}");
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the a server", Duration::from_secs(60), || {
        listening(a_port)
    });

    // The trace arrives at once (one transaction: no tick sees half of it).
    let trace = ["a", "b", "a", "a", "c"];
    let arrived = std::time::Instant::now();
    let ids: Vec<i64> = queue
        .transaction(|tx| {
            trace
                .iter()
                .enumerate()
                .map(|(i, lane)| {
                    let job = squeueha::NewJob::json(&json!({"model": "fake-model",
                        "messages": [{"role": "user", "content": format!("{lane} job {i}")}]}))?;
                    Ok(tx.enqueue(lane, job)?.id())
                })
                .collect::<Result<Vec<i64>, squeueha::Error>>()
        })
        .unwrap();
    wait_for("the trace served", Duration::from_secs(MAX_WAIT_S), || {
        all_done(&queue, &ids)
    });
    let served_s = arrived.elapsed().as_secs_f64();
    assert!(served_s < MAX_WAIT_S as f64, "{served_s} s");
    let switched = || {
        decisions(&base)
            .into_iter()
            .filter(|(a, _)| a == "switched")
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
    };
    let fifo = fifo_swaps("a", &trace);
    assert_eq!(fifo, 3);
    // A switch is in the decision log at the executor's next tick.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while switched().len() < 2 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = switched();
    eprintln!("decisions: {:?}", decisions(&base));
    assert_eq!(done.len(), 2, "{:?}\n{}", decisions(&base), log());
    assert!(done.len() < fifo, "{done:?}\n{}", log());
    assert!(done[0].starts_with("a -> "), "{done:?}");
    assert!(!done.iter().any(|r| r.contains("-> a")), "{done:?}");
    // Nothing more happens: no third swap.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(switched().len(), 2, "{:?}", switched());
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("the servers gone", Duration::from_secs(10), || {
        !listening(a_port) && !listening(b_port) && !listening(c_port)
    });
}
