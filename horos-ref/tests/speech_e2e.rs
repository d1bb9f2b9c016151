//! Text to speech end to end, for real on CPU: `horos-ref run` with a pooled model of the
//! registry's `tts` kind (its espeak-ng worker, `servers/py/tts_worker.py`, written into the
//! pool's directory). The first `POST /v1/audio/speech` makes the pool start the worker (its
//! memory booked in the VRAM ledger while it runs); the answer is a WAV whose header agrees with
//! its length; the same request as a `speech` job is polled to its audio; an unknown voice or
//! format is a 400 naming the parameter; `horos-ref speak` writes a WAV; and the model is
//! unloaded when its stay-warm time runs out, its lease gone. Skips without espeak-ng unless
//! `HOROS_REQUIRE_TTS=1` (scripts/setup_tts.sh installs it).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{cli, curl, free_port, free_ports, leases, skip_or_fail, spawn_run, wait_for};
use serde_json::{Value, json};

use horos_testkit::wav;

/// `POST /v1/audio/speech` with curl: status, content type, body bytes.
fn speech(base: &str, body: &Value, dir: &Path) -> (u16, String, Vec<u8>) {
    let out_file = dir.join("answer.bin");
    let out = Command::new("curl")
        .args(["-s", "-m", "180", "-o"])
        .arg(&out_file)
        .args(["-w", "%{http_code} %{content_type}", "-X", "POST"])
        .args([
            "-H",
            "content-type: application/json",
            "-d",
            &body.to_string(),
        ])
        .arg(format!("{base}/v1/audio/speech"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, content_type) = text.split_once(' ').unwrap_or(("0", ""));
    (
        code.parse().unwrap_or(0),
        content_type.to_owned(),
        std::fs::read(&out_file).unwrap_or_default(),
    )
}

fn espeak_here() -> bool {
    let ok = Command::new("espeak-ng")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail(
            "HOROS_REQUIRE_TTS",
            "espeak-ng is not installed (scripts/setup_tts.sh)",
        );
    }
    ok
}

/// The model's slot state on the coordinator's JSON status.
fn state(base: &str, model: &str) -> String {
    let (_, v) = curl("GET", &format!("{base}/api/v1/status"), None, None);
    v["slots"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["model"] == model)
        .and_then(|s| s["state"].as_str())
        .unwrap_or("?")
        .to_owned()
}

