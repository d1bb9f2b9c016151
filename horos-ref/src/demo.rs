//! `horos-ref demo`: the whole system on a CPU-only machine with an embedded default
//! configuration. Two llama-server processes (SmolLM2 chat, MiniLM embeddings) on free loopback
//! ports, supervised; the coordinator in front of them; the sample PDFs ingested into SQLite
//! (Tesseract, MiniLM through the coordinator, CPU page-image vectors); a full-text, a vector and
//! a MaxSim search (over the pixel-patch fallback's vectors, a page image as the query); a chat
//! through the coordinator; then the status page, served until Ctrl-C.

mod ask;
mod ingest;
mod out;
mod probe;
mod servers;
mod tools;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream};
use horos_servers::{ManagedServer, SupervisorEvent};
use ingest_pipeline::openai::OpenAiEmbedder;
use ingest_pipeline::vision::TesseractReader;
use serde_json::json;
use tokio::signal::unix::{Signal, SignalKind, signal};

use self::out::Out;

/// The question the demo asks when `--query` is not given: answered by page 18 of the camlidl
/// manual, the first sample document (full-text, vector and MaxSim search all find that page).
pub const DEFAULT_QUERY: &str =
    "How are errors reported with HRESULT return codes in COM interfaces?";

/// Options of `horos-ref demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the demo keeps its databases (SQLite), page images, server logs and pidfiles
    /// [default: $HOROS_CACHE/demo, else ~/.cache/horos/demo].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The coordinator's port on 127.0.0.1 (0: any free port; a busy port falls back to a free
    /// one, with a note).
    #[arg(long, default_value_t = 8210)]
    pub port: u16,
    /// Exit after the demo's searches and chat instead of serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
    /// The question searched for and asked about.
    #[arg(long, default_value = DEFAULT_QUERY)]
    pub query: String,
    /// Ingest these PDFs instead of the sample documents (repeatable).
    #[arg(long = "pdf", value_name = "FILE")]
    pub pdfs: Vec<PathBuf>,
    /// The sample PDFs' directory [default: $HOROS_SAMPLE_PDFS, else
    /// ~/.cache/horos-rs/sample-pdfs, filled by scripts/fetch_sample_pdfs.sh].
    #[arg(long, value_name = "DIR")]
    pub samples: Option<PathBuf>,
}

/// What the demo started, so that whatever was started is stopped, whatever step failed.
#[derive(Default)]
struct State {
    /// The directory's lock, held until the demo ends.
    lock: Option<std::fs::File>,
    servers: Vec<servers::Running>,
    coordinator: Option<Coordinator>,
}

impl State {
    async fn stop(&mut self, out: &Out) {
        if let Some(c) = self.coordinator.take() {
            c.shutdown(Duration::from_secs(5)).await;
        }
        for s in self.servers.drain(..) {
            let model = s.model;
            match s.stop().await {
                Ok(()) => out.event(
                    "server_stopped",
                    format!("{model} server stopped"),
                    json!({"model": model}),
                ),
                Err(e) => out.event(
                    "server_stopped",
                    format!("{model} server: {e}"),
                    json!({"model": model, "error": e}),
                ),
            }
        }
    }
}

fn default_dir() -> PathBuf {
    std::env::var_os("HOROS_CACHE")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/horos")))
        .unwrap_or_else(|| PathBuf::from(".horos"))
        .join("demo")
}

/// Runs the demo.
pub async fn run(args: DemoArgs, json: bool) -> Result<(), String> {
    let out = Out::new(json);
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut state = State::default();
    let result = tokio::select! {
        r = demo(&args, &out, &mut state) => r,
        () = stop_signal(&mut sigint, &mut sigterm) => Err("interrupted".to_owned()),
    };
    if result.is_ok() && !args.exit {
        out.event(
            "serving",
            "serving until Ctrl-C (SIGINT) or SIGTERM",
            json!({}),
        );
        stop_signal(&mut sigint, &mut sigterm).await;
        out.event("stopping", "stopping...", json!({}));
    }
    state.stop(&out).await;
    out.event(
        "stopped",
        "stopped",
        json!({"ok": result.is_ok(), "error": result.as_ref().err()}),
    );
    result
}

