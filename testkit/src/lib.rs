//! The helpers the HOROS-rs integration tests share, one copy each (test code only: they panic
//! where a test should fail).
//!
//! - [`free_port`] / [`free_ports`]: loopback ports for a server a test starts, never handed out
//!   twice in one test process and below the kernel's ephemeral range.
//! - [`wait_for`] (blocking) and [`wait_until`] (async): poll a condition until it holds, or fail
//!   the test naming what it waited for.
//! - [`required`] / [`skip_or_fail`]: the `HOROS_REQUIRE_<X>=1` convention. A test of an optional
//!   component (a GPU, Docker, PostgreSQL, a real model server) skips with a `SKIP:` line where
//!   the component is absent, and fails instead where CI requires it.
//! - [`runtime`]: the two-worker tokio runtime of tests that are plain `#[test]`s.
//! - [`pdf`]: small PDFs written by hand (blank, born-digital text, any objects, a
//!   decompression bomb's page).
//! - [`memory`]: the process's resident and peak resident memory, and the peak's reset, so that
//!   a test bounds what one step cost.
//! - [`markdown_score`]: a layout engine's Markdown scored against the Markdown its PDF was made
//!   from (text similarity, headings, list items, code blocks, table cells, reading order).
//! - [`png`]: PNG headers declaring any size (the image decoders' ceilings).
//! - [`rng`]: a seeded xorshift for randomized tests that replay from their seed.
//! - [`raw_http`]: one HTTP/1.1 exchange written by hand (any method, path, header or body), for
//!   the hostile-client tests.
//! - [`run_limited`], [`repo_root`], [`py_e2e_python`]: a child process with a time limit, the
//!   workspace's root, the Python that the official clients' tests drive.
//! - [`llama_smollm2`], [`llama_sleepy_command`]: the llama-server and model the set-up script
//!   installs (or a skip); a real llama-server on one thread that falls asleep after a
//!   second without a request.
//!
//! Crate-specific fixtures (fake servers, sample files, a queue on both backends) stay in the
//! `tests/common/` of the crate they serve.

pub mod markdown_score;
pub mod memory;
pub mod pdf;
pub mod png;
mod ports;
mod process;
pub mod raw_http;
mod require;
pub mod rng;
mod wait;
mod wav;

pub use ports::{free_port, free_ports};
pub use process::{Ran, py_e2e_python, repo_root, run_limited};
pub use require::{required, skip_or_fail};
pub use wait::{POLL_INTERVAL, Ready, wait_for, wait_until};
pub use wav::wav;

/// `text`'s SHA-256 in lower-case hex, as a configuration's `key_sha256` takes a key.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The llama-server and the SmolLM2 GGUF scripts/setup_llama.sh installs (`HOROS_LLAMA_SERVER`,
/// `HOROS_SMOLLM2_GGUF`, from its env file); `None` after a `SKIP:` line where they are not
/// set, a failure instead where `HOROS_REQUIRE_LLAMA=1`.
pub fn llama_smollm2() -> Option<(String, String)> {
    match (
        std::env::var("HOROS_LLAMA_SERVER"),
        std::env::var("HOROS_SMOLLM2_GGUF"),
    ) {
        (Ok(server), Ok(model)) => Some((server, model)),
        _ => {
            skip_or_fail(
                "HOROS_REQUIRE_LLAMA",
                "no llama-server (scripts/setup_llama.sh, then source its env file)",
            );
            None
        }
    }
}

/// The command of a llama-server (`server`) serving the GGUF `model` on 127.0.0.1 at `{port}`
/// (expanded by the server's owner), on one thread and one slot with a 512-token context, asleep
/// after one second without a request (`--sleep-idle-seconds 1`).
pub fn llama_sleepy_command(server: &str, model: &str) -> Vec<String> {
    [
        server,
        "-m",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "-t",
        "1",
        "-np",
        "1",
        "-c",
        "512",
        "--sleep-idle-seconds",
        "1",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A multi-thread tokio runtime with two workers and every driver this build of tokio has (I/O,
/// time): for the tests that are plain `#[test]`s, because their first line may turn the process
/// into a child (a fake server, a worker to kill), which must not happen inside a runtime.
///
/// # Panics
///
/// When the runtime cannot be built (no threads left).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("cannot build a tokio runtime")
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
