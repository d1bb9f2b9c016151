//! The lanes' plan outranks idle pooled models: on one simulated 1,300 MB GPU (300 MB of it the
//! driver's, 1,000 MB to book), the lane `think` (400 MB) serves and the pool has loaded `pooled`
//! (500 MB) for a chat; work for the lane `vision` (600 MB) moves the GPU, and vision's server
//! finds 100 MB too little. The idle pooled model is unloaded to make room (logged), vision
//! starts and its jobs are done, and the ledger never books more than the GPU leaves free.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{
    chat_via, fake_server_command, free_port, free_ports, leases, listening, spawn_run, stop,
    wait_for,
};
use squeueha::Queue;

const TEST: &str = "an_idle_pooled_model_gives_way_to_the_lane_the_gpu_switches_to";

#[test]
fn an_idle_pooled_model_gives_way_to_the_lane_the_gpu_switches_to() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, pool_port, port) =
        (free_port(), free_port(), free_ports(2), free_port());
    let lane = |queue: &str, lane_port: u16, mb: u64| {
        format!(
            "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{lane_port}\"\n\
             model = \"{queue}-model\"\nbatch_size = 4\nstart_wait_s = 30\nswap_in_s = 0.2\n\
             job_s = 0.1\nvram_mb = {mb}\ncommand = {}\n",
            fake_server_command(TEST, &["--port", "{port}", "--slots", "4"])
        )
    };
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\
         [gpus]\nsource = \"simulated\"\nsimulated_mb = [1300]\ninterval_ms = 100\n\
         [allocator]\ngpus = [0]\ninitial = [\"think\"]\ntick_s = 0.1\nmin_dwell_s = 0\n\
         hysteresis_s = 0\nhorizon_s = 60\nmax_wait_s = 60\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\n\
         [coordinator.pool]\nmargin_mb = 0\nport_min = {pool_port}\nport_max = {}\n\
         [[coordinator.pool.model]]\nname = \"pooled\"\ncommand = {}\nvram_mb = 500\n\n{}{}",
        pool_port + 1,
        fake_server_command(TEST, &["--port", "{port}", "--model", "pooled"]),
        lane("think", think_port, 400),
        lane("vision", vision_port, 600),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    wait_for("think and the coordinator", Duration::from_secs(60), || {
        listening(think_port) && listening(port)
    });
    let (code, _, v) = chat_via(&base, "pooled", 300.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    let booked: u64 = leases(&path).iter().map(|l| l.2).sum();
    assert_eq!(booked, 900, "think 400 + pooled 500: {:?}", leases(&path));

    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let ids = common::chat_jobs(&queue, "vision", "vision-model", 6);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let booked: u64 = leases(&path).iter().map(|l| l.2).sum();
        assert!(booked <= 1000, "over-booked: {:?}", leases(&path));
        let done = common::jobs_done(&queue, &ids);
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the vision jobs were not done: {:?}\n{}",
            leases(&path),
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        log().contains("unloaded an idle pooled model to make room for a lane's server"),
        "{}",
        log()
    );
    let owners: Vec<String> = leases(&path).into_iter().map(|l| l.0).collect();
    assert!(
        owners.iter().all(|o| !o.contains("pooled")),
        "the pooled model's memory was given back: {owners:?}"
    );
    assert!(listening(vision_port) && !listening(think_port));
    assert!(stop(&mut run.0, libc::SIGTERM).success());
}
