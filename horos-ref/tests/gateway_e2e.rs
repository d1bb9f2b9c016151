//! The coordinator as a gateway, end to end through the binary: a task whose local rung fails
//! falls back to a remote ("cloud") model configured in the TOML, with its key from the
//! environment; `/v1/completions`; and an operator's `horos-ref models` (list, load, pin,
//! unload) and the MCP `models` tool on a pooled model the binary starts as a real process.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Running, cli, curl, curl_text, free_port, free_ports, json, runtime, wait_for};
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
    // The pooled model's server log, by the model's name.
    let logs = json(&cli(&path, &["--json", "logs"]));
    assert!(
        logs.as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "pooled" && l["kind"] == "model"),
        "{logs}"
    );
    let log = json(&cli(&path, &["--json", "logs", "pooled", "-n", "100"]));
    assert!(
        log["text"]
            .as_str()
            .unwrap()
            .contains("=== horos-servers: starting pooled"),
        "{log}"
    );
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

const TEAM_A: &str = "sk-team-a-7d1f";
const TEAM_B: &str = "sk-team-b-93ce";
const WRONG: &str = "sk-not-a-key";
const SECURE_ADMIN: &str = "adm-4c2e9b";

/// `(status, body)` of `method url` with `key` as a Bearer token, `None` for no key.
fn as_caller(method: &str, url: &str, body: Option<&Value>, key: Option<&str>) -> (u16, Value) {
    curl(method, url, body, key)
}

