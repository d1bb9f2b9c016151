//! `horos-ref demo`: `run` on an embedded configuration (`horos-ref demo --print-config` prints
//! it), then a client of the running system through its own HTTP API. The configuration
//! (`examples/configs/cpu.toml`) has a lane with its llama-server (SmolLM2, chat), the model pool
//! (MiniLM, embeddings), the coordinator and the ingest pipeline (Tesseract, MiniLM through the
//! coordinator, the pixel-patch visual index); the demo writes it into its directory with this
//! machine's paths and free ports, starts `horos-ref --config FILE run` as a child process, and
//! then: ingests the sample PDFs (`POST /api/v1/documents`), searches each way (`POST
//! /v1/search`: full text, MiniLM vectors, and MaxSim with a page image as the question), asks
//! the question of the pages (`/v1/answers`: SmolLM2 answers, citing them), runs a job through the lane
//! (`/api/v1/lanes/jobs`), and reads the status page and the metrics. Then it serves until
//! Ctrl-C, or stops with `--exit`.

mod client;
mod out;
mod tools;

use std::path::{Path, PathBuf};
use std::time::Instant;

use horos_servers::{ManagedServer, ProbeConfig, ProcessConfig, ProcessServer, RunState};
use serde_json::json;
use tokio::signal::unix::{Signal, SignalKind, signal};

use self::out::Out;

/// The question the demo asks when `--query` is not given: answered by page 18 of the camlidl
/// manual, the first sample document (full-text, vector and MaxSim search all find that page).
pub const DEFAULT_QUERY: &str =
    "How are errors reported with HRESULT return codes in COM interfaces?";

/// The embedded configuration: `examples/configs/cpu.toml`, the one CPU configuration (its
/// `${VAR}`s, ports and relative paths replaced for this machine by [`config_text`]).
const CONFIG_TEMPLATE: &str = include_str!("../../examples/configs/cpu.toml");

/// Options of `horos-ref demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the demo keeps its configuration, databases (SQLite), inbox, page images and
    /// server logs [default: $HOROS_CACHE/demo, else ~/.cache/horos/demo].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The coordinator's port on 127.0.0.1 (0: any free port; a busy port falls back to a free
    /// one, with a note).
    #[arg(long, default_value_t = 8210)]
    pub port: u16,
    /// Exit after the demo's steps instead of serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
    /// Print the configuration the demo runs (with this machine's paths and ports) and exit:
    /// `horos-ref --config FILE run` on it runs the same system.
    #[arg(long)]
    pub print_config: bool,
    /// The question searched for and asked about.
    #[arg(long, default_value = DEFAULT_QUERY)]
    pub query: String,
    /// Ingest these PDFs instead of the sample documents (repeatable; copied into the inbox).
    #[arg(long = "pdf", value_name = "FILE")]
    pub pdfs: Vec<PathBuf>,
    /// The sample PDFs' directory [default: $HOROS_SAMPLE_PDFS, else
    /// ~/.cache/horos-rs/sample-pdfs, filled by scripts/fetch_sample_pdfs.sh].
    #[arg(long, value_name = "DIR")]
    pub samples: Option<PathBuf>,
}

fn default_dir() -> PathBuf {
    std::env::var_os("HOROS_CACHE")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/horos")))
        .unwrap_or_else(|| PathBuf::from(".horos"))
        .join("demo")
}

