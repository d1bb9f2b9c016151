//! `horos-ref demo` end to end on the CPU: the built binary starts its own llama-servers
//! (SmolLM2, MiniLM), the coordinator, ingests a 4-page excerpt of the camlidl manual with
//! Tesseract, runs the three searches and a chat through the coordinator, fetches its status
//! page, and exits (`--exit`). A second run on the same directory ingests nothing, falls back
//! from a busy port, refuses a concurrent demo on its directory, serves, restarts its chat
//! server after a SIGKILL (the supervisor), and stops its servers on SIGTERM.
//!
//! Needs `HOROS_LLAMA_SERVER`, `HOROS_SMOLLM2_GGUF`, `HOROS_MINILM_GGUF` (scripts/setup_llama.sh),
//! `tesseract` (scripts/setup_ocr.sh) and the sample PDFs (scripts/fetch_sample_pdfs.sh, run here
//! on first use). Skips without them unless `HOROS_REQUIRE_LLAMA=1`, `HOROS_REQUIRE_OCR=1`,
//! `HOROS_REQUIRE_SAMPLES=1`.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{BIN, excerpt, skip_or_fail};

/// A question answered by page 3 of the excerpt (the manual's attribute table).
const QUERY: &str =
    "Which attributes, such as nativeint, fortran and null_terminated, apply to arrays?";

fn llama_present() -> bool {
    let missing: Vec<&str> = [
        "HOROS_LLAMA_SERVER",
        "HOROS_SMOLLM2_GGUF",
        "HOROS_MINILM_GGUF",
    ]
    .into_iter()
    .filter(|k| !std::env::var(k).is_ok_and(|v| Path::new(&v).is_file()))
    .collect();
    if !missing.is_empty() {
        skip_or_fail(
            "HOROS_REQUIRE_LLAMA",
            &format!(
                "{} not set to existing files (scripts/setup_llama.sh, then source its env file)",
                missing.join(", ")
            ),
        );
    }
    missing.is_empty()
}

fn tesseract_present() -> bool {
    let ok = Command::new("tesseract").arg("--version").output().is_ok();
    if !ok {
        skip_or_fail(
            "HOROS_REQUIRE_OCR",
            "tesseract not installed (scripts/setup_ocr.sh)",
        );
    }
    ok
}

/// The demo, its JSON lines arriving on a channel as they are printed.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Demo {
    fn start(dir: &Path, pdf: &Path, extra: &[&str]) -> Demo {
        let mut child = Command::new(BIN)
            .args(["--json", "demo", "--dir"])
            .arg(dir)
            .arg("--pdf")
            .arg(pdf)
            .args(["--query", QUERY])
            .args(extra)
            .env("HOROS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Demo {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until an event named `event` (or the end); a generous limit so that a
    /// stuck demo fails instead of hanging the test run.
    fn until(&mut self, event: &str) -> Value {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(300)) {
                Ok(v) => {
                    eprintln!("demo: {v}");
                    self.seen.push(v.clone());
                    if v["event"] == event {
                        return v;
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    panic!("no `{event}` event ({e}); seen: {:#?}", self.seen);
                }
            }
        }
    }

    fn events(&self, event: &str) -> Vec<&Value> {
        self.seen.iter().filter(|v| v["event"] == event).collect()
    }

    fn wait_success(mut self) {
        // The rest of the output, then the exit status.
        while let Ok(v) = self.lines.recv_timeout(Duration::from_secs(60)) {
            eprintln!("demo: {v}");
            self.seen.push(v);
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "demo exited with {status}");
        let stopped = self.events("stopped");
        assert_eq!(stopped.len(), 1);
        assert_eq!(stopped[0]["ok"], true, "{:?}", stopped[0]);
    }
}

impl Drop for Demo {
    /// A test failing midway stops its demo (SIGTERM: it ends its servers) rather than leave it
    /// serving, its servers running and the test's output pipe open.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = common::stop(&mut self.child, libc::SIGTERM);
        }
    }
}

fn server_pids(demo: &Demo) -> Vec<i32> {
    let servers = demo.events("server");
    assert_eq!(servers.len(), 2, "{servers:?}");
    let models: Vec<&str> = servers
        .iter()
        .map(|s| s["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["smollm2", "minilm"]);
    for s in &servers {
        // Its own servers, never scripts/test.sh's shared ones.
        let url = s["url"].as_str().unwrap();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert!(
            !url.ends_with(":18080") && !url.ends_with(":18081"),
            "{url}"
        );
    }
    servers
        .iter()
        .map(|s| s["pid"].as_i64().unwrap() as i32)
        .collect()
}

fn assert_gone(pids: &[i32]) {
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie of another parent (never a running server).
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "server {pid} still runs: {stat}"
        );
    }
}

