//! `horos-ref demo` end to end on the CPU: the built binary writes its embedded configuration
//! and starts `horos-ref run` on it (a lane with SmolLM2 on llama-server, MiniLM in the model
//! pool, the allocator over two simulated GPUs, the coordinator, the ingest pipeline), then, as a client of its HTTP API, ingests a
//! 4-page excerpt of the camlidl manual (Tesseract), runs the three searches (the visual one
//! with a page image as the question), an answer citing its page (`/v1/answers`) and a lane job, fetches the status page, and exits
//! (`--exit`). A second run on the same directory ingests nothing, falls back from a busy port,
//! refuses a concurrent demo on its directory, serves, has its chat server restarted by `run`'s
//! supervisor after a SIGKILL, and stops everything on SIGTERM. `--print-config` prints a
//! configuration that `run` accepts as written.
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

    /// Waits for the demo to exit successfully; every event it printed.
    fn wait_success(mut self) -> Vec<Value> {
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
        std::mem::take(&mut self.seen)
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

/// The llama-servers `run` (pid `run_pid`) started: its child processes.
fn servers_of(run_pid: i32) -> Vec<(i32, Vec<String>)> {
    common::llama_servers()
        .into_iter()
        .filter(|(pid, _)| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the fields after the command's closing parenthesis.
            let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
            after.split_whitespace().nth(1) == Some(&run_pid.to_string()) && !after.starts_with('Z')
        })
        .collect()
}

fn server_pids(run_pid: i32) -> Vec<i32> {
    let servers = servers_of(run_pid);
    // The lane's chat server and the pinned MiniLM of the pool.
    assert_eq!(servers.len(), 2, "{servers:?}");
    let models: Vec<bool> = servers
        .iter()
        .map(|(_, args)| args.iter().any(|a| a == "--embeddings"))
        .collect();
    assert!(
        models.contains(&true) && models.contains(&false),
        "{servers:?}"
    );
    servers.iter().map(|(pid, _)| *pid).collect()
}

fn assert_gone(pids: &[i32]) {
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "server {pid} still runs: {stat}"
        );
    }
}