#[test]
fn a_pooled_tts_model_speaks_wav_synchronously_and_as_a_job_then_is_unloaded() {
    if !espeak_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_port = free_ports(1);
    let base = format!("http://127.0.0.1:{port}");
    let config = format!(
        r#"database = "jobs.db"
[coordinator]
bind = "127.0.0.1:{port}"
default_load_s = 2.0
[coordinator.pool]
memory_mb = 1000
margin_mb = 0
port_min = {pool_port}
port_max = {pool_port}
start_timeout_s = 60
[[coordinator.pool.model]]
name = "voice"
backend = "tts"
weights = "en-us"
category = "speech"
vram_mb = 100
stay_warm_s = 4
"#
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("run.log");
    let _run = spawn_run(&path, &log);
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    let run_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !leases(&path).iter().any(|l| l.0 == "pool:voice"),
        "nothing booked before a request"
    );

    // A synchronous request loads the worker and is answered with a WAV.
    let short = "Hello.";
    let (code, content_type, short_wav) = speech(
        &base,
        &json!({"model": "voice", "input": short, "x_timeout_s": 60}),
        dir.path(),
    );
    assert_eq!(
        code,
        200,
        "{}\n{}",
        String::from_utf8_lossy(&short_wav),
        run_log()
    );
    assert_eq!(content_type, "audio/wav");
    // Booked in the ledger while it runs.
    assert!(
        leases(&path).contains(&("pool:voice".to_owned(), 0, 100)),
        "{:?}",
        leases(&path)
    );
    let (channels, rate, byte_rate, data) = wav(&short_wav);
    assert_eq!((channels, byte_rate), (1, rate * 2), "16-bit mono");
    assert!((8000..=48000).contains(&rate), "sample rate {rate}");
    let short_s = data as f64 / f64::from(byte_rate);
    let long = "Hello. This is a longer sentence, spoken through the model pool.";
    let (code, _, long_wav) = speech(
        &base,
        &json!({"model": "voice", "input": long, "voice": "en-gb", "response_format": "wav"}),
        dir.path(),
    );
    assert_eq!(code, 200);
    let (_, _, long_rate, long_data) = wav(&long_wav);
    let long_s = long_data as f64 / f64::from(long_rate);
    assert!(
        short_s > 0.2 && long_s > 2.0 * short_s,
        "longer text, longer audio: {short_s} s then {long_s} s"
    );

    // Refusals naming the parameter: the worker's (voice, a format it cannot produce) and the
    // coordinator's (no input, a format that is no audio format).
    let refusal = |body: Value| {
        let (code, _, b) = speech(&base, &body, dir.path());
        assert_eq!(code, 400, "{}", String::from_utf8_lossy(&b));
        serde_json::from_slice::<Value>(&b).unwrap()["error"].clone()
    };
    let e = refusal(json!({"model": "voice", "input": "Hi", "voice": "klingon-xx"}));
    assert_eq!(e["param"], "voice", "{e}");
    let e = refusal(json!({"model": "voice", "input": "Hi", "response_format": "midi"}));
    assert_eq!(e["param"], "response_format", "{e}");
    let e = refusal(json!({"model": "voice", "voice": "en"}));
    assert_eq!(e["param"], "input", "{e}");
    let ffmpeg = Command::new("ffmpeg").arg("-version").output().is_ok();
    if !ffmpeg {
        let e = refusal(json!({"model": "voice", "input": "Hi", "response_format": "mp3"}));
        assert_eq!(e["param"], "response_format", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains("wav") && message.contains("pcm"),
            "{message}"
        );
    }

    // The same as a job: submitted, polled to completion, its audio in its result.
    let (code, v) = curl(
        "POST",
        &format!("{base}/v1/jobs"),
        Some(
            &json!({"kind": "speech", "request": {"model": "voice", "input": long, "voice": "en-gb"}}),
        ),
        None,
    );
    assert_eq!(code, 202, "{v}");
    let id = v["id"].as_i64().unwrap();
    let mut job = Value::Null;
    wait_for("the speech job", Duration::from_secs(60), || {
        job = curl("GET", &format!("{base}/v1/jobs/{id}"), None, None).1;
        job["state"] == "succeeded" || job["state"] == "failed"
    });
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["result"]["content_type"], "audio/wav");
    use base64::Engine as _;
    let job_wav = base64::engine::general_purpose::STANDARD
        .decode(job["result"]["b64_json"].as_str().unwrap())
        .unwrap();
    assert_eq!(job["result"]["bytes"], job_wav.len());
    assert_eq!(wav(&job_wav).3, long_data, "the job speaks as the call did");
    // The operator reads it with horos-ref jobs (the admin API), its audio written to a file.
    let job_file = dir.path().join("job.wav");
    let out = cli(
        &path,
        &[
            "jobs",
            "--show",
            &id.to_string(),
            "--out",
            job_file.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("(speech): succeeded"), "{shown}");
    assert_eq!(std::fs::read(&job_file).unwrap(), job_wav);

    // horos-ref speak: the same route from the command line, the file written.
    let out_file = dir.path().join("spoken.wav");
    let out = cli(
        &path,
        &[
            "--json",
            "speak",
            "Written by the command line.",
            "--model",
            "voice",
            "--out",
            out_file.to_str().unwrap(),
        ],
    );
    let printed = common::json(&out);
    let written = std::fs::read(&out_file).unwrap();
    assert_eq!(printed["bytes"], written.len());
    assert_eq!(printed["content_type"], "audio/wav");
    assert!(wav(&written).3 > 0);

    // Idle past its stay-warm time: unloaded, its lease given back.
    wait_for("the tts model unloaded", Duration::from_secs(60), || {
        state(&base, "voice") != "READY" && !leases(&path).iter().any(|l| l.0 == "pool:voice")
    });
}
