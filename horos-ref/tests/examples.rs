//! The example configurations (`examples/configs/*.toml`) through the binary: `check` passes
//! on each (the GPU ones `--offline`: they name programs and models of another machine, and
//! their ports may be taken here; their keys, values, environment variables and VRAM plan are
//! still checked), the CPU one starts and serves, the README's sample is one of them, and
//! `check` refuses broken variants naming the key.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{
    BIN, assert_chat_and_embedding, free_ports, llama_env, output_text, run_until_status, stop,
};

/// Every example, by name.
const EXAMPLES: [&str; 5] = [
    "cpu.toml",
    "four-gpu.toml",
    "nodes-postgres.toml",
    "one-gpu.toml",
    "reference.toml",
];

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/configs")
}

/// Environment variables given to a command.
type Env = [(&'static str, &'static str)];

/// The variables the examples name: secrets and paths of another machine.
const EXAMPLE_ENV: [(&str, &str); 6] = [
    ("PGPASSWORD", "s3cr3t"),
    ("TEAM_A_KEY", "team-a-key"),
    ("EXAMPLE_API_KEY", "cloud-key"),
    ("HOROS_MODELS", "/srv/models"),
    ("HOROS_SMOLLM2_GGUF", "/srv/models/smollm2.gguf"),
    ("HOROS_MINILM_GGUF", "/srv/models/minilm.gguf"),
];

/// `horos-ref ARGS...` with `env` added to the environment (and `HOROS_LLAMA_SERVER` too,
/// unless given).
fn horos(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env("HOROS_LLAMA_SERVER", "llama-server");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn every_example_passes_check() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    found.sort();
    assert_eq!(found, EXAMPLES, "a new example needs its place here");
    for name in EXAMPLES {
        let file = examples_dir().join(name);
        let out = horos(
            &["check", "--offline", file.to_str().unwrap()],
            &EXAMPLE_ENV,
        );
        assert!(out.status.success(), "{name}: {}", output_text(&out));
        assert!(
            output_text(&out).contains("no problem found"),
            "{}",
            output_text(&out)
        );
    }
}

/// The four-GPU layout's plan is weighed against its simulated GPUs: one more lane on a full
/// GPU is refused, naming it.
#[test]
fn the_four_gpu_plan_is_weighed_against_its_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(examples_dir().join("four-gpu.toml")).unwrap();
    let crowded = original.replace("vram_mb = 20000", "vram_mb = 50000");
    let file = dir.path().join("four.toml");
    std::fs::write(&file, crowded).unwrap();
    let out = horos(
        &["--json", "check", "--offline", file.to_str().unwrap()],
        &EXAMPLE_ENV,
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report}");
    assert_eq!(problems[0]["key"], "lane[3].vram_mb");
    assert!(problems[0]["message"].as_str().unwrap().contains("GPU 2"));
}

#[test]
fn the_readmes_sample_is_the_reference_example() {
    let readme = include_str!("../README.md");
    let start = readme.find("## Configuration\n\n```toml\n").unwrap() + 26;
    let end = start + readme[start..].find("```\n").unwrap();
    let file = std::fs::read_to_string(examples_dir().join("reference.toml")).unwrap();
    assert_eq!(
        readme[start..end],
        file,
        "horos-ref/README.md's Configuration sample and examples/configs/reference.toml differ"
    );
}

