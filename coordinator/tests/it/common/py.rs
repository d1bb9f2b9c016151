//! The official `openai` Python client as a test driver (`coordinator/tests/py/openai_e2e.py`)
//! and the real llama-servers some tests use; each skips when its component is missing, unless
//! `HOROS_REQUIRE_PY_E2E=1` / `HOROS_REQUIRE_LLAMA=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use horos_coordinator::Coordinator;
use serde_json::Value;

use super::run_limited;

pub use horos_testkit::{repo_root, required};

/// The python that has `openai` (see [`horos_testkit::py_e2e_python`]).
pub fn find_python() -> Result<PathBuf, String> {
    horos_testkit::py_e2e_python("openai")
}

/// The python to use, or `None` (skip) when it cannot be set up and nothing requires it.
pub async fn python(test: &str) -> Option<PathBuf> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = tokio::task::spawn_blocking(|| PY.get_or_init(find_python).clone())
        .await
        .unwrap();
    match r {
        Ok(p) => Some(p),
        Err(e) if required("HOROS_REQUIRE_PY_E2E") => {
            panic!("HOROS_REQUIRE_PY_E2E=1 but the openai client is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("SKIP: {test}: python + openai unavailable: {e}");
            None
        }
    }
}

/// Runs one scenario of the Python driver against `c`; its JSON output.
pub async fn scenario(py: &Path, c: &Coordinator, name: &str, args: &[&str]) -> Value {
    let script = repo_root().join("coordinator/tests/py/openai_e2e.py");
    let mut cmd = Command::new(py);
    cmd.arg(&script).arg(c.url()).arg(name).args(args);
    let ran = tokio::task::spawn_blocking(move || run_limited(cmd, Duration::from_secs(50)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ran.code,
        Some(0),
        "scenario {name} {args:?} failed (exit code {:?}; None: killed at 50 s)\nstdout: {}\nstderr: {}",
        ran.code,
        ran.stdout,
        ran.stderr
    );
    let line = ran.stdout.lines().last().unwrap_or_default();
    let v = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("scenario {name}: not JSON ({e}): {}", ran.stdout));
    eprintln!("scenario {name} {args:?}: {v}");
    v
}

/// Whether a llama-server answers `GET /health` with 200 (within 5 s).
pub async fn healthy(base: &str) -> bool {
    let Ok(req) = http::Request::get(format!("{}/health", base.trim_end_matches('/')))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
    else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), super::http().request(req)).await,
        Ok(Ok(r)) if r.status().is_success()
    )
}

/// The llama-servers' URLs, or `None` (skip) when absent or down and not required.
pub async fn llama_urls(test: &str) -> Option<(String, String)> {
    let why = match (
        std::env::var("HOROS_LLAMA_CHAT_URL"),
        std::env::var("HOROS_LLAMA_EMBED_URL"),
    ) {
        (Ok(chat), Ok(embed)) => {
            if healthy(&chat).await && healthy(&embed).await {
                return Some((chat, embed));
            }
            format!("the llama-servers at {chat} / {embed} do not answer /health")
        }
        _ => "HOROS_LLAMA_CHAT_URL / HOROS_LLAMA_EMBED_URL not set (scripts/start_llama.sh)".into(),
    };
    if required("HOROS_REQUIRE_LLAMA") {
        panic!("HOROS_REQUIRE_LLAMA=1 but {why}");
    }
    eprintln!("SKIP: {test}: {why}");
    None
}
