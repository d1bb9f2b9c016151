//! `[coordinator.pool]`'s models asleep, through the binary: a model evicted for another is put
//! to sleep (its server still runs, asleep) instead of stopped, the next request for it wakes it
//! where it slept, a request whose budget the wake does not fit is answered 503 with the
//! *measured* wake time, `/metrics` counts the wake apart from the loads, and the measured
//! swaps are kept in the ledger's file: a restarted `horos-ref run` answers from them. The
//! servers are fakeai processes with vLLM's sleep API (their command says
//! `--enable-sleep-mode`, as vLLM's would), taking 3 s to start and 1.5 s to wake.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{free_port, free_ports, listening, spawn_run, stop, wait_for};
use horos_gpu_alloc::allocator::SwapKind;
use horos_gpu_alloc::catalogue::SleepLevel;
use horos_gpu_alloc::cost_store::CostStore;
use horos_gpu_alloc::pool::cost_key;
use serde_json::{Value, json};

const TEST: &str = "pooled_models_sleep_and_wake_and_their_measured_costs_outlive_a_restart";

fn call(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    common::curl(method, url, body, None)
}

fn chat(base: &str, model: &str, priority: i32, budget_s: f64) -> (u16, Value) {
    call(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&json!({
            "model": model, "x_priority": priority, "x_timeout_s": budget_s,
            "messages": [{"role": "user", "content": "hello"}]
        })),
    )
}

/// A pooled model `name` of 600 MB: this test binary (`test`) as a fake vLLM with sleep mode and
/// `extra` flags, its command saying `--enable-sleep-mode` as vLLM's would.
fn sleepy_model(test: &str, name: &str, extra: &[&str]) -> String {
    let mut args = vec!["--port", "{port}", "--model", name, "--enable-sleep-mode"];
    args.extend_from_slice(extra);
    let mut cmd: Vec<String> =
        serde_json::from_str(&common::fake_server_command(test, &args)).unwrap();
    // sh's $0, unused: the command line says what vLLM's would.
    cmd.push("--enable-sleep-mode".into());
    format!(
        "[[coordinator.pool.model]]\nname = \"{name}\"\ncommand = {}\nvram_mb = 600\n\n",
        serde_json::to_string(&cmd).unwrap()
    )
}

/// A configuration of a coordinator on `port` and a pool of 1,000 MB (either model of 600 MB
/// fits, never both) on ports from `pool_ports`, host RAM for both asleep at level 1.
fn config(port: u16, pool_ports: u16, models: &str) -> String {
    format!(
        "database = \"jobs.db\"\n[gpus]\nhost_memory_mb = 100000\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\ndefault_budget_s = 60\ndefault_load_s = 10\n\
         [coordinator.pool]\nmemory_mb = 1000\nmargin_mb = 0\nreclaim_delay_ms = 100\n\
         port_min = {pool_ports}\nport_max = {}\nstart_timeout_s = 60\n\n{models}",
        pool_ports + 3,
    )
}

