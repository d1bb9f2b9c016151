//! The coordinator as a gateway, end to end through the binary: a task whose local rung fails
//! falls back to a remote ("cloud") model configured in the TOML, with its key from the
//! environment; `/v1/completions`; and an operator's `horos-ref models` (list, load, pin,
//! unload) and the MCP `models` tool on a pooled model the binary starts as a real process.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Running, cli, curl, free_port, free_ports, json, runtime, wait_for};
use horos_fakeai::{FakeConfig, FakeServer, Fault, Reply};
use serde_json::{Value, json};

/// `(HTTP status, JSON body)` of a data-plane request.
fn call(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    curl(method, url, body, None)
}

/// The same, behind the admin key.
fn call_with_key(method: &str, url: &str) -> (u16, Value) {
    curl(method, url, None, Some(ADMIN_KEY))
}

const TEST: &str = "a_task_falls_back_to_a_remote_model_and_an_operator_manages_pooled_models";
const KEY_VAR: &str = "HOROS_E2E_CLOUD_KEY";
const ADMIN_KEY: &str = "e2e-admin";

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse().ok()))
}

#[test]
fn a_task_falls_back_to_a_remote_model_and_an_operator_manages_pooled_models() {
    horos_fakeai::run_child_if_requested();
    let rt = runtime();
    let fake = |reply: &str| {
        rt.block_on(FakeServer::start(FakeConfig {
            reply: Reply::Fixed(reply.into()),
            ..FakeConfig::default()
        }))
        .unwrap()
    };
    let local = fake("from the local server");
    let remote = fake("from the cloud");
    local.set_fault(Fault::Status(503), None);

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Two ports in a row: the pooled model and the pinned one.
    let pool_port = free_ports(2);
    let base = format!("http://127.0.0.1:{port}");
    let exe = std::env::current_exe().unwrap();
    let script = |model: &str| {
        let child = serde_json::to_string(&["--port", "{port}", "--model", model]).unwrap();
        let script = format!(
            "exec env {}='{child}' {} --exact {TEST} --nocapture --test-threads=1",
            horos_fakeai::CHILD_ENV,
            exe.display()
        );
        serde_json::to_string(&["sh", "-c", &script]).unwrap()
    };
    let config = format!(
        r#"database = "jobs.db"
[coordinator]
bind = "127.0.0.1:{port}"
api_key = "{ADMIN_KEY}"
max_attempts = 3
retry_backoff_s = 0.05
[coordinator.tasks.summarize]
models = ["local", "cloud"]
[coordinator.remotes.cloud]
url = "{remote}/v1"
model = "provider-model"
api_key_env = "{KEY_VAR}"
[[coordinator.model]]
name = "local"
url = "{local}"
[coordinator.pool]
memory_mb = 1000
margin_mb = 0
port_min = {pool_port}
port_max = {pool_port_max}
start_timeout_s = 60
[[coordinator.pool.model]]
name = "pooled"
command = {cmd}
vram_mb = 100
[[coordinator.pool.model]]
name = "always"
command = {pinned_cmd}
vram_mb = 100
pin = true
"#,
        remote = remote.url(),
        local = local.url(),
        cmd = script("pooled"),
        pinned_cmd = script("always"),
        pool_port_max = pool_port + 1,
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("run.log");
    let _run = Running(
        Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .arg("run")
            .env(KEY_VAR, "sk-e2e-secret")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the coordinator", Duration::from_secs(60), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });

    // The pinned model is loaded at start, before any request names it.
    wait_for("the pinned model loaded", Duration::from_secs(60), || {
        let (code, v) = call_with_key("GET", &format!("{base}/api/v1/models"));
        code == 200
            && v["data"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|m| m["model"] == "always" && m["state"] == "READY" && m["pinned"] == true)
            })
    });

    // The task's local rung answers 503 every time: the request falls back to the remote.
    let chat = json!({"model": "task:summarize",
        "messages": [{"role": "user", "content": "hello"}]});
    let (code, v) = call("POST", &format!("{base}/v1/chat/completions"), Some(&chat));
    assert_eq!(code, 200, "{v}\n{}", read_log());
    assert_eq!(v["choices"][0]["message"]["content"], "from the cloud");
    let sent = remote.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].authorization.as_deref(),
        Some("Bearer sk-e2e-secret")
    );
    let body: Value = serde_json::from_str(&sent[0].body).unwrap();
    assert_eq!(body["model"], "provider-model");
    assert!(!read_log().contains("sk-e2e-secret"), "the key was logged");
    let metrics = Command::new("curl")
        .args(["-s", &format!("{base}/metrics")])
        .output()
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert_eq!(
        metric(
            &metrics,
            "horos_coordinator_fallbacks_total{model=\"local\"}"
        ),
        Some(1.0),
        "{metrics}"
    );

    // /v1/completions, to the remote by its name here.
    let (code, v) = call(
        "POST",
        &format!("{base}/v1/completions"),
        Some(&json!({"model": "cloud", "prompt": "Once upon a time"})),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], "from the cloud");
    assert_eq!(remote.requests()[1].path, "/v1/completions");

    // An async job, listed by `horos-ref jobs` with its client; a finished one cannot be
    // cancelled.
    let (code, v) = call(
        "POST",
        &format!("{base}/v1/jobs"),
        Some(
            &json!({"kind": "chat", "request": {"model": "cloud", "x_client_id": "nightly",
            "messages": [{"role": "user", "content": "later"}]}}),
        ),
    );
    assert_eq!(code, 202, "{v}");
    let id = v["id"].as_i64().unwrap();
    wait_for("the job done", Duration::from_secs(30), || {
        call("GET", &format!("{base}/v1/jobs/{id}"), None).1["state"] == "succeeded"
    });
    let listed = json(&cli(&path, &["--json", "jobs", "--client", "nightly"]));
    let rows = listed["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["id"], id);
    assert_eq!(rows[0]["model"], "cloud");
    assert_eq!(rows[0]["state"], "succeeded");
    let none = json(&cli(&path, &["--json", "jobs", "--client", "someone else"]));
    assert!(none["data"].as_array().unwrap().is_empty(), "{none}");
    let out = cli(&path, &["jobs", "--cancel", &id.to_string()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already finished"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The operator: list, preload, pin (an unload leaves it), unpin, unload.
    let models = |args: &[&str]| {
        let mut all = vec!["--json", "models"];
        all.extend_from_slice(args);
        cli(&path, &all)
    };
    let list = json(&models(&[]));
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert!(
        names.contains(&"local") && names.contains(&"cloud"),
        "{list}"
    );
    let loaded = json(&models(&["--load", "pooled"]));
    assert_eq!(loaded["ready"], true, "{loaded}\n{}", read_log());
    let (code, v) = call(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&json!({"model": "pooled", "messages": [{"role": "user", "content": "hi pool"}]})),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(json(&models(&["--pin", "pooled"]))["pinned"], true);
    assert_eq!(json(&models(&["--unload", "pooled"]))["unloaded"], false);
    let list = json(&models(&[]));
    let pooled = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == "pooled")
        .cloned()
        .unwrap_or_default();
    assert_eq!(pooled["state"], "READY", "{list}");
    assert_eq!(pooled["pinned"], true, "{list}");
    let pooled_port = u16::try_from(pooled["port"].as_u64().unwrap()).unwrap();
    assert!((pool_port..=pool_port + 1).contains(&pooled_port), "{list}");
    json(&models(&["--unpin", "pooled"]));
    assert_eq!(json(&models(&["--unload", "pooled"]))["unloaded"], true);
    wait_for("the pooled server to stop", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", pooled_port)).is_err()
    });

    // Another process books GPU memory through the CLI: the pool cannot take it.
    let lease = json(&common::acquire_lease(&path, "train:e2e", 0, 850));
    let lease_id = lease["id"].as_str().unwrap().to_owned();
    let (code, v) = call_with_key("GET", &format!("{base}/api/v1/leases"));
    assert_eq!(code, 200, "{v}");
    assert!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["id"] == lease_id.as_str() && l["owner"] == "train:e2e" && l["mb"] == 850),
        "{v}"
    );
    let (code, v) = call(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&json!({"model": "pooled", "x_timeout_s": 2,
            "messages": [{"role": "user", "content": "no room"}]})),
    );
    assert_eq!(code, 503, "the pool took leased memory: {v}");
    assert!(
        ["no_capacity", "model_loading"].contains(&v["error"]["code"].as_str().unwrap_or("")),
        "{v}"
    );
    let booked: u64 = json(&cli(&path, &["--json", "lease", "list"]))["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["gpu"] == 0)
        .map(|l| l["mb"].as_u64().unwrap())
        .sum();
    assert!(booked <= 1000, "{booked} MB booked of 1,000: double-booked");
    // Too much for what is left: refused by the ledger, over HTTP too.
    let (code, v) = curl(
        "POST",
        &format!("{base}/api/v1/leases"),
        Some(&json!({"owner": "greedy", "parts": [[0, 5000]], "ttl_s": 60})),
        Some(ADMIN_KEY),
    );
    assert_eq!(code, 409, "{v}");
    assert_eq!(v["error"]["code"], "insufficient_vram");
    // Released over HTTP: the pool loads the model.
    let (code, v) = call_with_key("DELETE", &format!("{base}/api/v1/leases/{lease_id}"));
    assert_eq!(code, 200, "{v}");
    let (code, v) = call(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&json!({"model": "pooled", "x_timeout_s": 60,
            "messages": [{"role": "user", "content": "room again"}]})),
    );
    assert_eq!(code, 200, "{v}\n{}", read_log());

    // A fixed server cannot be unloaded: a clear error, a failed exit.
    let out = models(&["--unload", "local"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("409") && err.contains("cannot be unloaded"),
        "{err}"
    );

    // The same through MCP: the `models` tool.
    let mut mcp = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // One request at a time (the server answers concurrent ones in any order).
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(mcp.stdout.take().unwrap());
    let mut ask = |msg: Value| -> Option<Value> {
        writeln!(stdin, "{msg}").unwrap();
        msg.get("id")?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        Some(serde_json::from_str(&line).unwrap())
    };
    ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "0"}}}),
    );
    ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut tool = |id: i64, arguments: Value| {
        let a = ask(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "models", "arguments": arguments}}))
        .unwrap();
        assert_eq!(a["result"]["isError"], false, "{a}");
        a["result"]["structuredContent"].clone()
    };
    let loaded = tool(2, json!({"action": "load", "model": "pooled"}));
    let listed = tool(3, json!({}));
    drop(stdin);
    mcp.wait().unwrap();
    assert_eq!(loaded["ready"], true, "{loaded}");
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["model"] == "pooled" && m["state"] == "READY"),
        "{listed}"
    );
}
