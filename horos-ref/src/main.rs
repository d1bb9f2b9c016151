//! `horos-ref`: the HOROS reference binary (skeleton). One TOML configuration file; subcommands
//! `run` (the feeder, until SIGINT/SIGTERM, finishing the batch in progress), `submit`, `stats`,
//! `dead`, `status`; `--json` for machine-readable output.

mod config;
mod demo;
mod feeder_metrics;
mod ingest;
mod mcp_tools;
mod modes;
mod pool;
mod servers;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use horos_feeder::{Feeder, FeederConfig, HealthOnly, Lane, ServerControl, TableSink};
use horos_gpu_alloc::thermal::ThermalPolicy;
use horos_vllm_client::{ChatMessage, ChatRequest, Client, ClientConfig};
use serde_json::json;
use squeueha::{AsyncQueue, NewJob, Queue};

use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "horos-ref",
    version,
    about = "HOROS reference binary: a batch feeder for inference servers"
)]
struct Cli {
    /// The configuration file.
    #[arg(short, long, global = true, default_value = "horos.toml")]
    config: PathBuf,
    /// Machine-readable output (JSON).
    #[arg(long, global = true)]
    json: bool,
    /// Logs (stderr) as JSON lines; the level comes from `HOROS_LOG` (error, warn, info, debug,
    /// trace; default info).
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the feeder until SIGINT or SIGTERM (the batch in progress is finished first).
    Run,
    /// Submit a chat job to a lane's queue.
    Submit {
        /// The queue (lane).
        #[arg(long)]
        queue: String,
        /// The prompt (a user message).
        #[arg(long, conflicts_with = "request")]
        prompt: Option<String>,
        /// A JSON file holding a whole chat request.
        #[arg(long)]
        request: Option<PathBuf>,
        /// The model (default: the lane's `model`).
        #[arg(long)]
        model: Option<String>,
        /// Most tokens to generate.
        #[arg(long)]
        max_tokens: Option<u32>,
        /// Priority (higher first).
        #[arg(long, default_value_t = 0)]
        priority: i32,
    },
    /// Queue statistics.
    Stats,
    /// Dead letters of a queue; `--requeue ID` puts one back.
    Dead {
        /// The queue.
        #[arg(long)]
        queue: String,
        /// How many to list.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Requeue this dead job instead of listing.
        #[arg(long)]
        requeue: Option<i64>,
    },
    /// Lanes: server health and queue depth.
    Status,
    /// Queue a PDF from the [ingest] inbox for ingestion (`run` processes it).
    Ingest {
        /// The PDF (inside the inbox; relative paths are relative to the inbox).
        path: PathBuf,
    },
    /// Documents of the [ingest] pipeline: status, pages, errors.
    Docs,
    /// Full-text search (FTS5 syntax) over the ingested pages.
    Search {
        /// The query.
        query: String,
        /// How many pages.
        #[arg(long, default_value_t = 5)]
        k: usize,
    },
    /// The tools (submit, status, stats, dead, ingest) over JSON-RPC 2.0 / MCP on stdin/stdout.
    Mcp,
    /// The whole system on this machine with an embedded default configuration: CPU inference
    /// servers, sample documents ingested, a search and a chat answered, the status page served.
    Demo(demo::DemoArgs),
}

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("queue: {0}")]
    Queue(#[from] squeueha::Error),
    #[error("feeder: {0}")]
    Feeder(#[from] horos_feeder::Error),
    #[error("client: {0}")]
    Client(#[from] horos_vllm_client::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
}

fn init_logs(json: bool) {
    let level = std::env::var("HOROS_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level);
    // A second initialisation (tests calling main twice) is harmless: keep the first.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.with_ansi(false).try_init()
    };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_json);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("horos-ref: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("horos-ref: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> Result<(), AppError> {
    if let Command::Demo(args) = cli.command {
        return demo::run(args, cli.json).await.map_err(AppError::Usage);
    }
    let config = Config::load(&cli.config)?;
    let queue = open_queue(&config).await?;
    match cli.command {
        Command::Run => run(&config, queue, cli.json).await,
        Command::Submit {
            queue: name,
            prompt,
            request,
            model,
            max_tokens,
            priority,
        } => {
            let lane = config.lanes.iter().find(|l| l.queue == name);
            if lane.is_none() {
                return Err(AppError::Usage(format!("no lane has the queue `{name}`")));
            }
            let mut req: ChatRequest = match (request, prompt) {
                (Some(path), _) => {
                    let text = tokio::fs::read(&path).await?;
                    serde_json::from_slice(&text).map_err(|e| {
                        AppError::Usage(format!("{}: not a chat request: {e}", path.display()))
                    })?
                }
                (None, Some(prompt)) => {
                    let model = model
                        .clone()
                        .or_else(|| lane.and_then(|l| l.model.clone()))
                        .ok_or_else(|| {
                            AppError::Usage(format!(
                                "give --model, or set `model` in the lane `{name}`"
                            ))
                        })?;
                    ChatRequest::new(model, vec![ChatMessage::user(prompt)])
                }
                (None, None) => {
                    return Err(AppError::Usage("give --prompt or --request".into()));
                }
            };
            if let Some(model) = model {
                req.model = model;
            }
            if let Some(n) = max_tokens {
                req.max_tokens = Some(n);
            }
            let job = NewJob::json(&req)?.priority(priority);
            let id = queue.enqueue(&name, job).await?.id();
            if cli.json {
                println!("{}", json!({"id": id, "queue": name}));
            } else {
                println!("job {id} queued on {name}");
            }
            Ok(())
        }
        Command::Stats => {
            let stats = queue.all_stats().await?;
            if cli.json {
                println!("{}", serde_json::to_string(&stats).unwrap_or_default());
            } else {
                println!("queue ready in_flight delayed done dead oldest_ready_ms");
                for s in stats {
                    println!(
                        "{} {} {} {} {} {} {}",
                        s.queue,
                        s.ready,
                        s.in_flight,
                        s.delayed,
                        s.done,
                        s.dead,
                        s.oldest_ready_age_ms.map_or("-".into(), |v| v.to_string())
                    );
                }
            }
            Ok(())
        }
        Command::Dead {
            queue: name,
            limit,
            requeue,
        } => {
            if let Some(id) = requeue {
                let new_id = queue.requeue_dead(id).await?;
                if cli.json {
                    println!("{}", json!({"requeued": id, "id": new_id}));
                } else {
                    println!("dead job {id} requeued as job {new_id}");
                }
                return Ok(());
            }
            let dead = queue.dead_letters(&name, limit).await?;
            if cli.json {
                let list: Vec<_> = dead
                    .iter()
                    .map(|d| {
                        json!({"id": d.id, "queue": d.queue, "attempts": d.attempts,
                               "died_at": d.died_at, "reason": d.last_error})
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(list));
            } else {
                for d in dead {
                    println!(
                        "{} attempts={} {}",
                        d.id,
                        d.attempts,
                        d.last_error.unwrap_or_default()
                    );
                }
            }
            Ok(())
        }
        Command::Demo(_) => Ok(()),
        Command::Docs => {
            let docs = ingest::documents(&config).await.map_err(AppError::Usage)?;
            if cli.json {
                println!("{docs}");
            } else {
                for d in docs.as_array().into_iter().flatten() {
                    println!(
                        "{} {} pages={} {} {}",
                        d["id"],
                        d["status"].as_str().unwrap_or_default(),
                        d["pages"],
                        d["title"].as_str().unwrap_or_default(),
                        d["error"].as_str().unwrap_or_default()
                    );
                }
            }
            Ok(())
        }
        Command::Search { query, k } => {
            let hits = ingest::search(&config, query, k.clamp(1, 100))
                .await
                .map_err(AppError::Usage)?;
            if cli.json {
                println!("{hits}");
            } else {
                for h in hits.as_array().into_iter().flatten() {
                    println!(
                        "document {} page {} ({:.2}): {}",
                        h["document"],
                        h["page"],
                        h["score"].as_f64().unwrap_or_default(),
                        h["snippet"].as_str().unwrap_or_default()
                    );
                }
            }
            Ok(())
        }
        Command::Mcp => mcp_tools::serve(config, queue)
            .await
            .map_err(AppError::Usage),
        Command::Ingest { path } => {
            let inbox = config
                .ingest
                .as_ref()
                .map(|i| i.inbox.clone())
                .ok_or_else(|| AppError::Usage("the configuration has no [ingest]".into()))?;
            let file = ingest::confine(&inbox, &path).map_err(AppError::Usage)?;
            let pipeline = ingest::open_configured(&config)
                .await
                .map_err(AppError::Usage)?;
            let out = ingest::submit(&pipeline, &file)
                .await
                .map_err(AppError::Usage)?;
            if cli.json {
                println!("{out}");
            } else {
                println!(
                    "document {} {}: {}",
                    out["document"],
                    out["status"].as_str().unwrap_or_default(),
                    file.display()
                );
            }
            Ok(())
        }
        Command::Status => {
            let mut lanes = Vec::new();
            for lane in &config.lanes {
                let client = Client::with_config(
                    ClientConfig::new(lane.url.clone()).total_timeout(Duration::from_secs(2)),
                )?;
                let healthy = client.health().await.is_ok();
                let s = queue.stats(&lane.queue).await?;
                lanes.push(
                    json!({"queue": lane.queue, "url": lane.url, "healthy": healthy,
                                  "ready": s.ready, "in_flight": s.in_flight, "dead": s.dead}),
                );
            }
            if cli.json {
                println!("{}", json!({"database": config.database, "lanes": lanes}));
            } else {
                println!("database {}", config.database.display());
                for l in lanes {
                    println!(
                        "{} {} healthy={} ready={} in_flight={} dead={}",
                        l["queue"], l["url"], l["healthy"], l["ready"], l["in_flight"], l["dead"]
                    );
                }
            }
            Ok(())
        }
    }
}

async fn open_queue(config: &Config) -> Result<AsyncQueue, AppError> {
    let path = config.database.clone();
    let queue = tokio::task::spawn_blocking(move || Queue::open(path))
        .await
        .map_err(|e| AppError::Usage(e.to_string()))??;
    Ok(AsyncQueue::new(queue))
}

/// Scopes the clean-up of leftover containers to this configuration's database, so two HOROS
/// instances on one machine never remove each other's containers.
fn owner_of(database: &std::path::Path) -> String {
    use std::hash::{Hash, Hasher};
    let path = std::fs::canonicalize(database).unwrap_or_else(|_| database.to_path_buf());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    format!("{:08x}", h.finish() as u32)
}

async fn run(config: &Config, queue: AsyncQueue, json_out: bool) -> Result<(), AppError> {
    if config.lanes.is_empty() && config.coordinator.is_none() && config.ingest.is_none() {
        return Err(AppError::Usage(
            "the configuration has no [[lane]], no [coordinator] and no [ingest]".into(),
        ));
    }
    let run_dir = config.database.with_extension("run");
    let owner = owner_of(&config.database);
    let sink = Arc::new(TableSink::new(queue.blocking().clone())?);
    let mut lanes = Vec::new();
    let mut managed: Vec<servers::LaneServer> = Vec::new();
    // With [allocator] the managed lanes share one GPU: the first serves at start, the others
    // wait with their gates closed and their servers stopped until the allocator switches.
    let mut mode_lanes: Vec<modes::ModeLane> = Vec::new();
    for l in &config.lanes {
        let client = Client::with_config(
            ClientConfig::new(l.url.clone())
                .total_timeout(Duration::from_secs(l.request_timeout_s)),
        )?;
        let gate = Arc::new(horos_feeder::LaneGate::new(true));
        let control: Arc<dyn ServerControl> = match servers::lane_server(l, &run_dir, &owner).await
        {
            Ok(Some(server)) => {
                let control = Arc::clone(&server.control);
                let first = server.clone();
                managed.push(server.clone());
                let mut waiting = false;
                if config.allocator.is_some() {
                    waiting = !mode_lanes.is_empty();
                    mode_lanes.push(modes::ModeLane {
                        queue: l.queue.clone(),
                        gate: gate.clone(),
                        server: Arc::new(server),
                        swap_in_s: l.swap_in_s,
                        job_s: l.job_s,
                        batch_size: l.batch_size,
                    });
                }
                if waiting {
                    gate.close();
                } else if let Err(e) = first.start().await {
                    stop_servers(&managed).await;
                    return Err(AppError::Usage(format!(
                        "cannot start the server of lane `{}`: {e}",
                        l.queue
                    )));
                }
                control
            }
            Ok(None) => Arc::new(HealthOnly::new(
                client.clone(),
                Duration::from_secs(l.start_wait_s),
            )),
            Err(e) => {
                stop_servers(&managed).await;
                return Err(AppError::Usage(format!("lane `{}`: {e}", l.queue)));
            }
        };
        lanes.push(
            Lane::new(l.queue.clone(), client, control, sink.clone())
                .batch_size(l.batch_size)
                .refill(l.refill)
                .visibility(Duration::from_secs(l.visibility_s))
                .gate(gate),
        );
    }
    let counters = Arc::new(feeder_metrics::FeederCounters::default());
    let wants_gpus =
        config.coordinator.is_some() || config.feeder.thermal == config::ThermalKind::Follow;
    let gpus = if wants_gpus { nvml().await } else { None };
    let board = horos_coordinator::ModeBoard::new();
    let (coordinator, model_pool) = match &config.coordinator {
        Some(section) => {
            let modes = config.allocator.as_ref().map(|_| board.clone());
            match start_coordinator(config, section, Arc::clone(&counters), gpus.clone(), modes)
                .await
            {
                Ok((c, p)) => (Some(c), p),
                Err(e) => {
                    stop_servers(&managed).await;
                    return Err(e);
                }
            }
        }
        None => (None, None),
    };
    let pipeline = match &config.ingest {
        Some(section) => match ingest::start(section).await {
            Ok(p) => Some(p),
            Err(e) => {
                if let Some(c) = coordinator {
                    c.shutdown(Duration::from_secs(1)).await;
                }
                if let Some(p) = &model_pool {
                    pool::unload_all(p).await;
                }
                stop_servers(&managed).await;
                return Err(AppError::Usage(format!("ingest: {e}")));
            }
        },
        None => None,
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
        }
        let _ = stop.send(true);
    });
    let allocator = match &config.allocator {
        Some(a) if !mode_lanes.is_empty() => Some(modes::spawn(
            modes::ModesConfig {
                gpu: a.gpu,
                policy: a.policy(config.feeder.cooldown_s),
                retry_after_failure: Duration::from_secs(30),
            },
            std::mem::take(&mut mode_lanes),
            0,
            queue.blocking().clone(),
            modes::Report {
                log: coordinator.as_ref().map(|c| c.decision_log()),
                board: coordinator.as_ref().map(|_| board.clone()),
            },
            rx.clone(),
        )),
        _ => None,
    };
    if json_out {
        println!(
            "{}",
            json!({"event": "started", "lanes": config.lanes.len(),
                   "coordinator": coordinator.as_ref().map(|c| c.url())})
        );
    } else {
        println!("horos-ref: feeding {} lane(s)", config.lanes.len());
        if let Some(c) = &coordinator {
            println!(
                "horos-ref: OpenAI endpoint {0}/v1, status page {0}/status, metrics {0}/metrics",
                c.url()
            );
        }
    }
    let stats = if lanes.is_empty() {
        let mut rx = rx;
        let _ = rx.wait_for(|stop| *stop).await;
        horos_feeder::FeederStats::default()
    } else {
        let (thermal, temperature) = thermal(config, gpus);
        let mut feeder = Feeder::new(
            queue,
            lanes,
            FeederConfig {
                thermal,
                idle_poll: Duration::from_millis(config.feeder.idle_poll_ms),
                release_delay: Duration::from_millis(config.feeder.release_delay_ms),
                health_interval: (config.feeder.health_interval_s > 0.0)
                    .then(|| Duration::from_secs_f64(config.feeder.health_interval_s)),
                ..FeederConfig::default()
            },
        )?;
        if let Some(source) = temperature {
            feeder = feeder.with_temperature(source);
        }
        let feeder = Arc::new(feeder);
        feeder_metrics::publish(&feeder, Arc::clone(&counters));
        feeder.run(rx).await
    };
    if let Some(task) = allocator {
        // A switch in progress finishes its step (bounded by the servers' start timeout).
        let _ = task.await;
    }
    if let Some((_pipeline, running)) = pipeline {
        running.shutdown().await;
    }
    if let Some(c) = coordinator {
        c.shutdown(Duration::from_secs(10)).await;
    }
    if let Some(p) = &model_pool {
        pool::unload_all(p).await;
    }
    stop_servers(&managed).await;
    if json_out {
        println!(
            "{}",
            json!({"event": "stopped", "batches": stats.batches, "completed": stats.completed,
                   "released": stats.released, "retried": stats.retried, "dead": stats.dead,
                   "poisoned": stats.poisoned, "crashes": stats.crashes, "restarts": stats.restarts})
        );
    } else {
        println!("horos-ref: stopped: {stats:?}");
    }
    Ok(())
}

/// The GPUs' monitor, where an NVIDIA driver answers (opened once: the coordinator's gauges and
/// the feeder's temperature pacing share it).
async fn nvml() -> Option<Arc<horos_gpu_alloc::monitor::nvml::NvmlMonitor>> {
    match tokio::task::spawn_blocking(horos_gpu_alloc::monitor::nvml::NvmlMonitor::new).await {
        Ok(Ok(monitor)) => Some(Arc::new(monitor)),
        Ok(Err(e)) => {
            tracing::info!(error = %e, "no GPU readings (NVML unavailable)");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "NVML probe failed");
            None
        }
    }
}

/// The feeder's pacing: a fixed cooldown, or gpu-alloc's temperature-following policy fed by
/// NVML (the hottest GPU), which falls back to the cooldown when no temperature can be read.
fn thermal(
    config: &Config,
    gpus: Option<Arc<horos_gpu_alloc::monitor::nvml::NvmlMonitor>>,
) -> (ThermalPolicy, Option<horos_feeder::TemperatureSource>) {
    use horos_gpu_alloc::monitor::GpuMonitor;
    let cooldown_s = config.feeder.cooldown_s;
    if config.feeder.thermal == config::ThermalKind::Fixed {
        return (ThermalPolicy::Fixed { cooldown_s }, None);
    }
    let mut policy = ThermalPolicy::follow_temperature();
    if let ThermalPolicy::FollowTemperature { fallback_s, .. } = &mut policy {
        *fallback_s = cooldown_s;
    }
    let Some(monitor) = gpus else {
        tracing::warn!(
            "feeder.thermal = \"follow\" but NVML is unavailable: pausing cooldown_s after each batch"
        );
        return (policy, None);
    };
    let source: horos_feeder::TemperatureSource = Arc::new(move || {
        monitor
            .sample()
            .ok()?
            .iter()
            .filter_map(|g| g.temperature_c)
            .reduce(f64::max)
    });
    (policy, Some(source))
}

async fn stop_servers(servers: &[servers::LaneServer]) {
    for s in servers {
        if let Err(e) = s.stop().await {
            tracing::warn!(server = s.name(), error = %e, "stopping the server failed");
        }
    }
}

/// The coordinator: every lane with a `model` and every `[[coordinator.model]]` is a fixed
/// upstream, `[coordinator.pool]` adds the models loaded on demand (returned too, to stop its
/// servers at shutdown); settings and async jobs live in the queue database.
async fn start_coordinator(
    config: &Config,
    section: &config::CoordinatorSection,
    counters: Arc<feeder_metrics::FeederCounters>,
    gpus: Option<Arc<horos_gpu_alloc::monitor::nvml::NvmlMonitor>>,
    modes: Option<horos_coordinator::ModeBoard>,
) -> Result<
    (
        horos_coordinator::Coordinator,
        Option<horos_coordinator::PoolUpstream>,
    ),
    AppError,
> {
    let mut upstream = horos_coordinator::StaticUpstream::new();
    for l in &config.lanes {
        if let Some(model) = &l.model {
            upstream = upstream.with(model.clone(), l.url.trim_end_matches('/').to_owned());
        }
    }
    for m in &section.models {
        upstream = upstream.with(m.name.clone(), m.url.trim_end_matches('/').to_owned());
    }
    let cfg = horos_coordinator::CoordinatorConfig {
        bind: section.bind,
        max_body_bytes: section.max_body_bytes,
        default_budget_s: section.default_budget_s,
        max_in_flight: section.max_in_flight,
        per_model_concurrency: section.per_model_concurrency,
        api_key: section.api_key.clone(),
        job_workers: section.job_workers,
        state_path: Some(config.database.clone()),
        watch_queues: config.lanes.iter().map(|l| l.queue.clone()).collect(),
        ..horos_coordinator::CoordinatorConfig::default()
    };
    let model_pool = match &section.pool {
        Some(p) => Some(
            pool::build(p, gpus.clone(), &config.database.with_extension("run"))
                .map_err(AppError::Usage)?,
        ),
        None => None,
    };
    let mut upstreams = horos_coordinator::UpstreamSet::new().with(Arc::new(upstream));
    if let Some(p) = &model_pool {
        upstreams = upstreams.with(Arc::new(p.clone()));
    }
    let listener = tokio::net::TcpListener::bind(section.bind)
        .await
        .map_err(|e| AppError::Usage(format!("coordinator.bind {}: {e}", section.bind)))?;
    let mut builder = horos_coordinator::Coordinator::builder(cfg, Arc::new(upstreams))
        .extra_metrics(Arc::new(move |out: &mut String| counters.render(out)));
    if let Some(board) = modes {
        builder = builder.modes(board);
    }
    // GPU temperature and memory on /metrics and the status page, where NVML answers.
    if let Some(monitor) = gpus {
        builder = builder.gpu_gauges(Arc::new(horos_coordinator::MonitorGauges(monitor)));
    }
    let coordinator = builder
        .start(listener)
        .await
        .map_err(|e| AppError::Usage(format!("coordinator: {e}")))?;
    Ok((coordinator, model_pool))
}
