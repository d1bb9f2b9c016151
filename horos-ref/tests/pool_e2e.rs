//! `[coordinator.pool]` end to end with REAL llama-servers: the binary's coordinator loads a
//! model when a request needs it, evicts an idle, less important one when the memory budget is
//! short, unloads a model whose stay-warm time is over, and stops every server it started when it
//! exits. Needs `HOROS_LLAMA_SERVER`, `HOROS_SMOLLM2_GGUF` and `HOROS_MINILM_GGUF`
//! (scripts/setup_llama.sh); skips without them unless HOROS_REQUIRE_LLAMA=1.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{free_port, free_ports, spawn_run, stop, wait_for};
use horos_gpu_alloc::pool::SlotState;
use serde_json::{Value, json};

/// `(HTTP status, JSON body)` of a request.
fn call(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    common::curl(method, url, body, None)
}

struct Llama {
    server: String,
    smollm2: String,
    minilm: String,
}

fn llama() -> Option<Llama> {
    let var = |k: &str| std::env::var(k).ok().filter(|p| Path::new(p).exists());
    match (
        var("HOROS_LLAMA_SERVER"),
        var("HOROS_SMOLLM2_GGUF"),
        var("HOROS_MINILM_GGUF"),
    ) {
        (Some(server), Some(smollm2), Some(minilm)) => Some(Llama {
            server,
            smollm2,
            minilm,
        }),
        _ => {
            common::skip_or_fail(
                "HOROS_REQUIRE_LLAMA",
                "no llama-server / SmolLM2 / MiniLM (scripts/setup_llama.sh, then source its env file)",
            );
            None
        }
    }
}

/// `model`'s slot state on the coordinator's JSON status (IDLE when it has none).
fn state(base: &str, model: &str) -> SlotState {
    serde_json::from_value(common::status_slot(base, model)["state"].clone())
        .unwrap_or(SlotState::Idle)
}

/// Pids of llama-servers serving `gguf` on a port of `ports` (other tests run servers of the
/// same models at the same time).
fn servers_of(gguf: &str, ports: std::ops::RangeInclusive<u16>) -> Vec<i32> {
    common::llama_servers()
        .into_iter()
        .filter(|(_, args)| {
            args.iter().any(|a| a == gguf)
                && common::port_arg(args).is_some_and(|p| ports.contains(&p))
        })
        .map(|(pid, _)| pid)
        .collect()
}

fn chat(base: &str, priority: i32) -> (u16, Value) {
    call(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&json!({
            "model": "smollm2", "max_tokens": 8, "x_priority": priority, "x_timeout_s": 150,
            "messages": [{"role": "user", "content": "Say hello."}]
        })),
    )
}

fn embed(base: &str, priority: i32) -> (u16, Value) {
    call(
        "POST",
        &format!("{base}/v1/embeddings"),
        Some(
            &json!({"model": "minilm", "input": ["a pooled model"], "x_priority": priority,
                     "x_timeout_s": 150}),
        ),
    )
}

#[test]
fn the_pool_loads_evicts_and_unloads_real_servers_on_demand() {
    let Some(llama) = llama() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_ports = free_ports(4);
    let ports = pool_ports..=pool_ports + 3;
    let base = format!("http://127.0.0.1:{port}");
    let model = |name: &str, gguf: &str, extra: &str, flags: &[&str]| {
        let mut cmd = vec![
            llama.server.as_str(),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "-m",
            gguf,
            "--alias",
            name,
            "-t",
            "1",
        ];
        cmd.extend_from_slice(flags);
        format!(
            "[[coordinator.pool.model]]\nname = \"{name}\"\ncommand = {}\nvram_mb = 600\n{extra}\n",
            serde_json::to_string(&cmd).unwrap()
        )
    };
    // A budget of 1,000 MB: either model fits (600 MB each), never both.
    let config = format!(
        "database = \"jobs.db\"\n[coordinator]\nbind = \"127.0.0.1:{port}\"\ndefault_budget_s = 150\n\
         [coordinator.pool]\nmemory_mb = 1000\nmargin_mb = 0\nport_min = {pool_ports}\nport_max = {}\n\
         start_timeout_s = 120\n\n{}{}",
        pool_ports + 3,
        model(
            "smollm2",
            &llama.smollm2,
            "category = \"llm\"",
            &["-c", "2048"]
        ),
        model(
            "minilm",
            &llama.minilm,
            "category = \"embedding\"\nstay_warm_s = 2",
            &["--embeddings", "-c", "512", "-b", "512", "-ub", "512"]
        ),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    wait_for("the coordinator", Duration::from_secs(30), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });

    // Nothing runs until asked for; both are listed.
    let (code, models) = call("GET", &format!("{base}/v1/models"), None);
    assert_eq!(code, 200);
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"smollm2") && ids.contains(&"minilm"),
        "{models}"
    );
    assert!(
        servers_of(&llama.smollm2, ports.clone()).is_empty()
            && servers_of(&llama.minilm, ports.clone()).is_empty()
    );

    // A chat loads SmolLM2 and is answered by it.
    let (code, answer) = chat(&base, 5);
    assert_eq!(code, 200, "{answer}");
    assert!(
        answer["choices"][0]["message"]["content"].is_string(),
        "{answer}"
    );
    // (The status is a snapshot the control plane refreshes about once a second.)
    wait_for(
        "SmolLM2 READY on the status",
        Duration::from_secs(10),
        || state(&base, "smollm2") == SlotState::Ready,
    );
    assert_eq!(servers_of(&llama.smollm2, ports.clone()).len(), 1);

    // A more important embedding request: SmolLM2 (idle, less important) is evicted and its
    // server stopped before MiniLM's starts.
    let (code, emb) = embed(&base, 1);
    assert_eq!(code, 200, "{emb}");
    assert_eq!(emb["data"][0]["embedding"].as_array().unwrap().len(), 384);
    wait_for("MiniLM READY, SmolLM2 not", Duration::from_secs(10), || {
        state(&base, "minilm") == SlotState::Ready && state(&base, "smollm2") != SlotState::Ready
    });
    assert!(
        servers_of(&llama.smollm2, ports.clone()).is_empty(),
        "the evicted server still runs"
    );
    let (_, metrics) = {
        let out = Command::new("curl")
            .args(["-s", &format!("{base}/metrics")])
            .output()
            .unwrap();
        (0, String::from_utf8_lossy(&out.stdout).to_string())
    };
    let swaps: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("horos_coordinator_model_swaps_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(swaps >= 1.0, "no swap counted:\n{metrics}");

    // MiniLM's stay-warm time (2 s) runs out: it is unloaded, and SmolLM2 at its usual priority
    // loads again without evicting anything.
    // Idle, not merely no longer ready: a stopping slot's server may still be running.
    wait_for("MiniLM unloaded", Duration::from_secs(30), || {
        state(&base, "minilm") == SlotState::Idle
    });
    wait_for("MiniLM's server ended", Duration::from_secs(10), || {
        servers_of(&llama.minilm, ports.clone()).is_empty()
    });
    let (code, answer) = chat(&base, 5);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(servers_of(&llama.smollm2, ports.clone()).len(), 1);

    // At exit, nothing the pool started is left running.
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    assert!(
        servers_of(&llama.smollm2, ports.clone()).is_empty()
            && servers_of(&llama.minilm, ports.clone()).is_empty(),
        "servers left running after exit"
    );
}
