//! `[allocator.pool]`: the models loaded on demand are one more mode of the allocator's plan.
//! On a simulated fleet of two 2,000 MB GPUs (300 MB of each taken by the driver), the lanes
//! `think` and `vision` (1,200 MB each) serve one GPU each, so neither has room for the pooled
//! model `mid` (1,650 MB, even split over the 800 MB each leaves). A chat for it waits for
//! room, the waiting request is the pool's demand, and the allocator gives the pool a GPU (the
//! lane's server there stopped; the idle lanes may give both): the chat is answered. Then `big`
//! (3,000 MB, more than one GPU holds) is asked for: with both GPUs in the pool it is loaded
//! split over them, its server told its shares. Think work then brings a GPU back to its lane.
//! The ledger never books more than a GPU holds, lane servers run exactly where their lane is
//! served, and every switch is a decision on the status API with its reason.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    chat_via, fake_server_command, free_port, free_ports, leases, listening, spawn_run, stop,
    wait_for,
};
use squeueha::Queue;

const TEST: &str = "the_model_pool_is_a_mode_the_allocator_gives_gpus_to";

/// `(gpu, what it serves)` from the status API's modes board.
fn modes(base: &str) -> Vec<(u64, String)> {
    let (_, v) = common::curl("GET", &format!("{base}/api/v1/status"), None, None);
    let mut m: Vec<(u64, String)> = v["modes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| Some((m["gpu"].as_u64()?, m["mode"].as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    m.sort();
    m
}

/// MB booked per GPU never above its 2,000.
fn check_ledger(config: &std::path::Path) -> Vec<(String, u64, u64)> {
    let l = leases(config);
    for gpu in 0..2 {
        let booked: u64 = l.iter().filter(|x| x.1 == gpu).map(|x| x.2).sum();
        assert!(booked <= 2000, "GPU {gpu}: {booked} MB booked: {l:?}");
    }
    l
}

#[test]
fn the_model_pool_is_a_mode_the_allocator_gives_gpus_to() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, pool_port, port) =
        (free_ports(2), free_ports(2), free_ports(4), free_port());
    let lane = |queue: &str, lane_port: u16| {
        format!(
            "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{lane_port}\"\n\
             model = \"{queue}-model\"\nbatch_size = 4\nstart_wait_s = 30\nswap_in_s = 0.2\n\
             job_s = 1.0\nvram_mb = 1200\ncommand = {}\n",
            fake_server_command(TEST, &["--port", "{port}", "--slots", "4"])
        )
    };
    let pooled = |name: &str, mb: u64| {
        // The server's command line gets its shares ({tensor_split}: MB per GPU); the fake
        // writes them to NAME.split before it starts.
        let command = fake_server_command(TEST, &["--port", "{port}", "--model", name]).replace(
            "exec env ",
            &format!(
                "echo {{tensor_split}} > {}/{name}.split; exec env ",
                dir.path().display()
            ),
        );
        format!(
            "[[coordinator.pool.model]]\nname = \"{name}\"\ncommand = {command}\nvram_mb = {mb}\n"
        )
    };
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [2000, 2000]\ninterval_ms = 100\n\
         [allocator]\ngpus = [0, 1]\ninitial = [\"think\", \"vision\"]\ntick_s = 0.1\n\
         min_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         backlog_time_constant_s = 0.2\n\
         [allocator.pool]\nswap_in_s = 0.5\njob_s = 5.0\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\ndefault_budget_s = 100.0\n\
         [coordinator.pool]\nmargin_mb = 0\nport_min = {pool_port}\nport_max = {}\n\
         {}{}\n{}{}",
        pool_port + 3,
        pooled("mid", 1650) + "stay_warm_s = 1\n",
        pooled("big", 3000),
        lane("think", think_port),
        lane("vision", vision_port),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    wait_for(
        "the lanes and the coordinator",
        Duration::from_secs(60),
        || listening(think_port) && listening(vision_port + 1) && listening(port),
    );
    wait_for("the initial modes", Duration::from_secs(10), || {
        modes(&base) == [(0, "think".to_owned()), (1, "vision".to_owned())]
    });
    check_ledger(&path);

    // `mid` fits on neither GPU beside a lane: its chat waits, and the pool is given a GPU
    // (here both may go: the lanes have no work, and idle GPUs go to a mode that has some).
    let (code, _, v) = chat_via(&base, "mid", 100.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    wait_for(
        "the status to show the pool",
        Duration::from_secs(10),
        || modes(&base).iter().any(|(_, mode)| mode == "pool"),
    );
    let l = check_ledger(&path);
    let mid: u64 = l.iter().filter(|x| x.0 == "pool:mid").map(|x| x.2).sum();
    assert_eq!(mid, 1650, "{l:?}");
    // A lane's server runs on a GPU exactly while that GPU serves the lane.
    let servers_follow_modes = || {
        let m = modes(&base);
        m.len() == 2
            && m.iter().all(|(gpu, mode)| {
                let gpu = *gpu as u16;
                listening(think_port + gpu) == (mode == "think")
                    && listening(vision_port + gpu) == (mode == "vision")
            })
    };
    wait_for(
        "lane servers to follow the modes",
        Duration::from_secs(10),
        servers_follow_modes,
    );

    // `big` needs more than one GPU: the pool gets the other one too, and `big` is split.
    // `mid` stays warm 1 s after its chat, then gives its room back.
    let (code, _, v) = chat_via(&base, "big", 100.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    wait_for(
        "the status to show both GPUs in the pool",
        Duration::from_secs(10),
        || modes(&base) == [(0, "pool".to_owned()), (1, "pool".to_owned())],
    );
    wait_for(
        "lane servers to follow the modes",
        Duration::from_secs(10),
        servers_follow_modes,
    );
    let l = check_ledger(&path);
    let big: Vec<_> = l.iter().filter(|x| x.0.contains("big")).collect();
    assert_eq!(big.len(), 2, "big booked on both GPUs: {l:?}");
    let shares: Vec<u64> = big.iter().map(|x| x.2).collect();
    assert_eq!(shares.iter().sum::<u64>(), 3000, "{l:?}");
    let split = std::fs::read_to_string(dir.path().join("big.split")).unwrap();
    assert_eq!(
        split.trim(),
        shares
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
        "big's server is told its shares"
    );

    // Think work: a GPU comes back to its lane (the pool's idle models give way) and the jobs
    // are done.
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let ids = common::chat_jobs(&queue, "think", "think-model", 40);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        check_ledger(&path);
        let done = common::jobs_done(&queue, &ids);
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the think jobs were not done: {:?} {:?}\n{}",
            modes(&base),
            leases(&path),
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for("a GPU back on think", Duration::from_secs(10), || {
        modes(&base).iter().any(|(_, m)| m == "think")
    });
    wait_for(
        "lane servers to follow the modes",
        Duration::from_secs(10),
        servers_follow_modes,
    );

    // Every switch is a decision with its reason, to the pool and back.
    let (_, status) = common::curl("GET", &format!("{base}/api/v1/status"), None, None);
    let reasons: Vec<String> = status["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "switch")
        .filter_map(|d| d["reason"].as_str().map(str::to_owned))
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("pool")),
        "a switch to the pool: {reasons:?}"
    );
    // Through every switch, the GPU view's auditor found the plan and the leases agreeing (a
    // switch caught half-way is not a breach: only one held across two audits counts).
    let (_, metrics) = common::curl_text(&format!("{base}/metrics"));
    common::assert_gpu_view_held(&metrics);
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    assert!(!log().contains("panicked"), "{}", log());
}
