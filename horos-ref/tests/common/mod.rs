//! Helpers shared by the binary's integration tests.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod nodes;

/// The one test kit's helpers (ports, waits, the HOROS_REQUIRE_* convention, a runtime).
#[allow(unused_imports)] // each test binary uses some of them
pub use horos_testkit::{free_port, free_ports, runtime, skip_or_fail, wait_for};

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

/// The sample PDFs' directory (scripts/fetch_sample_pdfs.sh, run here on first use:
/// `HOROS_SAMPLE_PDFS`, else `~/.cache/horos-rs/sample-pdfs`), when they are there (a skip
/// message otherwise, or a failure under `HOROS_REQUIRE_SAMPLES=1`).
pub fn samples() -> Option<PathBuf> {
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
    if !dir.join(".complete-v3").exists() {
        skip_or_fail(
            "HOROS_REQUIRE_SAMPLES",
            &format!(
                "the sample PDFs are missing in {} (scripts/fetch_sample_pdfs.sh failed)",
                dir.display()
            ),
        );
        return None;
    }
    Some(dir)
}

/// The 4-page excerpt of the camlidl manual (scripts/fetch_sample_pdfs.sh, run here on first use).
pub fn excerpt() -> Option<PathBuf> {
    let pdf = samples()?.join("excerpt.pdf");
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

/// A one-page blank PDF (A6): no text layer.
pub fn blank_pdf() -> Vec<u8> {
    horos_testkit::pdf::blank()
}

/// Sends `signal` to `child` and waits (at most 60 s) for it to exit.
pub fn stop(child: &mut std::process::Child, signal: i32) -> std::process::ExitStatus {
    unsafe { libc::kill(child.id() as i32, signal) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "horos-ref did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The binary running; SIGTERMed if the test fails midway, so that it stops the servers it
/// started.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = stop(&mut self.0, libc::SIGTERM);
        }
    }
}

/// `horos-ref --config CONFIG run` in the background, its log (stderr) in `log`.
pub fn spawn_run(config: &Path, log: &Path) -> Running {
    Running(
        Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("run")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// The llama-server processes running now: `(pid, argv)`.
pub fn llama_servers() -> Vec<(i32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.contains("llama-server")) {
            found.push((pid, args));
        }
    }
    found
}

/// The `--port` a command line gives.
pub fn port_arg(args: &[String]) -> Option<u16> {
    args.iter()
        .position(|a| a == "--port")
        .and_then(|i| args.get(i + 1))
        .and_then(|p| p.parse().ok())
}

