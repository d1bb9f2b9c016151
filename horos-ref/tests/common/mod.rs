//! Helpers shared by the binary's integration tests.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_horos-ref");

/// Runs `horos-ref --config CONFIG ARGS...` to the end.
pub fn cli(config: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

/// The JSON a successful command printed (its stderr in the panic message otherwise).
pub fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Prints a SKIP line, or fails when `var` is set to 1 (CI requires the component).
pub fn skip_or_fail(var: &str, msg: &str) {
    assert!(
        std::env::var(var).as_deref() != Ok("1"),
        "{msg} and {var}=1"
    );
    eprintln!("SKIP: {msg}");
}

/// The 4-page excerpt of the camlidl manual (scripts/fetch_sample_pdfs.sh, run here on first use).
pub fn excerpt() -> Option<PathBuf> {
    let dir = std::env::var("HOROS_SAMPLE_PDFS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()))
                .join(".cache/horos-rs/sample-pdfs")
        });
    if !dir.join(".complete-v3").exists() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch_sample_pdfs.sh");
        let _ = Command::new("bash").arg(&script).arg(&dir).status();
    }
    let pdf = dir.join("excerpt.pdf");
    if !pdf.is_file() {
        skip_or_fail(
            "HOROS_REQUIRE_SAMPLES",
            &format!(
                "{} missing (scripts/fetch_sample_pdfs.sh failed)",
                pdf.display()
            ),
        );
        return None;
    }
    Some(pdf)
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
