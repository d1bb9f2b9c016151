//! `horos-ref mcp` driven by a real MCP client: the official MCP Python SDK (`mcp` from PyPI),
//! through `horos-ref/tests/py/mcp_sdk_e2e.py`, which spawns the server over stdio, initializes a
//! session, lists the tools, calls each one and prints what it observed as JSON.
//!
//! Twice: first with no coordinator running (the `models` tool answers with a tool error naming
//! the address it tried), then with `horos-ref run` serving a coordinator whose one model is an
//! in-process fakeai server (`models` lists it).
//!
//! The Python side comes from `scripts/setup_py_e2e.sh` (a venv cached in `~/.cache/horos/py-e2e`),
//! or from `HOROS_PY_E2E_PYTHON` (a python that has `mcp`). When neither works the test skips,
//! unless `HOROS_REQUIRE_PY_E2E=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{BIN, free_port, runtime, skip_or_fail, spawn_run, tiny_pdf, wait_for};
use horos_fakeai::{FakeConfig, FakeServer};
use horos_testkit::{repo_root, run_limited};
use serde_json::Value;
use squeueha::{JobState, NewJob, Queue};

const LANE: &str = "think";
const PROMPT: &str = "hello from the SDK";

/// The python that has the MCP SDK (see [`horos_testkit::py_e2e_python`]).
fn find_python() -> Result<PathBuf, String> {
    horos_testkit::py_e2e_python("mcp.client.stdio")
}

/// One run of the SDK driver against `config`: its JSON (the last stdout line).
fn drive(py: &Path, config: &Path, dir: &Path, phase: &str) -> Value {
    let script = repo_root().join("horos-ref/tests/py/mcp_sdk_e2e.py");
    let mut cmd = Command::new(py);
    cmd.arg(&script)
        .arg(BIN)
        .arg(config)
        .args(["--queue", LANE, "--pdf", "report.pdf", "--outside"])
        .arg(dir.join("secret.pdf"));
    let ran = run_limited(cmd, Duration::from_secs(60)).unwrap();
    assert_eq!(
        ran.code,
        Some(0),
        "{phase}: the SDK driver failed (exit code {:?}; None: killed at 60 s)\nstdout: {}\nstderr: {}",
        ran.code,
        ran.stdout,
        ran.stderr
    );
    let line = ran.stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{phase}: not JSON ({e}): {}", ran.stdout));
    eprintln!("{phase}: {v}");
    v
}

/// The outcome of the call `name` in the driver's output; a protocol error fails the test.
fn outcome<'a>(v: &'a Value, name: &str) -> &'a Value {
    let o = &v["calls"][name];
    assert!(
        o["exception"].is_null() && o["is_error"].is_boolean(),
        "{name}: not a tool result: {o}"
    );
    o
}

/// A successful call's structuredContent.
fn ok<'a>(v: &'a Value, name: &str) -> &'a Value {
    let o = outcome(v, name);
    assert_eq!(o["is_error"], false, "{name}: {o}");
    assert!(o["structured"].is_object(), "{name}: {o}");
    &o["structured"]
}

/// A failed call's message (an isError result, not a JSON-RPC error).
fn tool_error(v: &Value, name: &str) -> String {
    let o = outcome(v, name);
    assert_eq!(o["is_error"], true, "{name}: {o}");
    o["text"].as_str().unwrap().to_owned()
}