/// Broken variants of the one-GPU example: each problem is named by its key, with a fix, in
/// text and in JSON, and the exit status is 1.
#[test]
fn check_refuses_broken_variants_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(examples_dir().join("one-gpu.toml")).unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let held_port = held.local_addr().unwrap().port();
    let simulated = "[gpus]\nsource = \"simulated\"\nsimulated_mb = [24000]\n";
    // (what is broken, the file, its environment, the key named)
    let cases: [(&str, String, &Env, &str); 7] = [
        (
            "unknown key",
            good.replace("batch_size = 16", "batch_sise = 16"),
            &EXAMPLE_ENV,
            "lane[0].batch_sise",
        ),
        (
            "unset variable",
            good.clone(),
            &[("HOROS_MODELS", "")],
            "lane[0].command[2]",
        ),
        (
            "a lane larger than its GPU",
            good.replace("[gpus]\nsource = \"nvml\"", simulated)
                .replace("vram_mb = 9000", "vram_mb = 30000"),
            &EXAMPLE_ENV,
            "lane[0].vram_mb",
        ),
        (
            "pinned models larger than the pool",
            good.replace("vram_mb = 1500", "vram_mb = 15000"),
            &EXAMPLE_ENV,
            "coordinator.pool.model[0].vram_mb",
        ),
        (
            "a port taken",
            good.replace("127.0.0.1:8210", &format!("127.0.0.1:{held_port}")),
            &EXAMPLE_ENV,
            "coordinator.bind",
        ),
        (
            "the pool's ports over the coordinator's and the lane's",
            good.replace("port_min = 8300", "port_min = 8210"),
            &EXAMPLE_ENV,
            "coordinator.pool.port_min",
        ),
        (
            "a value out of range",
            good.replace("batch_size = 16", "batch_size = 0"),
            &EXAMPLE_ENV,
            "lane[0].batch_size",
        ),
    ];
    for (what, config, env, key) in cases {
        let file = dir.path().join("broken.toml");
        std::fs::write(&file, &config).unwrap();
        let out = horos(&["--json", "check", file.to_str().unwrap()], env);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", output_text(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let problems = report["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["key"] == key && !p["fix"].as_str().unwrap().is_empty()),
            "{what}: no problem of {key}: {report}"
        );
        assert_eq!(report["ok"], false);
        // The text form names the key and its fix too.
        let out = horos(&["check", file.to_str().unwrap()], env);
        assert_eq!(out.status.code(), Some(1));
        let t = output_text(&out);
        assert!(t.contains(key) && t.contains("fix:"), "{what}: {t}");
    }
    // Without --offline, this machine's missing programs and model files are problems too.
    let file = dir.path().join("one.toml");
    std::fs::write(&file, &good).unwrap();
    let out = horos(
        &["--json", "check", file.to_str().unwrap()],
        &[("HOROS_MODELS", "/nowhere"), ("PATH", "/nowhere")],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    for key in [
        "lane[0].command[0]",
        "lane[0].command[2]",
        "coordinator.pool.model[0].backend",
        "coordinator.pool.model[0].weights",
    ] {
        assert!(keys.contains(&key), "{key} not in {keys:?}");
    }
    // The CPU example's pages are read by Tesseract: without it on PATH, [ingest] says so.
    let cpu = examples_dir().join("cpu.toml");
    let out = horos(
        &["--json", "check", cpu.to_str().unwrap()],
        &[&EXAMPLE_ENV[..], &[("PATH", "/nowhere")]].concat(),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["key"] == "ingest.reader"),
        "{report}"
    );
    drop(held);
}

/// The CPU example as written (its ports moved to free ones: the demo's tests may hold
/// 8210-8213): `check` passes on this machine, `run` serves the status page, a chat through the
/// lane and an embedding through the pool, and stops on SIGTERM.
#[test]
fn the_cpu_example_runs() {
    let Some(env) = llama_env() else { return };
    if Command::new("tesseract").arg("--version").output().is_err() {
        // Its [ingest] reads pages with Tesseract: `check` wants it.
        common::skip_or_fail(
            "HOROS_REQUIRE_OCR",
            "tesseract not installed (scripts/setup_ocr.sh)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The coordinator, the lane's two servers (one per GPU), the pool's.
    let base = free_ports(4);
    let config = std::fs::read_to_string(examples_dir().join("cpu.toml"))
        .unwrap()
        .replace("8210", &base.to_string())
        .replace("8211", &(base + 1).to_string())
        .replace("8212", &(base + 2).to_string())
        .replace("8213", &(base + 3).to_string());
    let port = base;
    let file = dir.path().join("horos.toml");
    std::fs::write(&file, config).unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = horos(&["check", file.to_str().unwrap()], &env);
    assert!(out.status.success(), "{}", output_text(&out));
    // `run` reads the same variables: this test's own environment has them.
    let coordinator = format!("127.0.0.1:{port}");
    let log = dir.path().join("run.log");
    let mut running = run_until_status(&file, &log, &coordinator, Duration::from_secs(240));
    assert_chat_and_embedding(&coordinator, "smollm2", "minilm");
    let status = stop(&mut running.0, libc::SIGTERM);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
}