/// Every data-plane route with keys configured, through the binary bound to 0.0.0.0 and reached
/// through 127.0.0.1: without a key, with a wrong key, with a key that may not call the model,
/// with the owner's key, with another key and with the admin key; what the refused requests did
/// upstream (nothing: fakeai's request log); `/status` and `/metrics` behind the admin key off
/// loopback; and no key in the log, the pages, the errors or the CLI's output.
#[test]
fn every_data_route_passes_one_admission_and_a_job_belongs_to_its_caller() {
    let rt = runtime();
    let fake = |reply: &str| {
        rt.block_on(FakeServer::start(FakeConfig {
            reply: Reply::Fixed(reply.into()),
            ..FakeConfig::default()
        }))
        .unwrap()
    };
    let open = fake("from open");
    let paid = fake("from paid");
    let embed = fake("embeddings");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = format!(
        r#"database = "jobs.db"
[coordinator]
bind = "0.0.0.0:{port}"
api_key_env = "HOROS_E2E_ADMIN_KEY"
[coordinator.keys.team-a]
key_env = "HOROS_E2E_TEAM_A"
models = ["open"]
[coordinator.keys.team-b]
key_env = "HOROS_E2E_TEAM_B"
[[coordinator.model]]
name = "open"
url = "{open}"
[[coordinator.model]]
name = "paid"
url = "{paid}"
[ingest]
inbox = "inbox"
embeddings_url = "{embed}"
embeddings_model = "fake-embed"
"#,
        open = open.url(),
        paid = paid.url(),
        embed = embed.url(),
    );
    std::fs::create_dir_all(dir.path().join("inbox")).unwrap();
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("run.log");
    let with_env = |c: &mut Command| {
        c.env("HOROS_E2E_ADMIN_KEY", SECURE_ADMIN)
            .env("HOROS_E2E_TEAM_A", TEAM_A)
            .env("HOROS_E2E_TEAM_B", TEAM_B)
            .env("RUST_LOG", "debug");
    };
    let mut run = Command::new(BIN);
    run.arg("--config").arg(&path).arg("run");
    with_env(&mut run);
    let _run = Running(
        run.stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the coordinator", Duration::from_secs(60), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });
    // Every answer is kept, to look for the keys in them at the end.
    let mut seen = String::new();
    let mut ask = |method: &str, route: &str, body: Option<&Value>, key: Option<&str>| {
        let (code, v) = as_caller(method, &format!("{base}{route}"), body, key);
        seen.push_str(&v.to_string());
        (code, v)
    };
    let callers_refused = |code_none: u16, code_wrong: u16| (code_none, code_wrong);
    let chat =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});

    // Chat: 401 without a key and with a wrong one, 403 for a key that may not call `paid`.
    for (key, expect) in [
        (None, 401),
        (Some(WRONG), 401),
        (Some(SECURE_ADMIN), 401),
        (Some(TEAM_A), 403),
    ] {
        let (code, v) = ask("POST", "/v1/chat/completions", Some(&chat("paid")), key);
        assert_eq!(code, expect, "chat as {key:?}: {v}");
    }
    assert!(paid.requests().is_empty(), "a refused chat ran upstream");
    let (code, v) = ask(
        "POST",
        "/v1/chat/completions",
        Some(&chat("paid")),
        Some(TEAM_B),
    );
    assert_eq!(code, 200, "{v}\n{}", read_log());
    let (code, _) = ask(
        "POST",
        "/v1/chat/completions",
        Some(&chat("open")),
        Some(TEAM_A),
    );
    assert_eq!(code, 200);
    assert_eq!(paid.requests().len(), 1);

    // Models: what the caller may call.
    let (none, wrong) = callers_refused(
        ask("GET", "/v1/models", None, None).0,
        ask("GET", "/v1/models", None, Some(WRONG)).0,
    );
    assert_eq!((none, wrong), (401, 401));
    let ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (code, v) = ask("GET", "/v1/models", None, Some(TEAM_A));
    assert_eq!((code, ids(&v)), (200, vec!["open".to_owned()]), "{v}");
    let (code, v) = ask("GET", "/v1/models", None, Some(TEAM_B));
    assert_eq!(code, 200);
    let mut all = ids(&v);
    all.sort();
    assert_eq!(all, ["open", "paid"], "{v}");

    // Search: keys first; nothing embedded for a refused caller.
    let query = json!({"query": "anything", "k": 3});
    for key in [None, Some(WRONG), Some(SECURE_ADMIN)] {
        assert_eq!(
            ask("POST", "/v1/search", Some(&query), key).0,
            401,
            "search as {key:?}"
        );
    }
    assert!(
        embed.requests().is_empty(),
        "a refused search embedded its query"
    );
    let (code, v) = ask("POST", "/v1/search", Some(&query), Some(TEAM_A));
    assert_eq!(code, 200, "{v}\n{}", read_log());

    // Jobs: submitted as the caller, checked as its call would be.
    let job = |model: &str| json!({"kind": "chat", "request": chat(model)});
    for (key, expect) in [(None, 401), (Some(WRONG), 401), (Some(TEAM_A), 403)] {
        let (code, v) = ask("POST", "/v1/jobs", Some(&job("paid")), key);
        assert_eq!(code, expect, "job as {key:?}: {v}");
    }
    let (code, v) = ask("POST", "/v1/jobs", Some(&job("paid")), Some(TEAM_B));
    assert_eq!(code, 202, "{v}");
    let id = v["id"].as_i64().unwrap();
    let route = format!("/v1/jobs/{id}");
    wait_for("team-b's job done", Duration::from_secs(30), || {
        ask("GET", &route, None, Some(TEAM_B)).1["state"] == "succeeded"
    });
    assert_eq!(paid.requests().len(), 2, "only team-b's job ran on `paid`");
    let (code, v) = ask("GET", &route, None, Some(TEAM_B));
    assert_eq!(code, 200);
    assert_eq!(v["result"]["choices"][0]["message"]["content"], "from paid");
    for (key, expect) in [
        (None, 401),
        (Some(WRONG), 401),
        (Some(SECURE_ADMIN), 401),
        (Some(TEAM_A), 404),
    ] {
        let (code, v) = ask("GET", &route, None, key);
        assert_eq!(code, expect, "GET another's job as {key:?}: {v}");
        assert!(v["result"].is_null(), "{v}");
    }
    // The admin sees every job, with its key.
    let (code, v) = ask("GET", "/api/v1/jobs", None, Some(SECURE_ADMIN));
    assert_eq!(code, 200, "{v}");
    let rows = v["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "refused submissions were queued: {v}");
    assert_eq!(rows[0]["key"], "team-b");

    // Cancel: a running job of team-b's (the upstream hangs on it).
    paid.set_fault(Fault::Hang, Some(1));
    let (code, v) = ask("POST", "/v1/jobs", Some(&job("paid")), Some(TEAM_B));
    assert_eq!(code, 202, "{v}");
    let hung = v["id"].as_i64().unwrap();
    let hung_route = format!("/v1/jobs/{hung}");
    wait_for("the job running", Duration::from_secs(30), || {
        ask("GET", &hung_route, None, Some(TEAM_B)).1["state"] == "running"
    });
    let cancel = format!("{hung_route}/cancel");
    for (key, expect) in [
        (None, 401),
        (Some(WRONG), 401),
        (Some(SECURE_ADMIN), 401),
        (Some(TEAM_A), 404),
    ] {
        assert_eq!(
            ask("POST", &cancel, None, key).0,
            expect,
            "cancel as {key:?}"
        );
    }
    assert_eq!(
        ask("GET", &hung_route, None, Some(TEAM_B)).1["state"],
        "running"
    );
    let (code, v) = ask("POST", &cancel, None, Some(TEAM_B));
    assert_eq!((code, v["was"].as_str()), (200, Some("running")), "{v}");
    // A finished job: the owner hears 409, another key 404, the admin (through /api) 409.
    let finished = format!("{route}/cancel");
    assert_eq!(ask("POST", &finished, None, Some(TEAM_B)).0, 409);
    assert_eq!(ask("POST", &finished, None, Some(TEAM_A)).0, 404);
    let admin_cancel = format!("/api/v1/jobs/{id}/cancel");
    assert_eq!(ask("POST", &admin_cancel, None, None).0, 401);
    assert_eq!(ask("POST", &admin_cancel, None, Some(SECURE_ADMIN)).0, 409);

    // Status and metrics off loopback: the admin key, or nothing.
    for page in ["/status", "/metrics"] {
        let url = format!("{base}{page}");
        assert_eq!(curl_text(&url).0, 401, "{page} without the admin key");
        assert_eq!(as_caller("GET", &url, None, Some(TEAM_B)).0, 401, "{page}");
        let out = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", "-H"])
            .arg(format!("authorization: Bearer {SECURE_ADMIN}"))
            .arg(&url)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.ends_with("\n200"), "{page} with the admin key: {text}");
        seen.push_str(&text);
    }
    assert_eq!(call("GET", &format!("{base}/health"), None).0, 200);

    // The CLI reads the admin key from the same variable.
    let mut jobs = Command::new(BIN);
    jobs.arg("--config").arg(&path).args(["--json", "jobs"]);
    with_env(&mut jobs);
    let listed = jobs.output().unwrap();
    let listed_json = json(&listed);
    assert_eq!(
        listed_json["data"].as_array().unwrap().len(),
        2,
        "{listed_json}"
    );
    seen.push_str(&String::from_utf8_lossy(&listed.stdout));
    seen.push_str(&String::from_utf8_lossy(&listed.stderr));
    // Without the variable: a clear error naming it, not the key.
    let denied = cli(&path, &["jobs"]);
    assert!(!denied.status.success());
    let denied = String::from_utf8_lossy(&denied.stderr).to_string();
    assert!(denied.contains("HOROS_E2E_ADMIN_KEY"), "{denied}");
    seen.push_str(&denied);

    // `jobs --submit --wait`: queued through the data plane as the key's, followed, answered;
    // a key that may not call the model is refused at submission, as its call would be.
    let submit = |key: &str| {
        cli(
            &path,
            &[
                "jobs", "--submit", "chat", "--model", "paid", "--prompt", "later", "--wait",
                "--key", key,
            ],
        )
    };
    let answered = submit(TEAM_B);
    let text = String::from_utf8_lossy(&answered.stdout).to_string();
    assert!(
        answered.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    assert!(
        text.contains("succeeded") && text.contains("from paid"),
        "{text}"
    );
    seen.push_str(&text);
    let refused = submit(TEAM_A);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(why.contains("paid"), "{why}");
    seen.push_str(&why);

    let log_text = read_log();
    for secret in [TEAM_A, TEAM_B, SECURE_ADMIN, WRONG] {
        assert!(!log_text.contains(secret), "{secret} is in the log");
        assert!(!seen.contains(secret), "{secret} is in an answer or output");
    }
    assert!(
        log_text.contains("DEBUG") || log_text.contains("INFO"),
        "nothing logged"
    );
}

/// `public_status = true` on a non-loopback bind: the pages are open, with a warning at start.
#[test]
fn public_status_opens_the_pages_off_loopback_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let path = dir.path().join("horos.toml");
    std::fs::write(
        &path,
        format!(
            "database = \"jobs.db\"\n[coordinator]\nbind = \"0.0.0.0:{port}\"\n\
             api_key_env = \"HOROS_E2E_ADMIN_KEY\"\npublic_status = true\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("run.log");
    let _run = Running(
        Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .arg("run")
            .env("HOROS_E2E_ADMIN_KEY", SECURE_ADMIN)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for("the coordinator", Duration::from_secs(60), || {
        call("GET", &format!("{base}/health"), None).0 == 200
    });
    let (code, page) = curl_text(&format!("{base}/status"));
    assert_eq!(code, 200);
    // run's own log is a server log: on a page open to anyone, its lines are not shown.
    assert!(!page.contains("Server logs"), "{page}");
    assert_eq!(curl_text(&format!("{base}/metrics")).0, 200);
    // The admin API still needs its key.
    assert_eq!(call("GET", &format!("{base}/api/v1/config"), None).0, 401);
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("public_status"), "{log_text}");
    assert!(!log_text.contains(SECURE_ADMIN));
}
