//! Helpers of `allocator_e2e.rs`: the lanes' TOML (real llama-servers, fake servers), jobs
//! submitted and followed, the allocator's decisions from the status API, a server's GPUs and
//! the VRAM ledger.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use squeueha::{JobState, NewJob, Queue};

use crate::common::{self, leases, listening};

pub fn llama() -> Option<(String, String)> {
    let var = |k: &str| std::env::var(k).ok().filter(|p| Path::new(p).exists());
    match (var("HOROS_LLAMA_SERVER"), var("HOROS_SMOLLM2_GGUF")) {
        (Some(server), Some(model)) => Some((server, model)),
        _ => {
            common::skip_or_fail(
                "HOROS_REQUIRE_LLAMA",
                "no llama-server / SmolLM2 (scripts/setup_llama.sh, then source its env file)",
            );
            None
        }
    }
}

pub fn lane(queue: &str, port: u16, server: &str, model: &str) -> String {
    let cmd = [
        server,
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "-m",
        model,
        "--alias",
        "smollm2",
        "-t",
        "1",
        "-np",
        "4",
        "-c",
        "2048",
    ];
    format!(
        "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"smollm2\"\n\
         batch_size = 4\nstart_wait_s = 120\nswap_in_s = 1.0\njob_s = 0.5\ncommand = {}\n",
        serde_json::to_string(&cmd).unwrap()
    )
}

pub fn submit(queue: &Queue, lane: &str, n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| {
            let request = json!({"model": "smollm2", "max_tokens": 4, "temperature": 0.0,
                "messages": [{"role": "user", "content": format!("{lane} job {i}: say hi.")}]});
            queue
                .enqueue(lane, NewJob::json(&request).unwrap())
                .unwrap()
                .id()
        })
        .collect()
}

pub fn all_done(queue: &Queue, ids: &[i64]) -> bool {
    ids.iter().all(|id| {
        queue
            .get(*id)
            .unwrap()
            .is_none_or(|j| j.state == JobState::Done)
    })
}

/// `(action, reason)` of the decisions on the status page, oldest first.
pub fn decisions(base: &str) -> Vec<(String, String)> {
    let out = Command::new("curl")
        .args(["-s", &format!("{base}/api/v1/status")])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut d: Vec<(String, String)> = v["decisions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| d["model"] == "gpu0")
                .map(|d| {
                    (
                        d["action"].as_str().unwrap_or("").to_owned(),
                        d["reason"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    d.reverse();
    d
}

/// A lane whose server is this test binary re-executed as a fake OpenAI server on `port`.
pub fn fake_lane(queue: &str, port: u16, test: &str) -> String {
    let cmd = common::fake_server_command(test, &["--port", "{port}", "--slots", "4"]);
    format!(
        "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"fake-model\"\n\
         batch_size = 4\nstart_wait_s = 30\nswap_in_s = 0.2\njob_s = 0.1\ncommand = {cmd}\n"
    )
}

/// A fake lane serving `{queue}-model`, one job being 1 s of work.
pub fn model_lane(queue: &str, port: u16, test: &str) -> String {
    fake_lane(queue, port, test)
        .replace(
            "model = \"fake-model\"",
            &format!("model = \"{queue}-model\""),
        )
        .replace("job_s = 0.1", "job_s = 1.0")
}

/// `n` chat jobs for `lane`, enqueued at once (one transaction: the backlog appears whole).
pub fn fake_jobs(queue: &Queue, lane: &str, n: usize) -> Vec<i64> {
    common::chat_jobs(queue, lane, "fake-model", n)
}

/// `CUDA_VISIBLE_DEVICES` of the server instance `name` (from its pidfile and /proc).
pub fn visible_devices(dir: &Path, name: &str) -> Option<String> {
    let record = std::fs::read(dir.join("jobs.run").join(format!("{name}.pid"))).ok()?;
    let pid = serde_json::from_slice::<Value>(&record).ok()?["pid"].as_i64()?;
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix("CUDA_VISIBLE_DEVICES=").map(str::to_owned)
    })
}

/// The ledger books no GPU beyond its 1,000 MB, and a lane server's lease exists exactly while
/// its instance runs. The two are read one after the other, and a server restarted by its
/// supervisor (a health check missed on a loaded machine) keeps its lease while its port is
/// closed: they are read again, for up to 15 s, until they agree.
pub fn check_ledger(config: &Path, ports: &[(&str, u16)]) -> Vec<(String, u64, u64)> {
    let agree = |l: &[(String, u64, u64)]| {
        ports.iter().enumerate().all(|(k, &(name, port))| {
            let owner = format!("lane:{name}");
            let gpu = (k % 2) as u64;
            l.iter().any(|x| x.0 == owner && x.1 == gpu && x.2 == 600) == listening(port)
        })
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut l = leases(config);
    while !agree(&l) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(200));
        l = leases(config);
    }
    for gpu in 0..2 {
        let booked: u64 = l.iter().filter(|x| x.1 == gpu).map(|x| x.2).sum();
        assert!(
            booked <= 1000,
            "GPU {gpu}: {booked} MB booked of 1,000: {l:?}"
        );
    }
    for (k, &(name, port)) in ports.iter().enumerate() {
        let gpu = (k % 2) as u64;
        let owner = format!("lane:{name}");
        let booked = l.iter().any(|x| x.0 == owner && x.1 == gpu && x.2 == 600);
        assert_eq!(
            booked,
            listening(port),
            "{owner}'s lease on GPU {gpu} and its server's state differ: {l:?}"
        );
    }
    l
}

/// A lane whose servers are real llama-servers serving SmolLM2 as `{queue}-model`, one per GPU
/// instance (the port is each instance's), booking `vram_mb` while they run.
pub fn llama_lane(queue: &str, port: u16, server: &str, model: &str) -> String {
    let cmd = serde_json::to_string(&[
        server,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "-m",
        model,
        "--alias",
        &format!("{queue}-model"),
        "-t",
        "1",
        "-np",
        "2",
        "-c",
        "1024",
    ])
    .unwrap();
    format!(
        "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"{queue}-model\"\n\
         batch_size = 4\nstart_wait_s = 120\nswap_in_s = 1.0\njob_s = 1.0\nvram_mb = 600\ncommand = {cmd}\n"
    )
}