fn metric(base: &str, line_start: &str) -> f64 {
    let (_, text) = common::curl_text(&format!("{base}/metrics"));
    text.lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn pooled_models_sleep_and_wake_and_their_measured_costs_outlive_a_restart() {
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_ports = free_ports(4);
    let base = format!("http://127.0.0.1:{port}");
    let model = |name: &str| {
        sleepy_model(
            TEST,
            name,
            &["--wake-l1-latency-ms", "1500", "--startup-delay-ms", "3000"],
        )
    };
    let config = config(port, pool_ports, &(model("a") + &model("b")));
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    wait_for("the coordinator", Duration::from_secs(30), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });

    // a loads; b, more important, needs its room: a is put to sleep, its server kept.
    let (code, v) = chat(&base, "a", 5, 60.0);
    assert_eq!(code, 200, "{v}");
    // (The status is a snapshot the control plane refreshes about once a second.)
    wait_for("a READY", Duration::from_secs(10), || {
        common::status_slot(&base, "a")["state"] == "READY"
    });
    let a_port = common::status_slot(&base, "a")["port"].as_u64().unwrap();
    let (code, v) = chat(&base, "b", 1, 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    wait_for("a asleep", Duration::from_secs(10), || {
        common::status_slot(&base, "a")["state"] == "SLEEPING"
    });
    assert_eq!(
        common::status_slot(&base, "a")["sleep_level"],
        "one",
        "{}",
        common::status_slot(&base, "a")
    );
    let (_, asleep) = call(
        "GET",
        &format!("http://127.0.0.1:{a_port}/is_sleeping"),
        None,
    );
    assert_eq!(asleep["is_sleeping"], true, "a's server runs, asleep");
    // The status page and `ps` show it asleep, and at which level.
    let (_, page) = common::curl_text(&format!("{base}/status"));
    assert!(
        page.contains("<td>a</td><td class=\"SLEEPING\">SLEEPING l1</td>"),
        "{page}"
    );
    let ps = common::output_text(&common::cli(&path, &["ps"]));
    assert!(
        ps.lines()
            .any(|l| l.starts_with("a ") && l.contains("SLEEPING l1")),
        "{ps}"
    );

    // A request for a that cannot wait for the wake: 503, ready in a wake (not a load's 3 s).
    let (code, v) = chat(&base, "a", 0, 0.5);
    assert_eq!(code, 503, "{v}");
    assert_eq!(v["error"]["code"], "model_loading", "{v}");
    assert_eq!(v["error"]["waking"], true, "{v}");
    let eta = v["error"]["estimated_ready_s"].as_f64().unwrap();
    assert!(eta < 3.0, "{v}");
    // The wake it started: a serves again on the same server, b asleep in turn.
    wait_for("a awake", Duration::from_secs(20), || {
        common::status_slot(&base, "a")["state"] == "READY"
    });
    assert_eq!(
        common::status_slot(&base, "a")["port"].as_u64(),
        Some(a_port)
    );
    let (_, awake) = call(
        "GET",
        &format!("http://127.0.0.1:{a_port}/is_sleeping"),
        None,
    );
    assert_eq!(awake["is_sleeping"], false);
    assert_eq!(common::status_slot(&base, "b")["state"], "SLEEPING");
    let (code, v) = chat(&base, "a", 0, 60.0);
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        metric(
            &base,
            "horos_coordinator_model_wake_seconds_count{model=\"a\"}"
        ),
        1.0
    );
    // The pool's swaps by kind, beside the lanes' (none here), and per model.
    assert_eq!(metric(&base, "horos_swaps_avoided_total"), 1.0);
    assert!(metric(&base, "horos_swap_seconds_total{kind=\"wake\"}") >= 1.5);
    assert_eq!(
        metric(
            &base,
            "horos_swap_seconds_count{mode=\"pool:a\",kind=\"sleep\"}"
        ),
        1.0
    );
    // The status page's Swaps section: a's measured costs, its wake among them.
    wait_for("a's wake on the status", Duration::from_secs(10), || {
        let (_, st) = call("GET", &format!("{base}/api/v1/status"), None);
        st["sections"]["swaps"]["costs"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["mode"] == "pool:a" && c["kind"] == "wake l1" && c["count"] == 1)
            })
    });
    assert!(common::promtool_accepts(
        &common::curl_text(&format!("{base}/metrics")).1
    ));

    // At exit every server the pool started, asleep or not, is stopped.
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    wait_for("every pooled server gone", Duration::from_secs(10), || {
        (pool_ports..=pool_ports + 3).all(|p| !listening(p))
    });

    // The swaps were timed into the ledger's file.
    let costs = CostStore::open(dir.path().join("vram-ledger.db"))
        .unwrap()
        .load()
        .unwrap();
    let measured = |m: &str, kind| costs.measured(&cost_key(m), 0, kind);
    assert_eq!(measured("a", SwapKind::Load).unwrap().count, 1);
    assert_eq!(
        measured("a", SwapKind::Sleep(SleepLevel::One))
            .unwrap()
            .count,
        1
    );
    let wake = measured("a", SwapKind::Wake(SleepLevel::One)).unwrap();
    assert_eq!(wake.count, 1);
    assert!(wake.mean_s >= 1.5, "{wake:?}");
    assert!(measured("a", SwapKind::Load).unwrap().mean_s >= 3.0);

    // Restarted: a asleep again answers from the wake measured by the first run (1.5 s and
    // more), not from a prior derived from the load (under a second, shown as 1 s).
    let mut run = spawn_run(&path, &dir.path().join("run2.log"));
    wait_for("the coordinator again", Duration::from_secs(30), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });
    // Before anything runs, the Swaps section shows the costs the first run measured.
    wait_for(
        "the kept costs on the status",
        Duration::from_secs(10),
        || {
            let (_, st) = call("GET", &format!("{base}/api/v1/status"), None);
            st["sections"]["swaps"]["costs"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["mode"] == "pool:a" && c["kind"] == "wake l1")
                })
        },
    );
    assert_eq!(chat(&base, "a", 5, 60.0).0, 200);
    assert_eq!(chat(&base, "b", 1, 60.0).0, 200);
    wait_for("a asleep again", Duration::from_secs(10), || {
        common::status_slot(&base, "a")["state"] == "SLEEPING"
    });
    let (code, v) = chat(&base, "a", 0, 0.5);
    assert_eq!(code, 503, "{v}");
    let eta = v["error"]["estimated_ready_s"].as_f64().unwrap();
    assert!(
        (wake.mean_s - 0.2..3.0).contains(&eta),
        "{eta} s, the wake measured {} s\n{}",
        wake.mean_s,
        std::fs::read_to_string(dir.path().join("run2.log")).unwrap_or_default()
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
}