#[test]
fn demo_ingests_searches_chats_and_serves_the_status_page() {
    if !llama_present() || !tesseract_present() {
        return;
    }
    let Some(pdf) = excerpt() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // First run: everything, then exit.
    let mut demo = Demo::start(dir.path(), &pdf, &["--exit", "--port", "0"]);
    let ingested = demo.until("ingested");
    assert_eq!(ingested["documents"], 1, "{ingested}");
    assert_eq!(ingested["new"], 1, "{ingested}");
    assert_eq!(ingested["pages"], 4, "{ingested}");
    let ready = demo.until("ready");
    let searches = demo.events("search");
    assert_eq!(searches.len(), 3, "{searches:?}");
    for s in &searches {
        assert_eq!(s["found"], true, "{s}");
    }
    let page = |kind: &str| {
        searches.iter().find(|s| s["kind"] == kind).unwrap()["page"]
            .as_u64()
            .unwrap()
    };
    // The attribute table is on the excerpt's page 3; MaxSim finds the page it was shown: the
    // pixel-patch fallback's query is a page image, and the event says so.
    assert_eq!(page("full_text"), 3);
    assert_eq!(page("maxsim"), page("full_text"));
    let maxsim = searches.iter().find(|s| s["kind"] == "maxsim").unwrap();
    assert_eq!(
        (&maxsim["embedder"], &maxsim["query_kind"], &maxsim["label"]),
        (
            &Value::from("pixel-patch-fallback"),
            &Value::from("page_image"),
            &Value::from("maxsim (pixel-patch fallback, a page image as the query)")
        ),
        "{maxsim}"
    );
    let chat = demo.events("chat");
    assert_eq!(chat.len(), 1);
    assert!(
        !chat[0]["answer"].as_str().unwrap().trim().is_empty(),
        "{}",
        chat[0]
    );
    assert_eq!(ready["status_code"], 200, "{ready}");
    assert_eq!(ready["metrics_code"], 200, "{ready}");
    assert!(
        ready["status_url"].as_str().unwrap().ends_with("/status"),
        "{ready}"
    );
    let pids = server_pids(&demo);
    demo.wait_success();
    assert_gone(&pids);
    assert!(dir.path().join("ingest/ingest.db").is_file());
    assert!(dir.path().join("run/llama-chat.log").is_file());
    assert!(!dir.path().join("run/llama-chat.pid").exists());

    // Second run on the same directory: nothing to ingest; the requested port is busy, so it
    // falls back to a free one; it serves until SIGTERM and stops its servers.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let mut demo = Demo::start(dir.path(), &pdf, &["--port", &port]);
    let coordinator = demo.until("coordinator");
    assert_eq!(demo.events("port_busy").len(), 1);
    assert_eq!(coordinator["fallback"], true, "{coordinator}");
    assert_ne!(coordinator["port"].to_string(), port);
    let ingested = demo.until("ingested");
    assert_eq!(ingested["new"], 0, "{ingested}");
    assert_eq!(ingested["documents"], 1, "{ingested}");
    assert_eq!(demo.events("document")[0]["new"], false);
    let ready = demo.until("ready");
    assert_eq!(ready["status_code"], 200, "{ready}");
    demo.until("serving");
    // The status page shows the ingested document, linked to its report.
    let url = ready["coordinator_url"].as_str().unwrap();
    let mut page = String::new();
    common::wait_for("the ingest section", Duration::from_secs(20), || {
        page = common::curl_text(&format!("{url}/status")).1;
        page.contains("/status/documents/1")
    });
    assert!(page.contains("<h2>Ingest</h2>"), "{page}");
    assert!(
        page.contains("1 documents: 0 in progress, 1 done, 0 failed"),
        "{page}"
    );
    let (code, report) = common::curl_text(&format!("{url}/status/documents/1"));
    assert_eq!(code, 200, "{report}");
    assert!(report.contains("<h1>Document 1"), "{report}");
    assert!(report.contains("4 recorded of 4"), "{report}");
    // Each stage a row with its jobs: one render, four pages stored. The excerpt is
    // born-digital: its pages keep their text layer, so none is read (no image_to_ocr row).
    assert!(
        report.contains("<tr><td>pdf_to_images</td><td>1</td>"),
        "{report}"
    );
    assert!(
        report.contains("<tr><td>ocr_to_database</td><td>4</td>"),
        "{report}"
    );
    assert!(!report.contains("<td>image_to_ocr</td>"), "{report}");
    let (code, missing) = common::curl_text(&format!("{url}/status/documents/999"));
    assert_eq!(code, 404, "{missing}");
    assert!(missing.contains("no document 999"), "{missing}");
    let mut pids = server_pids(&demo);
    // A second demo on the same directory is refused (it would end these servers).
    let other = Command::new(BIN)
        .args(["--json", "demo", "--exit", "--port", "0", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!other.status.success());
    let stdout = String::from_utf8_lossy(&other.stdout);
    assert!(stdout.contains("another demo runs in"), "{stdout}");
    assert!(!stdout.contains("\"event\":\"server\""), "{stdout}");
    // A crash while serving: the chat server's supervisor starts it again.
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    let restarted = loop {
        let v = demo.until("supervisor");
        if v["model"] == "smollm2" && v["supervisor"]["event"] == "started" {
            break v;
        }
    };
    let new_pid = restarted["pid"].as_i64().unwrap() as i32;
    assert_ne!(new_pid, pids[0], "{restarted}");
    pids.push(new_pid);
    unsafe { libc::kill(demo.child.id() as i32, libc::SIGTERM) };
    demo.until("stopped");
    assert_eq!(demo.events("server_stopped").len(), 2);
    demo.wait_success();
    assert_gone(&pids);
    drop(busy);
}
