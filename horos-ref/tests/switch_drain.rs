//! A switch never cuts a coordinator request: the allocator moves the GPU from the lane `think`
//! to `vision` (eight jobs wait there) while a chat for `think-model` runs on think's server
//! (2.5 s a request); the GPU leaves think only once that request has been answered, so it is
//! answered on its first attempt (no retry counted) and the vision jobs are all done after.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{
    chat_via, curl_text, fake_server_command, free_port, listening, spawn_run, stop, wait_for,
};
use serde_json::json;
use squeueha::{JobState, NewJob, Queue};

const TEST: &str = "a_switch_waits_for_the_coordinators_request_on_the_leaving_lane";

#[test]
fn a_switch_waits_for_the_coordinators_request_on_the_leaving_lane() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let (think_port, vision_port, port) = (free_port(), free_port(), free_port());
    let lane = |queue: &str, lane_port: u16, latency_ms: &str| {
        format!(
            "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{lane_port}\"\n\
             model = \"{queue}-model\"\nbatch_size = 4\nstart_wait_s = 30\nswap_in_s = 0.2\n\
             job_s = 0.1\ncommand = {}\n",
            fake_server_command(
                TEST,
                &[
                    "--port",
                    "{port}",
                    "--slots",
                    "4",
                    "--latency-ms",
                    latency_ms
                ]
            )
        )
    };
    let config = format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\nretry_backoff_s = 0.05\n\
         [allocator]\ntick_s = 0.1\nmin_dwell_s = 0\nhysteresis_s = 0\nhorizon_s = 60\n\
         max_wait_s = 60\n\n{}{}",
        lane("think", think_port, "2500"),
        lane("vision", vision_port, "0"),
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

    // A chat on think's server, then work for vision that moves the GPU.
    let chat = {
        let base = base.clone();
        std::thread::spawn(move || chat_via(&base, "think-model", 60.0))
    };
    // Only once think's server runs it does vision's work arrive (the allocator, with no dwell,
    // would otherwise move the GPU before the chat got there).
    wait_for(
        "the chat on think's server",
        Duration::from_secs(30),
        || {
            curl_text(&format!("http://127.0.0.1:{think_port}/metrics"))
                .1
                .lines()
                .any(|l| l.starts_with("vllm:num_requests_running{") && l.ends_with(" 1"))
        },
    );
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let jobs: Vec<NewJob> = (0..8)
        .map(|i| {
            NewJob::json(&json!({"model": "vision-model",
                "messages": [{"role": "user", "content": format!("vision job {i}")}]}))
            .unwrap()
        })
        .collect();
    let ids: Vec<i64> = queue
        .enqueue_batch("vision", &jobs)
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();

    let (code, _, v) = chat.join().unwrap();
    assert_eq!(code, 200, "{v}\n{}", log());
    assert_eq!(
        v["choices"][0]["message"]["content"], "hello think-model",
        "{v}"
    );
    wait_for("the vision jobs", Duration::from_secs(60), || {
        ids.iter().all(|id| {
            queue
                .get(*id)
                .unwrap()
                .is_none_or(|j| j.state == JobState::Done)
        })
    });
    assert!(
        listening(vision_port) && !listening(think_port),
        "{}",
        log()
    );
    // Answered on its first attempt: the server was not stopped under it.
    let metrics = std::process::Command::new("curl")
        .args(["-s", &format!("{base}/metrics")])
        .output()
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.stdout).into_owned();
    let retries: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("horos_coordinator_retries_total{") && l.contains("think-model"))
        .collect();
    assert_eq!(retries.len(), 1, "{metrics}");
    assert!(retries[0].ends_with(" 0"), "{}\n{}", retries[0], log());
    assert!(stop(&mut run.0, libc::SIGTERM).success());
}