/// A pooled model whose wake fails (its server answers 500) is stopped and loaded again: the
/// request is answered, the ledger's file has its stop and its second load, no wake.
#[test]
fn a_pooled_model_whose_wake_fails_is_loaded_again() {
    const TEST: &str = "a_pooled_model_whose_wake_fails_is_loaded_again";
    horos_fakeai::run_child_if_requested();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_ports = free_ports(4);
    let base = format!("http://127.0.0.1:{port}");
    let slow = ["--startup-delay-ms", "1000"];
    let models = sleepy_model(
        TEST,
        "c",
        &[&slow[..], &["--wake-fault", "status:500"]].concat(),
    ) + &sleepy_model(TEST, "d", &slow);
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config(port, pool_ports, &models)).unwrap();
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    wait_for("the coordinator", Duration::from_secs(30), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });
    assert_eq!(chat(&base, "c", 5, 60.0).0, 200);
    assert_eq!(chat(&base, "d", 1, 60.0).0, 200);
    wait_for("c asleep", Duration::from_secs(10), || {
        common::status_slot(&base, "c")["state"] == "SLEEPING"
    });
    let (code, v) = chat(&base, "c", 0, 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    // (The status is a snapshot the control plane refreshes about once a second.)
    wait_for("c READY", Duration::from_secs(10), || {
        common::status_slot(&base, "c")["state"] == "READY"
    });
    assert!(log().contains("wake failed"), "{}", log());
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    let costs = CostStore::open(dir.path().join("vram-ledger.db"))
        .unwrap()
        .load()
        .unwrap();
    let count = |kind| {
        costs
            .measured(&cost_key("c"), 0, kind)
            .map_or(0, |m| m.count)
    };
    assert_eq!(count(SwapKind::Load), 2, "loaded again");
    assert_eq!(
        count(SwapKind::Stop),
        2,
        "the sleeper stopped, then c at exit"
    );
    assert_eq!(count(SwapKind::Wake(SleepLevel::One)), 0);
}

/// Two pooled REAL llama-servers (scripts/setup_llama.sh; skipped without it unless
/// `HOROS_REQUIRE_LLAMA=1`) started with `--sleep-idle-seconds 1`: the one evicted falls asleep
/// by its idle timer, its process kept (`/props` says `is_sleeping`), and the next request for
/// it wakes it on the same server; the wake is timed into the ledger's file.
#[test]
fn a_pooled_llama_server_sleeps_by_its_idle_timer_and_a_request_wakes_it() {
    let Some((server, gguf)) = horos_testkit::llama_smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_ports = free_ports(4);
    let base = format!("http://127.0.0.1:{port}");
    let model = |name: &str| {
        format!(
            "[[coordinator.pool.model]]\nname = \"{name}\"\ncommand = {}\nvram_mb = 600\n\n",
            serde_json::to_string(&horos_testkit::llama_sleepy_command(&server, &gguf)).unwrap()
        )
    };
    let path = dir.path().join("horos.toml");
    std::fs::write(
        &path,
        config(port, pool_ports, &(model("s1") + &model("s2"))),
    )
    .unwrap();
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let mut run = spawn_run(&path, &dir.path().join("run.log"));
    wait_for("the coordinator", Duration::from_secs(30), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });
    let (code, v) = chat(&base, "s1", 5, 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    // (The status is a snapshot the control plane refreshes about once a second.)
    wait_for("s1 READY", Duration::from_secs(10), || {
        common::status_slot(&base, "s1")["state"] == "READY"
    });
    let s1_port = common::status_slot(&base, "s1")["port"].as_u64().unwrap();
    let (code, v) = chat(&base, "s2", 1, 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    wait_for("s1 asleep", Duration::from_secs(20), || {
        common::status_slot(&base, "s1")["state"] == "SLEEPING"
    });
    let (_, props) = call("GET", &format!("http://127.0.0.1:{s1_port}/props"), None);
    assert_eq!(props["is_sleeping"], true, "{props}");
    let (code, v) = chat(&base, "s1", 0, 60.0);
    assert_eq!(code, 200, "{v}\n{}", log());
    assert_eq!(
        common::status_slot(&base, "s1")["port"].as_u64(),
        Some(s1_port)
    );
    assert!(stop(&mut run.0, libc::SIGTERM).success());
    let costs = CostStore::open(dir.path().join("vram-ledger.db"))
        .unwrap()
        .load()
        .unwrap();
    let wake = costs.measured(&cost_key("s1"), 0, SwapKind::Wake(SleepLevel::One));
    assert!(wake.is_some_and(|w| w.count == 1), "{wake:?}\n{}", log());
    eprintln!(
        "pooled llama-server woken in {:.3} s",
        wake.map_or(0.0, |w| w.mean_s)
    );
}