async fn stop_signal(sigint: &mut Signal, sigterm: &mut Signal) {
    tokio::select! {
        _ = sigint.recv() => {}
        _ = sigterm.recv() => {}
    }
}

async fn demo(args: &DemoArgs, out: &Out, state: &mut State) -> Result<(), String> {
    let t0 = Instant::now();
    let dir = args.dir.clone().unwrap_or_else(default_dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // One demo per directory: a second one would end the first one's servers through their
    // pidfiles. The lock goes with the process, however it ends.
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
    state.lock = Some(lock);
    out.event(
        "dir",
        format!("working directory {}", dir.display()),
        json!({"dir": dir}),
    );

    // Everything it needs, checked before anything starts.
    let llama = tools::Llama::find()?;
    let tesseract = tokio::task::spawn_blocking(|| TesseractReader::default().check())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("Tesseract: {e} (run scripts/setup_ocr.sh)"))?;
    let samples = tools::sample_dir(args.samples.as_deref());
    let files = tools::documents(&args.pdfs, &samples)?;
    out.event(
        "tools",
        format!(
            "llama-server {}; {}; {} document(s) to ingest",
            llama.server.display(),
            tesseract.lines().next().unwrap_or("tesseract"),
            files.len()
        ),
        json!({"llama_server": llama.server, "smollm2": llama.smollm2, "minilm": llama.minilm,
               "tesseract": tesseract.lines().next(), "documents": files}),
    );

    // The inference servers.
    let run_dir = dir.join("run");
    out.event(
        "starting_servers",
        format!(
            "starting llama-server for smollm2 (chat) and minilm (embeddings); logs in {}",
            run_dir.display()
        ),
        json!({"run_dir": run_dir}),
    );
    for (running, secs) in servers::start(&llama, &run_dir).await? {
        let cfg = running.server.config();
        out.event(
            "server",
            format!(
                "{} serves {} at {} (healthy after {secs:.1} s, pid {}, log {})",
                cfg.name,
                running.model,
                running.server.url(),
                running.server.pid().unwrap_or(0),
                cfg.log_path.as_deref().unwrap_or(&run_dir).display()
            ),
            json!({"name": cfg.name, "model": running.model, "url": running.server.url(),
                   "pid": running.server.pid(), "log": cfg.log_path, "seconds": secs}),
        );
        forward_supervisor_events(&running, *out);
        state.servers.push(running);
    }

    // The coordinator in front of them.
    // The status page shows the documents as they are ingested (read once the pipeline opens).
    let ingest_section = Arc::new(ingest_pipeline::gateway::IngestStatus::default());
    let coordinator = start_coordinator(
        args.port,
        &dir,
        &state.servers,
        Arc::clone(&ingest_section),
        out,
    )
    .await?;
    let url = coordinator.url();
    let addr = coordinator.local_addr();
    state.coordinator = Some(coordinator);

    // Ingestion: embeddings through the coordinator, like any other client's.
    let embedder = OpenAiEmbedder::new(&url, "minilm").map_err(|e| e.to_string())?;
    let pipeline = ingest::open(&dir.join("ingest"), embedder.clone()).await?;
    ingest_section.watch(&pipeline);
    let summary = ingest::ingest(&pipeline, &files, out).await?;
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

    // Search and chat.
    out.event(
        "query",
        format!("query: {}", args.query),
        json!({"query": args.query}),
    );
    let found = ask::search(&pipeline, &embedder, &args.query, out).await?;
    let passage = found
        .vector
        .as_ref()
        .or(found.full_text.as_ref())
        .ok_or("no page found for the query: nothing to chat about")?;
    ask::chat(&pipeline, &url, &args.query, passage, out).await?;

    // The status page and the metrics, fetched once to show they answer.
    let (status_code, status_bytes) = probe::get(addr, "/status").await?;
    let (metrics_code, _) = probe::get(addr, "/metrics").await?;
    out.event(
        "ready",
        format!(
            "ready in {:.1} s — status page {url}/status (HTTP {status_code}, {status_bytes} bytes), \
             metrics {url}/metrics (HTTP {metrics_code}), OpenAI API {url}/v1",
            t0.elapsed().as_secs_f64()
        ),
        json!({"coordinator_url": url, "status_url": format!("{url}/status"),
               "status_code": status_code, "metrics_url": format!("{url}/metrics"),
               "metrics_code": metrics_code, "seconds": t0.elapsed().as_secs_f64()}),
    );
    if status_code != 200 {
        return Err(format!("{url}/status answered {status_code}"));
    }
    Ok(())
}