/// The embedded configuration for this machine: `llama` (else the programs' bare names), the
/// demo's directory and ports (`[coordinator, lane, pool]`) in place of the file's own
/// (8210, 8211, 8213, paths relative to it).
fn config_text(llama: Option<&tools::Llama>, dir: &Path, ports: [u16; 3]) -> String {
    let path = |p: Option<&Path>, name: &str| {
        toml::Value::String(p.map_or_else(|| name.to_owned(), |p| p.display().to_string()))
            .to_string()
    };
    let [port, chat, pool] = ports;
    let at = |file: &str| toml::Value::String(dir.join(file).display().to_string()).to_string();
    // The file's own header (how to run it where it is) gives way to the demo's.
    let body = CONFIG_TEMPLATE
        .split_once("\n\n")
        .map_or(CONFIG_TEMPLATE, |(_, b)| b);
    let header = "# The configuration `horos-ref demo` runs: examples/configs/cpu.toml with this \
                  machine's paths and\n# ports. `horos-ref --config FILE run` runs exactly what \
                  the demo runs; edit it for your own\n# models and GPUs (horos-ref/README.md \
                  describes every section).\n\n";
    let text = format!("{header}{body}");
    text.replace(
        "\"${HOROS_LLAMA_SERVER}\"",
        &path(llama.map(|l| l.server.as_path()), "llama-server"),
    )
    .replace(
        "\"${HOROS_SMOLLM2_GGUF}\"",
        &path(llama.map(|l| l.smollm2.as_path()), "smollm2.gguf"),
    )
    .replace(
        "\"${HOROS_MINILM_GGUF}\"",
        &path(llama.map(|l| l.minilm.as_path()), "minilm.gguf"),
    )
    .replace("\"horos.db\"", &at("horos.db"))
    .replace("inbox = \"inbox\"", &format!("inbox = {}", at("inbox")))
    .replace("dir = \"ingest\"", &format!("dir = {}", at("ingest")))
    .replace("127.0.0.1:8210", &format!("127.0.0.1:{port}"))
    .replace("127.0.0.1:8211", &format!("127.0.0.1:{chat}"))
    .replace("\"--port\", \"8211\"", &format!("\"--port\", \"{chat}\""))
    .replace("port_min = 8213", &format!("port_min = {pool}"))
    .replace("port_max = 8213", &format!("port_max = {pool}"))
}

/// The lane's and the pool's ports: free, and the pool's not the lane's second server's (the
/// lane's port + 1, where it runs when the allocator gives it GPU 1).
fn lane_and_pool_ports() -> Result<[u16; 2], String> {
    let chat = free_port()?;
    for _ in 0..16 {
        let pool = free_port()?;
        if pool != chat && pool != chat.wrapping_add(1) {
            return Ok([chat, pool]);
        }
    }
    Err("no free loopback port for the model pool".into())
}

/// A free loopback port.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// The coordinator's port: `wanted` when it is free (0: any), else a free one, said so.
fn coordinator_port(wanted: u16, out: &Out) -> Result<u16, String> {
    if wanted == 0 {
        return free_port();
    }
    match std::net::TcpListener::bind(("127.0.0.1", wanted)) {
        Ok(_) => Ok(wanted),
        Err(e) => {
            out.event(
                "port_busy",
                format!("127.0.0.1:{wanted} is not available ({e}); using a free port instead"),
                json!({"port": wanted, "error": e.to_string()}),
            );
            free_port()
        }
    }
}

/// Runs the demo.
pub async fn run(args: DemoArgs, json_out: bool) -> Result<(), String> {
    let dir = args.dir.clone().unwrap_or_else(default_dir);
    if args.print_config {
        let llama = tools::Llama::find().ok();
        let [chat, pool] = lane_and_pool_ports()?;
        let ports = [coordinator_port(args.port, &Out::quiet())?, chat, pool];
        print!("{}", config_text(llama.as_ref(), &absolute(&dir)?, ports));
        return Ok(());
    }
    let out = Out::new(json_out);
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut system = None;
    let result = tokio::select! {
        r = demo(&args, &dir, &out, &mut system) => r,
        () = stop_signal(&mut sigint, &mut sigterm) => Err("interrupted".to_owned()),
    };
    if let Some(running) = &system
        && result.is_ok()
        && !args.exit
    {
        out.event(
            "serving",
            "serving until Ctrl-C (SIGINT) or SIGTERM",
            json!({}),
        );
        tokio::select! {
            () = stop_signal(&mut sigint, &mut sigterm) => {}
            () = ended(&running.server) => out.event(
                "run_ended",
                "horos-ref run ended on its own (its log says why)",
                json!({}),
            ),
        }
        out.event("stopping", "stopping...", json!({}));
    }
    if let Some(running) = system {
        // SIGTERM, as Ctrl-C would: run finishes the batch in progress and stops its servers.
        let stopped = running.server.stop().await.map_err(|e| e.to_string());
        out.event(
            "run_stopped",
            match &stopped {
                Ok(()) => "horos-ref run stopped: its servers are stopped".to_owned(),
                Err(e) => format!("horos-ref run: {e}"),
            },
            json!({"ok": stopped.is_ok(), "error": stopped.err()}),
        );
    }
    out.event(
        "stopped",
        "stopped",
        json!({"ok": result.is_ok(), "error": result.as_ref().err()}),
    );
    result
}

