//! The `tts` kind's worker (`servers/py/tts_worker.py`) run as a [`ProcessServer`] from the
//! command its kind builds: real speech from espeak-ng, read back as WAV. Skipped with a message
//! where espeak-ng is not installed, unless `HOROS_REQUIRE_TTS=1`.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use horos_servers::{
    KindArgs, Launch, ManagedServer, ModelRole, ProbeConfig, ProcessConfig, ProcessServer,
};
use horos_testkit::{free_port, runtime, skip_or_fail};
use serde_json::{Value, json};

/// Whether espeak-ng and python3 are here (else the test is skipped, or fails under
/// `HOROS_REQUIRE_TTS=1`).
fn tts_available() -> bool {
    let found = |bin: &str| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found("espeak-ng") && found("python3") {
        return true;
    }
    skip_or_fail(
        "HOROS_REQUIRE_TTS",
        "espeak-ng (or python3) is not installed: run scripts/setup_tts.sh",
    );
    false
}

/// One request over a fresh connection: status, headers (lower-case names), body.
fn post(port: u16, path: &str, body: &Value) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..at]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, raw[at + 4..].to_vec())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

use horos_testkit::wav;

#[test]
fn the_tts_worker_speaks_wav_and_refuses_what_it_cannot() {
    if !tts_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kind = horos_servers::kinds::kind("tts").unwrap();
    for (name, text) in kind.files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let Launch::Process { binary, command } = kind.launch else {
        panic!("tts runs as a process");
    };
    let dir_text = dir.path().display().to_string();
    let command = command(&KindArgs {
        binary,
        weights: "en-us",
        role: ModelRole::Speech,
        dir: &dir_text,
    });
    let port = free_port();
    let cfg = ProcessConfig {
        name: "tts".into(),
        command,
        port,
        model: Some("espeak".into()),
        log_path: Some(dir.path().join("tts.log")),
        start_timeout_s: 30,
        stop_timeout_s: 5,
        probe: ProbeConfig {
            health_path: kind.health.path.into(),
            inference_every: 0,
            ..ProbeConfig::default()
        },
        ..ProcessConfig::default()
    };
    runtime().block_on(async move {
        let server = ProcessServer::new(cfg).unwrap();
        server.start().await.unwrap();
        server.check().await.unwrap();
        let (port, speech) = (port, kind.paths[0]);
        let r = tokio::task::spawn_blocking(move || {
            let short = post(port, speech, &json!({"model": "espeak", "input": "Hello."}));
            let long = post(
                port,
                speech,
                &json!({"model": "espeak", "input": "Hello. This sentence is a good deal longer than the first one.", "voice": "en-gb", "response_format": "wav"}),
            );
            let voice = post(port, speech, &json!({"input": "Hello.", "voice": "no-such-voice"}));
            let format = post(port, speech, &json!({"input": "Hello.", "response_format": "midi"}));
            let empty = post(port, speech, &json!({"input": ""}));
            let pcm = post(port, speech, &json!({"input": "Hello.", "response_format": "pcm"}));
            (short, long, voice, format, empty, pcm)
        })
        .await
        .unwrap();
        let (short, long, voice, format, empty, pcm) = r;

        assert_eq!(short.0, 200, "{}", String::from_utf8_lossy(&short.2));
        assert_eq!(header(&short.1, "content-type"), Some("audio/wav"));
        let (channels, rate, byte_rate, data) = wav(&short.2);
        assert_eq!(channels, 1);
        assert!((8000..=48000).contains(&rate), "sample rate {rate}");
        assert_eq!(byte_rate, rate * 2, "16-bit mono");
        let short_s = data as f64 / f64::from(byte_rate);
        let (_, _, long_rate, long_data) = wav(&long.2);
        let long_s = long_data as f64 / f64::from(long_rate);
        assert!(short_s > 0.2 && short_s < 5.0, "`Hello.` lasts {short_s} s");
        assert!(long_s > 2.0 * short_s, "longer text, longer audio: {long_s} vs {short_s} s");

        // pcm: the same samples without a header.
        assert_eq!(pcm.0, 200);
        assert_eq!(header(&pcm.1, "content-type"), Some("audio/pcm"));

        let error = |r: &(u16, Vec<(String, String)>, Vec<u8>)| -> Value {
            assert_eq!(r.0, 400, "{}", String::from_utf8_lossy(&r.2));
            serde_json::from_slice::<Value>(&r.2).unwrap()["error"].clone()
        };
        let e = error(&voice);
        assert_eq!(e["param"], "voice");
        assert!(e["message"].as_str().unwrap().contains("no-such-voice"));
        let e = error(&format);
        assert_eq!(e["param"], "response_format");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("wav") && message.contains("pcm"), "{message}");
        assert_eq!(error(&empty)["param"], "input");

        server.stop().await.unwrap();
    });
}