/// Prints what a server's supervisor does (a failed check, a restart and its back-off) as it
/// happens, so that a crash while the demo serves is visible. Ends with the supervisor.
fn forward_supervisor_events(running: &servers::Running, out: Out) {
    let mut rx = running.supervisor.subscribe();
    let model = running.model;
    let server = Arc::clone(&running.server);
    tokio::spawn(async move {
        loop {
            let event = match rx.recv().await {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            let text = match &event {
                // The first start is the demo's own, already reported.
                SupervisorEvent::Started { generation } if *generation <= 1 => continue,
                SupervisorEvent::Stopped => break,
                SupervisorEvent::Parked => format!("{model} server stopped on purpose"),
                SupervisorEvent::Started { generation } => format!(
                    "{model} server restarted by its supervisor (start {generation}, pid {})",
                    server.pid().unwrap_or(0)
                ),
                SupervisorEvent::CheckFailed {
                    error, consecutive, ..
                } => {
                    format!(
                        "{model} server failed a check ({consecutive} in a row): {}",
                        first_line(error)
                    )
                }
                SupervisorEvent::Restarting {
                    attempt,
                    delay_ms,
                    reason,
                } => {
                    format!(
                        "{model} server: restart attempt {attempt} in {delay_ms} ms ({})",
                        first_line(reason)
                    )
                }
                SupervisorEvent::StartFailed { error } => {
                    format!("{model} server failed to start: {}", first_line(error))
                }
            };
            out.event(
                "supervisor",
                text,
                json!({"model": model, "pid": server.pid(), "supervisor": event}),
            );
        }
    });
}

/// The first line of an error (a crashed server's error carries the tail of its log; the JSON
/// event keeps all of it).
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// Binds 127.0.0.1:`port` (a busy one falls back to a free port, said so) and starts the
/// coordinator with both servers as static upstreams.
async fn start_coordinator(
    port: u16,
    dir: &std::path::Path,
    servers: &[servers::Running],
    ingest_section: Arc<ingest_pipeline::gateway::IngestStatus>,
    out: &Out,
) -> Result<Coordinator, String> {
    let mut bind = SocketAddr::from(([127, 0, 0, 1], port));
    if let Err(e) = std::net::TcpListener::bind(bind) {
        out.event(
            "port_busy",
            format!("127.0.0.1:{port} is not available ({e}); using a free port instead"),
            json!({"port": port, "error": e.to_string()}),
        );
        bind.set_port(0);
    }
    let mut upstream = StaticUpstream::new();
    let mut concurrency = BTreeMap::new();
    for s in servers {
        upstream = upstream.with(s.model, s.server.url());
        // As many requests at once as the server has slots (-np 4).
        concurrency.insert(s.model.to_owned(), 4);
    }
    let config = CoordinatorConfig {
        bind,
        state_path: Some(dir.join("coordinator.db")),
        model_concurrency: concurrency,
        // A 2-core CPU is slow: a chat or an embedding batch may wait a while for its turn.
        default_budget_s: 600.0,
        upstream_timeout_s: 600.0,
        job_workers: 1,
        ..CoordinatorConfig::default()
    };
    let coordinator = Coordinator::builder(config, Arc::new(upstream))
        .status_section(ingest_section)
        .bind()
        .await
        .map_err(|e| format!("coordinator on {bind}: {e}"))?;
    let url = coordinator.url();
    out.event(
        "coordinator",
        format!("coordinator at {url} routes smollm2 and minilm to the llama-servers"),
        json!({"url": url, "port": coordinator.local_addr().port(), "requested_port": port,
               "fallback": coordinator.local_addr().port() != port && port != 0}),
    );
    Ok(coordinator)
}