/// Resolves once `server` (horos-ref run) is no longer running.
async fn ended(server: &ProcessServer) {
    while server.state().await == RunState::Running {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

async fn stop_signal(sigint: &mut Signal, sigterm: &mut Signal) {
    tokio::select! {
        _ = sigint.recv() => {}
        _ = sigterm.recv() => {}
    }
}

fn absolute(dir: &Path) -> Result<PathBuf, String> {
    std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// `horos-ref run` as a child process (a horos-servers process: its own process group, a log
/// file, ready once the coordinator's `/health` answers, SIGTERM then SIGKILL to stop).
struct RunningSystem {
    server: ProcessServer,
    /// The directory's lock, held until the demo ends (one demo per directory).
    _lock: std::fs::File,
}

/// Starts `horos-ref --config CONFIG run`, its output in `DIR/run.log`; ready once the
/// coordinator at `port` answers `/health`.
async fn spawn_run(
    config: &Path,
    dir: &Path,
    port: u16,
    lock: std::fs::File,
) -> Result<RunningSystem, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the demo's own binary: {e}"))?;
    let arg = |p: &Path| p.display().to_string();
    let server = ProcessServer::new(ProcessConfig {
        name: "horos-ref-run".into(),
        command: vec![arg(&exe), "--config".into(), arg(config), "run".into()],
        port,
        log_path: Some(dir.join("run.log")),
        pidfile: Some(dir.join("run.pid")),
        // The lane's server starts before the coordinator; a first start may compile nothing,
        // but a slow CPU takes its time.
        start_timeout_s: 600,
        stop_timeout_s: 60,
        probe: ProbeConfig {
            inference_every: 0,
            ..ProbeConfig::default()
        },
        ..ProcessConfig::default()
    })
    .map_err(|e| e.to_string())?;
    server.start().await.map_err(|e| {
        format!(
            "horos-ref run did not start ({e}); its log: {}",
            dir.join("run.log").display()
        )
    })?;
    Ok(RunningSystem {
        server,
        _lock: lock,
    })
}

/// Locks `dir` for this demo: a second demo there would start a second system on the same
/// databases. The lock goes with the process, however it ends.
fn lock_dir(dir: &Path) -> Result<std::fs::File, String> {
    let lock_path = dir.join("demo.lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => format!(
            "another demo runs in {} (stop it, or give another --dir)",
            dir.display()
        ),
        std::fs::TryLockError::Error(e) => format!("{}: {e}", lock_path.display()),
    })?;
    Ok(lock)
}