/// `(HTTP status, JSON body)` of a request made with curl (`Null` for a body that is not
/// JSON), with `key` as a Bearer token when given.
pub fn curl(
    method: &str,
    url: &str,
    body: Option<&serde_json::Value>,
    key: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-m", "180", "-X", method, "-w", "\n%{http_code}", url]);
    if let Some(k) = key {
        cmd.args(["-H", &format!("authorization: Bearer {k}")]);
    }
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "-d", &b.to_string()]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// `(HTTP status, body as text)` of a GET made with curl (an HTML page, say).
pub fn curl_text(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-m", "60", "-w", "\n%{http_code}", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// `model`'s slot on the coordinator at `base`, from its JSON status (`Null` when it has none).
pub fn status_slot(base: &str, model: &str) -> serde_json::Value {
    let (code, v) = curl("GET", &format!("{base}/api/v1/status"), None, None);
    assert_eq!(code, 200, "{v}");
    v["slots"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["model"] == model))
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// The command (as TOML) that runs this test binary again as a fake OpenAI server (fakeai)
/// with `args` (`{port}` expanded by the server's owner); `test` is the calling test, which
/// must call `horos_fakeai::run_child_if_requested()` first.
pub fn fake_server_command(test: &str, args: &[&str]) -> String {
    let exe = std::env::current_exe().unwrap();
    let child = serde_json::to_string(args).unwrap();
    let script = format!(
        "exec env {}='{child}' {} --exact {test} --nocapture --test-threads=1",
        horos_fakeai::CHILD_ENV,
        exe.display()
    );
    serde_json::to_string(&["sh", "-c", &script]).unwrap()
}

/// `horos-ref lease acquire` of `mb` on `gpu` for `owner` (10 minutes), as another process
/// books GPU memory.
pub fn acquire_lease(config: &Path, owner: &str, gpu: u32, mb: u64) -> Output {
    cli(
        config,
        &[
            "--json",
            "lease",
            "acquire",
            "--owner",
            owner,
            "--gpu",
            &gpu.to_string(),
            "--mb",
            &mb.to_string(),
            "--ttl-s",
            "600",
        ],
    )
}

/// A one-page PDF with `text` on it (Helvetica 24 pt).
pub fn tiny_pdf(text: &str) -> Vec<u8> {
    horos_testkit::pdf::text(&[text], 24)
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// `(HTTP status, Retry-After, JSON body)` of a chat request through the coordinator, with curl.
pub fn chat_via(
    base: &str,
    model: &str,
    timeout_s: f64,
) -> (u16, Option<String>, serde_json::Value) {
    let body = serde_json::json!({"model": model, "x_timeout_s": timeout_s,
        "messages": [{"role": "user", "content": format!("hello {model}")}]});
    let out = std::process::Command::new("curl")
        .args(["-s", "-m", "120", "-D", "-", "-w", "\n%{http_code}", "-H"])
        .arg("content-type: application/json")
        .args([
            "-d",
            &body.to_string(),
            &format!("{base}/v1/chat/completions"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (rest, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    let (head, body) = rest.split_once("\r\n\r\n").unwrap_or(("", rest));
    let retry_after = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("retry-after")
            .then(|| v.trim().to_owned())
    });
    (
        code.trim().parse().unwrap_or(0),
        retry_after,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// The live leases of the ledger as `(owner, gpu, mb)`, sorted, through the CLI.
pub fn leases(config: &Path) -> Vec<(String, u64, u64)> {
    let out = cli(config, &["--json", "lease", "list"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut l: Vec<(String, u64, u64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["owner"].as_str().unwrap().to_owned(),
                l["gpu"].as_u64().unwrap(),
                l["mb"].as_u64().unwrap(),
            )
        })
        .collect();
    l.sort();
    l
}

/// `n` chat jobs for `model`, enqueued on `lane` in one transaction (the backlog appears
/// whole); their ids.
pub fn chat_jobs(queue: &squeueha::Queue, lane: &str, model: &str, n: usize) -> Vec<i64> {
    let jobs: Vec<squeueha::NewJob> = (0..n)
        .map(|i| {
            squeueha::NewJob::json(&serde_json::json!({"model": model,
                "messages": [{"role": "user", "content": format!("{lane} job {i}")}]}))
            .unwrap()
        })
        .collect();
    queue
        .enqueue_batch(lane, &jobs)
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect()
}

/// Whether every job of `ids` is done (or gone: retention may have purged it).
pub fn jobs_done(queue: &squeueha::Queue, ids: &[i64]) -> bool {
    ids.iter().all(|id| {
        queue
            .get(*id)
            .unwrap()
            .is_none_or(|j| j.state == squeueha::JobState::Done)
    })
}

/// `horos-ref mcp` driven as an MCP client drives it: JSON-RPC 2.0, one message a line, on its
/// stdin and stdout.
pub struct Mcp {
    /// The server process.
    pub child: std::process::Child,
    /// Its standard input (dropped: the server ends).
    pub stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Mcp {
    /// Starts `horos-ref --config CONFIG mcp`.
    pub fn start(config: &Path) -> Mcp {
        use std::process::Stdio;
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        Mcp {
            child,
            stdin,
            stdout,
        }
    }

    /// Writes one message.
    pub fn send(&mut self, message: &serde_json::Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// A request and its reply (whose `id` must be `id`).
    pub fn request(
        &mut self,
        id: i64,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        use std::io::BufRead;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    /// The result of calling `tool` with `args`.
    pub fn call(&mut self, id: i64, tool: &str, args: serde_json::Value) -> serde_json::Value {
        let reply = self.request(
            id,
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        );
        reply["result"].clone()
    }

    /// The MCP handshake: `initialize`, then the `initialized` notification.
    pub fn initialize(&mut self) -> serde_json::Value {
        let init = self.request(
            0,
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "test-client", "version": "1"}}),
        );
        self.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }
}

/// The variables of `scripts/setup_llama.sh`'s env file (`HOROS_LLAMA_SERVER`,
/// `HOROS_SMOLLM2_GGUF`, `HOROS_MINILM_GGUF`, each naming an existing file), from the
/// environment; `None` (after `skip_or_fail` under `HOROS_REQUIRE_LLAMA`) when one is missing.
pub fn llama_env() -> Option<Vec<(&'static str, String)>> {
    let vars = [
        "HOROS_LLAMA_SERVER",
        "HOROS_SMOLLM2_GGUF",
        "HOROS_MINILM_GGUF",
    ];
    let found: Vec<(&'static str, String)> = vars
        .iter()
        .filter_map(|k| {
            let v = std::env::var(k).ok().filter(|p| Path::new(p).is_file())?;
            Some((*k, v))
        })
        .collect();
    if found.len() == vars.len() {
        return Some(found);
    }
    skip_or_fail(
        "HOROS_REQUIRE_LLAMA",
        "no llama-server / SmolLM2 / MiniLM (bash scripts/setup_llama.sh, then `set -a; . ENV_FILE`)",
    );
    None
}

/// The directory of the llama models `HOROS_SMOLLM2_GGUF` names (scripts/setup_llama.sh puts
/// SmolLM2's and MiniLM's GGUF files and MiniLM's Hugging Face folder there).
pub fn llama_models_dir(env: &[(&'static str, String)]) -> PathBuf {
    let smollm2 = env
        .iter()
        .find(|(k, _)| *k == "HOROS_SMOLLM2_GGUF")
        .unwrap();
    Path::new(&smollm2.1).parent().unwrap().to_path_buf()
}

/// `horos-ref --config CONFIG run` until `/status` answers 200 at `coordinator`
/// (`127.0.0.1:PORT`), within `timeout`; its log (stderr) in `log`.
pub fn run_until_status(
    config: &Path,
    log: &Path,
    coordinator: &str,
    timeout: std::time::Duration,
) -> Running {
    let mut running = spawn_run(config, log);
    wait_for("/status to answer", timeout, || {
        if let Some(s) = running.0.try_wait().unwrap() {
            panic!(
                "horos-ref run exited ({s}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        curl_text(&format!("http://{coordinator}/status")).0 == 200
    });
    running
}

/// A finished command's stdout and stderr together, for a failure's message.
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A chat with `chat` and an embedding by `embedder` through the coordinator at
/// `coordinator` (`127.0.0.1:PORT`), each answered 200.
pub fn assert_chat_and_embedding(coordinator: &str, chat: &str, embedder: &str) {
    let (code, answer) = curl(
        "POST",
        &format!("http://{coordinator}/v1/chat/completions"),
        Some(&serde_json::json!({"model": chat, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hello"}]})),
        None,
    );
    assert_eq!(code, 200, "{answer}");
    let (code, answer) = curl(
        "POST",
        &format!("http://{coordinator}/v1/embeddings"),
        Some(&serde_json::json!({"model": embedder, "input": "Hello"})),
        None,
    );
    assert_eq!(code, 200, "{answer}");
    assert!(answer["data"][0]["embedding"].as_array().unwrap().len() > 100);
}

/// Prometheus' own lint of a `/metrics` text (`promtool check metrics`), its complaints in the
/// panic message; `false` when promtool is not installed (the caller skips, or fails with
/// `HOROS_REQUIRE_PROMTOOL=1`).
#[allow(dead_code)] // not every test binary lints metrics
pub fn promtool_accepts(metrics: &str) -> bool {
    use std::io::Write as _;
    use std::process::Stdio;
    let Ok(mut promtool) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        return false;
    };
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}\n{metrics}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// The GPU view's auditor counted no breach of any kind (`/metrics` text).
pub fn assert_gpu_view_held(metrics: &str) {
    for kind in ["misplaced", "overbooked", "unleased", "unused"] {
        let series = format!("horos_gpu_view_breaches_total{{kind=\"{kind}\"}} 0");
        assert!(metrics.contains(&series), "{series}:\n{metrics}");
    }
}

/// The demo's shape on fake servers: a `chat` lane (192 MB) and a pooled `minilm` (300 MB,
/// `pin = true` when `pinned`) behind the coordinator on `port`, the lane's server on
/// `lane_port`, the pool's from `pool_port`; `gpus` is the `[gpus]`/`[allocator]` part.
pub fn lane_and_pool_config(
    test: &str,
    (port, lane_port, pool_port): (u16, u16, u16),
    gpus: &str,
    pinned: bool,
) -> String {
    format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n{gpus}\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\n\
         [coordinator.pool]\nport_min = {pool_port}\nport_max = {}\nstart_timeout_s = 60\n\
         [[coordinator.pool.model]]\nname = \"minilm\"\ncategory = \"embedding\"\npin = {pinned}\n\
         vram_mb = 300\ncommand = {}\n\
         [[lane]]\nqueue = \"chat\"\nurl = \"http://127.0.0.1:{lane_port}\"\nmodel = \"smollm2\"\n\
         batch_size = 4\nstart_wait_s = 30\nvram_mb = 192\ncommand = {}\n",
        pool_port + 1,
        fake_server_command(test, &["--port", "{port}", "--model", "minilm"]),
        fake_server_command(test, &["--port", "{port}", "--slots", "4"]),
    )
}
