//! The image-generation backend, for real on CPU: `horos-ref run` with a pooled model of the
//! registry's `diffusers` kind (`weights` the tiny Stable Diffusion pipeline with random weights
//! that `scripts/make_tiny_diffusers.py` builds from configuration, no download). The first
//! `POST /v1/images/generations` makes the pool start the worker (health-checked on `/health`,
//! its memory booked in the ledger) and the answer is a valid PNG of the requested size; the
//! model is then unloaded like any other pooled model. A chat sent to it beforehand is refused
//! (the kind serves images only) without starting the worker.
//!
//! Needs `HOROS_DIFFUSERS_PYTHON`, `HOROS_DIFFUSERS_PYTHONPATH` and
//! `HOROS_DIFFUSERS_TINY_PIPELINE` (`scripts/setup_diffusers.sh` writes them); skips without them
//! unless `HOROS_REQUIRE_DIFFUSERS=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{curl, free_port, free_ports, skip_or_fail, spawn_run, wait_for};
use serde_json::json;

const ADMIN_KEY: &str = "image-admin";

/// Standard base64 (with padding) decoded; `None` on a character outside the alphabet.
fn base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[test]
fn a_pooled_diffusers_worker_answers_with_a_png_of_the_requested_size() {
    let (Ok(python), Ok(site), Ok(pipeline)) = (
        std::env::var("HOROS_DIFFUSERS_PYTHON"),
        std::env::var("HOROS_DIFFUSERS_PYTHONPATH"),
        std::env::var("HOROS_DIFFUSERS_TINY_PIPELINE"),
    ) else {
        skip_or_fail(
            "HOROS_REQUIRE_DIFFUSERS",
            "no diffusers (HOROS_DIFFUSERS_PYTHON / HOROS_DIFFUSERS_PYTHONPATH / \
             HOROS_DIFFUSERS_TINY_PIPELINE not set; scripts/setup_diffusers.sh)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool_port = free_ports(1);
    let base = format!("http://127.0.0.1:{port}");
    let config = format!(
        r#"database = "jobs.db"
[coordinator]
bind = "127.0.0.1:{port}"
api_key = "{ADMIN_KEY}"
default_load_s = 5.0
[coordinator.pool]
memory_mb = 2000
margin_mb = 0
port_min = {pool_port}
port_max = {pool_port}
start_timeout_s = 120
[[coordinator.pool.model]]
name = "tiny-image"
backend = "diffusers"
binary = "{python}"
weights = "{pipeline}"
category = "diffusion"
vram_mb = 300
env = {{ PYTHONPATH = "{site}" }}
"#
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("run.log");
    let _run = spawn_run(&path, &log);
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    // A chat is not what the image worker serves: refused, naming the model and its path,
    // before the worker is started.
    let models = format!("{base}/api/v1/models");
    let (code, v) = curl(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&json!({"model": "tiny-image", "messages": [{"role": "user", "content": "hi"}]})),
        None,
    );
    assert_eq!(code, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`tiny-image`") && message.contains("/v1/images/generations"),
        "{message}"
    );
    let (_, v) = curl("GET", &models, None, Some(ADMIN_KEY));
    assert!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["model"] != "tiny-image" || m["state"] == "IDLE"),
        "the refused chat loaded the worker: {v}"
    );

    let ask = json!({"model": "tiny-image", "prompt": "a red square", "size": "64x48",
        "x_timeout_s": 120});
    let (code, v) = curl(
        "POST",
        &format!("{base}/v1/images/generations"),
        Some(&ask),
        None,
    );
    assert_eq!(
        code,
        200,
        "{v}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let png = base64(v["data"][0]["b64_json"].as_str().unwrap()).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    assert_eq!((be(&png[16..20]), be(&png[20..24])), (64, 48));
    assert!(png.ends_with(b"IEND\xaeB`\x82"), "a whole PNG");

    // A pooled model like any other: READY with its memory booked, then unloaded.
    let (_, v) = curl("GET", &models, None, Some(ADMIN_KEY));
    let slot = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == "tiny-image")
        .cloned()
        .unwrap();
    assert_eq!(slot["state"], "READY", "{v}");
    let booked: u64 = slot["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["mb"].as_u64().unwrap_or(0))
        .sum();
    assert!(booked >= 300, "its 300 MB booked on a GPU: {slot}");
    let (code, v) = curl(
        "POST",
        &format!("{base}/api/v1/models/tiny-image/unload"),
        None,
        Some(ADMIN_KEY),
    );
    assert_eq!(code, 200, "{v}");
    let (_, v) = curl("GET", &models, None, Some(ADMIN_KEY));
    let unloaded = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["model"] != "tiny-image" || m["state"] != "READY");
    assert!(unloaded, "{v}");
}