async fn demo(
    args: &DemoArgs,
    dir: &Path,
    out: &Out,
    system: &mut Option<RunningSystem>,
) -> Result<(), String> {
    let t0 = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dir = absolute(dir)?;
    let lock = lock_dir(&dir)?;
    out.event(
        "dir",
        format!("working directory {}", dir.display()),
        json!({"dir": dir}),
    );

    // Everything it needs, checked before anything starts.
    let llama = tools::Llama::find()?;
    let tesseract = tools::tesseract().await?;
    let samples = tools::sample_dir(args.samples.as_deref());
    let files = tools::documents(&args.pdfs, &samples)?;
    out.event(
        "tools",
        format!(
            "llama-server {}; {tesseract}; {} document(s) to ingest",
            llama.server.display(),
            files.len()
        ),
        json!({"llama_server": llama.server, "smollm2": llama.smollm2, "minilm": llama.minilm,
               "tesseract": tesseract, "documents": files}),
    );

    // The configuration, written where the user can read it, and `run` on it.
    let port = coordinator_port(args.port, out)?;
    let config = dir.join("horos.toml");
    let [chat, pool] = lane_and_pool_ports()?;
    let text = config_text(Some(&llama), &dir, [port, chat, pool]);
    std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
    let inbox = dir.join("inbox");
    let names = tools::into_inbox(&files, &inbox)?;
    out.event(
        "config",
        format!(
            "configuration {} (`horos-ref --config {} run` runs the same system); starting it: \
             a lane with SmolLM2 on llama-server, MiniLM in the model pool, the coordinator, \
             the ingest pipeline",
            config.display(),
            config.display()
        ),
        json!({"config": config, "inbox": inbox}),
    );
    let running = system.insert(spawn_run(&config, &dir, port, lock).await?);
    let url = running.server.url();
    out.event(
        "coordinator",
        format!(
            "coordinator at {url} (OpenAI API {url}/v1, admin API {url}/api/v1); run's log {}",
            dir.join("run.log").display()
        ),
        json!({"url": url, "port": port, "requested_port": args.port,
               "fallback": port != args.port && args.port != 0,
               "run_pid": running.server.pid(), "log": dir.join("run.log")}),
    );

    // The demo's steps: a client of the running system, through its HTTP API.
    let client = client::DemoClient::new(&url, *out)?;
    let summary = client.ingest(&inbox, &names).await?;
    out.event(
        "ingested",
        format!(
            "{} document(s), {} pages searchable ({} ingested now, {} failed)",
            summary.documents, summary.pages, summary.new, summary.failed
        ),
        json!({"documents": summary.documents, "pages": summary.pages, "new": summary.new,
               "failed": summary.failed}),
    );
    if summary.documents == 0 {
        return Err("no document could be ingested".into());
    }
    out.event(
        "query",
        format!("query: {}", args.query),
        json!({"query": args.query}),
    );
    client.search(&args.query, &summary.files).await?;
    client.answer(&args.query).await?;
    client.lane_job(&args.query).await?;

    let (status_code, status_bytes) = client.page("/status").await;
    let (metrics_code, _) = client.page("/metrics").await;
    out.event(
        "ready",
        format!(
            "ready in {:.1} s — status page {url}/status (HTTP {status_code}, {status_bytes} \
             bytes), metrics {url}/metrics (HTTP {metrics_code}), OpenAI API {url}/v1; MCP: \
             horos-ref --config {} mcp",
            t0.elapsed().as_secs_f64(),
            config.display()
        ),
        json!({"coordinator_url": url, "status_url": format!("{url}/status"),
               "status_code": status_code, "metrics_url": format!("{url}/metrics"),
               "metrics_code": metrics_code, "config": config,
               "seconds": t0.elapsed().as_secs_f64()}),
    );
    if status_code != 200 {
        return Err(format!("{url}/status answered {status_code}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_embedded_configuration_is_a_valid_configuration_once_filled() {
        let llama = tools::Llama {
            server: "/opt/llama-server".into(),
            smollm2: "/m/smollm2.gguf".into(),
            minilm: "/m/minilm.gguf".into(),
        };
        let text = config_text(Some(&llama), Path::new("/d"), [8310, 9001, 9002]);
        for left in ["${", "8210", "8211", "8212", "8213"] {
            assert!(!text.contains(left), "`{left}` is left: {text}");
        }
        let config = crate::config::Config::parse(&text).unwrap();
        assert_eq!(config.lanes.len(), 1);
        assert_eq!(config.lanes[0].url, "http://127.0.0.1:9001");
        let coordinator = config.coordinator.as_ref().unwrap();
        assert_eq!(coordinator.settings.bind.port(), 8310);
        assert_eq!(config.database, Path::new("/d/horos.db"));
        let pool = coordinator.pool.as_ref().unwrap();
        assert_eq!(pool.models[0].name, "minilm");
        assert!(
            pool.models[0]
                .server
                .command
                .iter()
                .any(|a| a == "/m/minilm.gguf")
        );
        assert_eq!(config.ingest.as_ref().unwrap().inbox, Path::new("/d/inbox"));
        // Without llama-server found, the programs' names stand in.
        let bare = config_text(None, Path::new("/d"), [1, 2, 3]);
        assert!(bare.contains("\"llama-server\""), "{bare}");
        crate::config::Config::parse(&bare).unwrap();
    }
}