#[test]
fn demo_is_run_on_its_configuration_and_a_client_of_its_http_api() {
    if !llama_present() || !tesseract_present() {
        return;
    }
    let Some(pdf) = excerpt() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // The configuration it prints is one `run` accepts (checked without starting anything).
    let printed = Command::new(BIN)
        .args(["demo", "--print-config", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    let text = String::from_utf8(printed.stdout).unwrap();
    assert!(
        text.contains("[[lane]]") && text.contains("[coordinator.pool]"),
        "{text}"
    );
    assert!(!text.contains('@'), "a placeholder is left: {text}");
    let printed_config = dir.path().join("printed.toml");
    std::fs::write(&printed_config, &text).unwrap();
    let checked = common::cli(&printed_config, &["stats"]);
    assert!(checked.status.success(), "{checked:?}");

    let mut demo = Demo::start(dir.path(), &pdf, &["--exit", "--port", "0"]);
    let coordinator = demo.until("coordinator");
    let run_pid = coordinator["run_pid"].as_i64().unwrap() as i32;
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
    assert_eq!(page("full_text"), 3);
    // The page image, rendered again at another resolution and sent to /v1/search as the
    // question, finds its own page among all pages.
    assert_eq!(page("maxsim"), page("full_text"));
    let maxsim = searches.iter().find(|s| s["kind"] == "maxsim").unwrap();
    assert_eq!(maxsim["query_kind"], "page_image", "{maxsim}");
    // The question answered through /v1/answers from the page that holds the table, cited.
    let answer = demo.events("answer");
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0]["supported"], true, "{}", answer[0]);
    assert!(
        !answer[0]["answer"].as_str().unwrap().trim().is_empty(),
        "{}",
        answer[0]
    );
    assert!(
        answer[0]["citations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["page"] == 3),
        "{}",
        answer[0]
    );
    let lane_job = demo.events("lane_job");
    assert_eq!(lane_job.len(), 1);
    assert_eq!(lane_job[0]["state"], "done", "{}", lane_job[0]);
    assert!(
        !lane_job[0]["answer"].as_str().unwrap().trim().is_empty(),
        "{}",
        lane_job[0]
    );
    assert_eq!(ready["status_code"], 200, "{ready}");
    assert_eq!(ready["metrics_code"], 200, "{ready}");
    let pids = server_pids(run_pid);
    let seen = demo.wait_success();
    assert_eq!(
        seen.iter().filter(|v| v["event"] == "run_stopped").count(),
        1
    );
    assert_gone(&pids);
    assert!(dir.path().join("horos.toml").is_file());
    assert!(dir.path().join("ingest/ingest.db").is_file());
    assert!(
        dir.path()
            .join("inbox")
            .join(pdf.file_name().unwrap())
            .is_file()
    );

    // A second run: the document is known, the port busy, the directory locked.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let mut demo = Demo::start(dir.path(), &pdf, &["--port", &port]);
    let coordinator = demo.until("coordinator");
    let run_pid = coordinator["run_pid"].as_i64().unwrap() as i32;
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
    let url = ready["coordinator_url"].as_str().unwrap();
    // The status page is run's: lanes, the pool, the ingest pipeline and its documents.
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
    assert!(page.contains("minilm"), "{page}");
    // The allocator's plan (one simulated GPU for the lane, one for the pool) and the GPUs.
    assert!(
        page.contains("<h2>Modes</h2>") && page.contains("<h2>GPUs</h2>"),
        "{page}"
    );
    assert!(
        page.contains("<td>chat</td>") && page.contains("<td>pool</td>"),
        "{page}"
    );
    // The GPU view's auditor: the plan, the leases and the memory used agree.
    assert!(
        page.contains("<h2>GPU view</h2>") && page.contains("agree (0 breaches since start)"),
        "{page}"
    );
    let (code, report) = common::curl_text(&format!("{url}/status/documents/1"));
    assert_eq!(code, 200, "{report}");
    assert!(report.contains("4 recorded of 4"), "{report}");
    let (code, missing) = common::curl_text(&format!("{url}/status/documents/999"));
    assert_eq!(code, 404, "{missing}");
    // One view of the GPUs: the pinned minilm is the pool's, on the GPU the allocator gave the
    // pool (1), never beside the chat lane's server on GPU 0.
    let mut leases = serde_json::Value::Null;
    common::wait_for("the pinned model's lease", Duration::from_secs(60), || {
        leases = common::curl("GET", &format!("{url}/api/v1/leases"), None, None).1;
        leases["data"]
            .as_array()
            .is_some_and(|d| d.iter().any(|l| l["owner"] == "pool:minilm"))
    });
    let gpus_of = |owner: &str| -> Vec<u64> {
        leases["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["owner"] == owner)
            .map(|l| l["gpu"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(gpus_of("pool:minilm"), [1], "{leases}");
    assert!(gpus_of("lane:chat").iter().all(|g| *g == 0), "{leases}");

    // The command line on the demo's configuration: pages that look like page 3, and like an
    // image file (the stored image of page 2).
    let config = dir.path().join("horos.toml");
    let like = common::json(&common::cli(
        &config,
        &["--json", "search", "--like", "1:3", "--k", "2"],
    ));
    assert_eq!(
        (&like[0]["document"], &like[0]["page"]),
        (&1.into(), &3.into()),
        "{like}"
    );
    let page2 = dir.path().join("ingest/pages/doc-1/page-00002.png");
    let by_image = common::json(&common::cli(
        &config,
        &["--json", "search", "--image", page2.to_str().unwrap()],
    ));
    assert_eq!(by_image[0]["page"], 2, "{by_image}");
    // An image and words together: the two searches fused by rank, so the best page of each
    // (the image's own, page 1; the table's, page 3) are the first two.
    let page1 = dir.path().join("ingest/pages/doc-1/page-00001.png");
    let image = page1.to_str().unwrap();
    let by_page1 = common::json(&common::cli(
        &config,
        &["--json", "search", "--image", image],
    ));
    let by_words = common::json(&common::cli(&config, &["--json", "search", QUERY]));
    let (seen, said) = (&by_page1[0]["page"], &by_words[0]["page"]);
    assert_ne!(seen, said, "{by_page1} {by_words}");
    let both = common::json(&common::cli(
        &config,
        &["--json", "search", QUERY, "--image", image, "--k", "2"],
    ));
    let pages: Vec<&serde_json::Value> = both
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["page"])
        .collect();
    assert!(pages.contains(&seen) && pages.contains(&said), "{both}");
    let out = common::cli(&config, &["search", "--like", "1:99"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no page 99"),
        "{out:?}"
    );

    let other = Command::new(BIN)
        .args(["--json", "demo", "--exit", "--port", "0", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!other.status.success());
    let stdout = String::from_utf8_lossy(&other.stdout);
    assert!(stdout.contains("another demo runs in"), "{stdout}");
    assert!(!stdout.contains("\"event\":\"coordinator\""), "{stdout}");

    // The lane's chat server killed: run's supervisor starts another.
    let mut pids = server_pids(run_pid);
    let chat_server = servers_of(run_pid)
        .into_iter()
        .find(|(_, args)| !args.iter().any(|a| a == "--embeddings"))
        .unwrap()
        .0;
    unsafe { libc::kill(chat_server, libc::SIGKILL) };
    common::wait_for("a new chat server", Duration::from_secs(120), || {
        servers_of(run_pid)
            .iter()
            .any(|(pid, args)| *pid != chat_server && !args.iter().any(|a| a == "--embeddings"))
    });
    pids.extend(servers_of(run_pid).iter().map(|(pid, _)| *pid));
    unsafe { libc::kill(demo.child.id() as i32, libc::SIGTERM) };
    demo.until("stopped");
    demo.wait_success();
    assert_gone(&pids);
    drop(busy);
}