/// Whether `GET /health` on `addr` answers 200.
fn healthy(addr: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    s.write_all(request.as_bytes()).is_ok()
        && s.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

#[test]
fn the_official_mcp_python_sdk_initializes_lists_and_calls_every_tool() {
    let py = match find_python() {
        Ok(p) => p,
        Err(e) => {
            skip_or_fail(
                "HOROS_REQUIRE_PY_E2E",
                &format!("the MCP Python SDK is unavailable: {e}"),
            );
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("inbox")).unwrap();
    std::fs::write(d.join("inbox/report.pdf"), tiny_pdf("A quarterly report")).unwrap();
    std::fs::write(d.join("secret.pdf"), tiny_pdf("Outside the inbox")).unwrap();
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let rt = runtime();
    let fake = rt
        .block_on(FakeServer::start(FakeConfig {
            model: "fake-chat".into(),
            ..FakeConfig::default()
        }))
        .unwrap();
    let coordinator = format!(
        "[coordinator]\nbind = \"{bind}\"\napi_key = \"mcp-admin\"\n\
         [[coordinator.model]]\nname = \"fake-chat\"\nurl = \"{}\"\n",
        fake.url()
    );
    // The MCP server's configuration: the queue, a lane, the inbox, where the coordinator is.
    let config = d.join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n\
             [[lane]]\nqueue = \"{LANE}\"\nurl = \"http://127.0.0.1:9\"\nmodel = \"smollm2\"\n\
             [ingest]\ninbox = \"inbox\"\nembeddings_url = \"http://127.0.0.1:9\"\n\
             embeddings_model = \"minilm\"\n{coordinator}"
        ),
    )
    .unwrap();

    // A dead letter on the lane, for the `dead` tool to report.
    let queue = Queue::open(d.join("jobs.db")).unwrap();
    let poison = queue
        .enqueue(LANE, NewJob::new(b"{not a chat request".to_vec()))
        .unwrap()
        .id();
    let leased = queue.poll_batch(LANE, 1, Duration::from_secs(60)).unwrap();
    assert_eq!(leased.len(), 1);
    queue
        .bury(leased[0].lease, "poison pill: not a chat request")
        .unwrap();

    // Phase 1: no coordinator runs.
    let v = drive(&py, &config, d, "without a coordinator");
    assert_eq!(v["server_name"], "horos-ref", "{v}");
    assert_eq!(v["server_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["has_tools_capability"], true);
    // The SDK offers its newest handshake revision (2025-11-25 for mcp 2.3); the server, which
    // does not speak it, answers with its own newest, and the SDK accepted that.
    assert_eq!(
        v["protocol_version"],
        horos_mcp::LATEST_PROTOCOL_VERSION,
        "{v}"
    );
    assert!(
        v["instructions"]
            .as_str()
            .is_some_and(|i| i.contains("submit")),
        "{v}"
    );
    assert_eq!(
        v["tools"],
        serde_json::json!([
            "answer", "dead", "document", "ingest", "models", "search", "stats", "status", "submit"
        ])
    );
    assert_eq!(v["required"]["submit"], serde_json::json!(["queue"]));
    assert_eq!(v["required"]["status"], serde_json::json!(["id"]));

    // submit → status: the job is in the SQLite queue, ready, as submitted.
    let submitted = ok(&v, "submit");
    assert_eq!(submitted["queue"], LANE);
    let id = submitted["id"].as_i64().unwrap();
    assert_ne!(id, poison);
    let status = ok(&v, "status");
    assert_eq!(status["id"], id, "{status}");
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["queue"], LANE);
    assert_eq!(status["attempts"], 0);
    let job = queue.get(id).unwrap().expect("the submitted job is stored");
    assert_eq!(job.state, JobState::Ready);
    assert_eq!(job.queue, LANE);
    // The tool's `priority` is a rank (smaller runs first, as `x_priority`): rank 3 enters the
    // queue's order, where higher runs first, as -3.
    assert_eq!(job.priority, -3);
    let request: Value = serde_json::from_slice(&job.payload).unwrap();
    assert_eq!(request["model"], "smollm2", "{request}");
    assert_eq!(request["messages"][0]["role"], "user");
    assert_eq!(request["messages"][0]["content"], PROMPT);

    // stats lists the lane with what the queue holds; dead reports the buried job.
    let stats = ok(&v, "stats");
    let lane = stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == LANE)
        .unwrap_or_else(|| panic!("no {LANE} in {stats}"));
    let held = queue.stats(LANE).unwrap();
    assert_eq!((held.ready, held.dead), (1, 1));
    assert_eq!(lane["ready"], 1, "{stats}");
    assert_eq!(lane["dead"], 1, "{stats}");
    let dead = ok(&v, "dead");
    assert_eq!(dead["queue"], LANE);
    assert_eq!(dead["dead"].as_array().unwrap().len(), 1, "{dead}");
    assert_eq!(dead["dead"][0]["id"], poison);
    assert_eq!(dead["dead"][0]["reason"], "poison pill: not a chat request");

    // ingest: the inbox's PDF is queued; one outside the inbox is refused.
    let doc = ok(&v, "ingest");
    assert_eq!(doc["status"], "queued", "{doc}");
    assert_eq!(doc["title"], "report", "{doc}");
    let document = doc["document"].clone();
    assert!(!document.is_null(), "{doc}");
    assert!(
        tool_error(&v, "ingest_outside").contains("outside the inbox"),
        "{v}"
    );
    // document: its report (queued: nothing read yet); search: any text, no page read yet.
    let report = ok(&v, "document");
    assert_eq!(report["document"]["id"], document, "{report}");
    assert_eq!(report["document"]["status"], "pending", "{report}");
    let found = ok(&v, "search");
    assert_eq!(found["hits"], serde_json::json!([]), "{found}");
    assert!(
        tool_error(&v, "search_bad_mode").contains("sideways"),
        "{v}"
    );

    // Mistakes are tool errors with a message; the session goes on.
    assert!(
        tool_error(&v, "submit_unknown_lane").contains("no lane `no-such-lane`"),
        "{v}"
    );
    assert!(
        tool_error(&v, "status_missing").contains("no job 987654321"),
        "{v}"
    );
    assert!(
        tool_error(&v, "models_bad_action").contains("unknown action `explode`"),
        "{v}"
    );
    // An unknown tool is the one protocol error (MCP: -32602), raised by the SDK as MCPError.
    let unknown = &v["calls"]["unknown_tool"]["exception"];
    assert_eq!(unknown["type"], "MCPError", "{v}");
    assert_eq!(unknown["code"], -32602, "{v}");
    assert_eq!(v["ping_after"], true);
    assert_eq!(queue.stats(LANE).unwrap().ready, 1, "no job from mistakes");

    // models without a coordinator: a tool error that says where it looked.
    let err = tool_error(&v, "models");
    assert!(
        err.contains("no coordinator answers") && err.contains(&bind),
        "{err}"
    );

    // Phase 2: `horos-ref run` serves the coordinator (its own database; the lane's jobs stay).
    let run_config = d.join("run.toml");
    std::fs::write(&run_config, format!("database = \"run.db\"\n{coordinator}")).unwrap();
    let log = d.join("run.log");
    let _run = spawn_run(&run_config, &log);
    wait_for("the coordinator", Duration::from_secs(60), || {
        healthy(&bind)
    });
    let v = drive(&py, &config, d, "with a coordinator");
    let models = ok(&v, "models");
    let names: Vec<&str> = models["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{models}"))
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert_eq!(
        names,
        ["fake-chat"],
        "{models}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(models["data"][0]["state"], "READY", "{models}");
    assert_eq!(models["data"][0]["remote"], false, "{models}");
    // The second session saw the first one's work: a new job, the document known.
    let second = ok(&v, "submit")["id"].as_i64().unwrap();
    assert!(second > id, "{v}");
    assert_eq!(ok(&v, "status")["state"], "ready");
    assert_eq!(queue.stats(LANE).unwrap().ready, 2);
    let again = ok(&v, "ingest");
    assert_eq!(again["status"], "known", "{again}");
    assert_eq!(again["document"], document);
}
