//! `horos-ref run`: the lanes' servers, the feeder, the coordinator, the allocator's executor and
//! the ingest pipeline, until SIGINT or SIGTERM; SIGHUP reloads the coordinator's keys, limits
//! and profiles from the configuration file.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use horos_coordinator::UpstreamPool;
use horos_feeder::{Feeder, HealthOnly, Lane, ServerControl, TableSink};
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_servers::logs::Redactions;
use horos_vllm_client::{Client, ClientConfig};
use serde_json::json;
use squeueha::AsyncQueue;
use tokio::sync::watch;

use crate::config::{self, Config};
use crate::error::AppError;
use crate::system::RunningSystem;
use crate::{ingest, modes, pool, servers};
use horos_feeder::metrics as feeder_metrics;
use horos_gpu_alloc::monitor::settings as gpus;
use horos_modes::LaneUpstream;
use horos_ops::status as status_sections;

pub async fn run(
    config: &Config,
    path: &Path,
    queue: AsyncQueue,
    json_out: bool,
) -> Result<(), AppError> {
    if config.lanes.is_empty() && config.coordinator.is_none() && config.ingest.is_none() {
        return Err(AppError::Usage(
            "the configuration has no [[lane]], no [coordinator] and no [ingest]".into(),
        ));
    }
    // Its own log in the run directory too (`horos-ref logs run`).
    let own_log = config.run_dir().join("run.log");
    if let Err(e) = crate::runlog::open(&own_log) {
        tracing::warn!(log = %own_log.display(), error = %e, "run's log stays on stderr only");
    }
    let hangup = crate::reload::on_hangup()?;
    let mut system = RunningSystem::default();
    let feeding = match start(config, path, &queue, &mut system).await {
        Ok(feeding) => feeding,
        Err(e) => {
            system.shutdown().await;
            return Err(e);
        }
    };
    if let Some(c) = &system.coordinator {
        let _ = hangup.set(c.reload_handle());
    }
    if json_out {
        println!(
            "{}",
            json!({"event": "started", "lanes": config.lanes.len(),
                   "coordinator": system.coordinator.as_ref().map(|c| c.url())})
        );
    } else {
        println!("horos-ref: feeding {} lane(s)", config.lanes.len());
        if let Some(c) = &system.coordinator {
            println!(
                "horos-ref: OpenAI endpoint {0}/v1, status page {0}/status, metrics {0}/metrics",
                c.url()
            );
        }
    }
    let heartbeat = feeding.heartbeat;
    let feeding = Feeding {
        heartbeat: tokio::spawn(async {}),
        ..feeding
    };
    let stats = feeding.run(config, queue).await?;
    system.shutdown().await;
    // The stop is in the nodes table before the process ends.
    let _ = tokio::time::timeout(Duration::from_secs(5), heartbeat).await;
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

/// What the feeder needs once everything is started.
struct Feeding {
    lanes: Vec<Lane>,
    counters: Arc<feeder_metrics::FeederCounters>,
    temperature: Option<horos_feeder::TemperatureSource>,
    stop: watch::Receiver<bool>,
    /// This node's heartbeat, which marks the node stopped in the nodes table once `stop` fires.
    heartbeat: tokio::task::JoinHandle<()>,
    /// When the feeder last moved, for `/health/ready`.
    moved: horos_feeder::health::Heartbeat,
}

impl Feeding {
    /// Feeds the lanes until the stop signal (or just waits for it without lanes).
    async fn run(
        self,
        config: &Config,
        queue: AsyncQueue,
    ) -> Result<horos_feeder::FeederStats, AppError> {
        if self.lanes.is_empty() {
            let mut stop = self.stop;
            let _ = stop.wait_for(|stop| *stop).await;
            return Ok(horos_feeder::FeederStats::default());
        }
        let temperature = config.feeder.temperature_source(self.temperature);
        let mut feeder =
            Feeder::new(queue, self.lanes, config.feeder.clone())?.with_heartbeat(self.moved);
        if let Some(source) = temperature {
            feeder = feeder.with_temperature(source);
        }
        let feeder = Arc::new(feeder);
        feeder_metrics::publish(&feeder, Arc::clone(&self.counters));
        Ok(feeder.run(self.stop).await)
    }
}

/// Starts every part into `system` (so that a failure part-way stops what already runs).
async fn start(
    config: &Config,
    path: &Path,
    queue: &AsyncQueue,
    system: &mut RunningSystem,
) -> Result<Feeding, AppError> {
    // This node's row among the nodes sharing the database (refused while a running node has
    // its name), before anything starts.
    let node = squeueha::nodes::NodeInfo {
        name: config.node_name(),
        host: config::host_name(),
        pid: std::process::id(),
        lanes: config.lanes.iter().map(|l| l.queue.clone()).collect(),
        status_url: None,
    };
    let node_name = node.name.clone();
    squeueha::nodes::join(queue, node)
        .await
        .map_err(|e| AppError::Usage(e.to_string()))?;
    let nodes_section = Arc::new(horos_ops::status::NodesSection::default());
    nodes_section.watch(queue.clone());
    // The one view of the GPUs: the model pool measures memory on this monitor, the sampler
    // reads it every interval_ms for the alerts, the coordinator's gauges and the feeder.
    let gpus = gpus::open(&config.gpus)
        .await
        .map_err(|e| AppError::Usage(e.to_string()))?;
    if let Some(monitor) = &gpus {
        system.gpus = Some(
            gpus::watch(&config.gpus, Arc::clone(monitor))
                .map_err(|e| AppError::Usage(e.to_string()))?,
        );
    }
    // The one VRAM ledger: lane servers, the pool's models and other processes book there.
    let ledger = open_ledger(config, gpus.as_deref())?;
    // The one host RAM budget of level-1 sleepers: the lanes' and the pool's share it.
    let host_ram = Arc::new(horos_gpu_alloc::host_ram::HostRam::new(
        config.gpus.host_memory_budget_mb(),
    ));
    let mut lane_rows = Vec::new();
    // Idle pooled models give way to the lanes' servers (set once the pool is built).
    let room = horos_gpu_alloc::booking::LatePool::default();
    let (lanes, mut mode_lanes) =
        start_lanes(config, queue, system, &ledger, &gpus, &mut lane_rows, &room).await?;
    // The status page's view of the lanes and the ingest pipeline (read as the page renders).
    let counters = Arc::new(feeder_metrics::FeederCounters::default());
    // The swaps by kind, on /metrics and the status page: the allocator's lanes' and the
    // pool's models' (with [allocator] or [coordinator.pool]).
    let pooled = config
        .coordinator
        .as_ref()
        .is_some_and(|c| c.pool.is_some());
    let swaps = (config.allocator.is_some() || pooled)
        .then(|| Arc::new(horos_modes::SwapMetrics::default()));
    let lanes_section = Arc::new(status_sections::LanesSection {
        rows: lane_rows,
        feeder: Arc::clone(&counters),
        asleep: status_sections::Asleep::default(),
    });
    // The lanes the allocator put to sleep, shown with them (status page, `ps`).
    let asleep = lanes_section.asleep.clone();
    let ingest_section = Arc::new(ingest_pipeline::gateway::IngestStatus::default());
    // The pipeline starts after the coordinator; its routes answer once it is set.
    let late_pipeline = ingest::LatePipeline::default();
    let switched = horos_modes::settings::switched_lanes(
        &config.lanes,
        config.allocator.as_ref(),
        config.feeder.cooldown_s(),
        &mut mode_lanes,
    );
    let board = horos_coordinator::ModeBoard::new();
    // When the feeder last moved: the deep health check reads it, the feeder beats it.
    let moved = horos_feeder::health::Heartbeat::default();
    // One view of the GPUs: the plan as carried out, audited against the ledger and the memory
    // the GPUs report used every 2 s (breaches logged, on /metrics as
    // horos_gpu_view_breaches_total).
    let plan = horos_gpu_alloc::view::PlanBook::new();
    if config.allocator.as_ref().is_some_and(|a| a.pool.is_some()) {
        plan.set_pool_in_plan();
    }
    let auditor = Arc::new(horos_gpu_alloc::view::Auditor::new());
    if config.allocator.is_some() || gpus.is_some() {
        drop(Arc::clone(&auditor).spawn(
            Arc::clone(&ledger),
            gpus.clone(),
            plan.clone(),
            std::time::Duration::from_secs(2),
        ));
    }
    if let Some(section) = &config.coordinator {
        let log_secrets = Redactions::new();
        let modes = config.allocator.as_ref().map(|_| board.clone());
        let pool = start_model_pool(
            config,
            section,
            gpus.clone(),
            Arc::clone(&host_ram),
            swaps.clone(),
        )
        .await?;
        if let Some(p) = &pool {
            let _ = room.set(p.pool().clone());
        }
        system.model_pool = pool.clone();
        let coordinator = start_coordinator(
            config,
            section,
            CoordinatorParts {
                switched,
                model_pool: pool,
                counters: Arc::clone(&counters),
                swaps: swaps.clone(),
                auditor: Arc::clone(&auditor),
                gauges: system
                    .gpus
                    .as_ref()
                    .map(horos_gpu_alloc::monitor::watch::GpuWatch::gauges),
                modes,
                // The secrets the servers' logs never show: the file's, and those a reload of
                // it adds.
                tenancy: Arc::new(crate::reload::ConfigFile::new(path, log_secrets.clone())?),
                log_secrets,
                ledger: Arc::clone(&ledger),
                ingest: config.ingest.as_ref().map(|_| late_pipeline.clone()),
                queue: queue.clone(),
                health: {
                    let mut parts =
                        health_parts(config, queue, &system.model_pool, &moved, &late_pipeline);
                    if config.allocator.is_some() || gpus.is_some() {
                        // The GPU view: red while a breach of its invariants holds.
                        parts.push(Arc::clone(&auditor) as _);
                    }
                    parts
                },
                sections: {
                    let mut sections: Vec<Arc<dyn horos_coordinator::StatusSection>> =
                        vec![nodes_section, lanes_section];
                    if let Some(s) = &swaps {
                        // What the swaps cost here, and the GPU time they took.
                        sections.push(Arc::new(horos_modes::SwapSection::new(Arc::clone(s))));
                    }
                    if config.ingest.is_some() {
                        sections.push(ingest_section.clone());
                    }
                    if config.allocator.is_some() {
                        // The GPU view's audit: breaches held now, and since start.
                        sections.push(Arc::clone(&auditor) as _);
                    }
                    sections
                },
            },
        )
        .await?;
        system.coordinator = Some(coordinator);
        if let (Some(pool), Some(p)) = (&system.model_pool, &section.pool) {
            p.preload_pinned(pool);
        }
    }
    if let Some(section) = &config.ingest {
        let mut section = section.clone();
        // A parked lane's refused connections mean "waiting for demand", not "down": falling
        // back would read every page with Tesseract and the lane would never be asked for.
        if section.vision_fallback
            && section.reader == config::ReaderKind::Openai
            && horos_modes::settings::switches_model(
                &config.lanes,
                &mode_lanes,
                &section.vision_model,
            )
        {
            tracing::info!(
                model = %section.vision_model,
                "[allocator] switches the vision model's lane: no Tesseract fallback"
            );
            section.vision_fallback = false;
        }
        let settings = section
            .settings(config.database_url())
            .map_err(|e| AppError::Usage(format!("ingest: {e}")))?;
        let pipeline = ingest::start(&settings)
            .await
            .map_err(|e| AppError::Usage(format!("ingest: {e}")))?;
        // Each lane's model does the stages `settings` say it serves (reading pages, embedding
        // chunks): their backlog counts as that lane's demand.
        for (ml, _, model) in horos_modes::settings::lane_models(&config.lanes, &mut mode_lanes) {
            for stage in settings.stages_served_by(model) {
                tracing::info!(lane = %ml.queue, stage = stage.queue(), "ingest's waiting work counts as this lane's demand");
                let q = pipeline.0.queue().clone();
                ml.add_demand(ingest_pipeline::backlog::StageBacklog::watch(q, stage));
            }
        }
        ingest_section.watch(&pipeline.0);
        let _ = late_pipeline.set(pipeline.0.clone());
        system.pipeline = Some(pipeline);
    }
    let stop = stop_on_signal()?;
    if let Some(c) = &system.coordinator {
        squeueha::nodes::set_status_url(queue, &node_name, format!("{}/status", c.url()))
            .await
            .map_err(|e| AppError::Usage(e.to_string()))?;
    }
    let heartbeat = squeueha::nodes::spawn_heartbeat(queue.clone(), node_name, stop.clone());
    // [allocator.pool]: the pooled models as one more mode, their waiting requests its demand.
    if let (Some(a), Some(pool), Some(c)) =
        (&config.allocator, &system.model_pool, &system.coordinator)
        && let Some(mode) = &a.pool
    {
        mode_lanes.push(horos_modes::pool_mode::mode_lane(
            pool.pool(),
            &a.gpus,
            Arc::new(c.room_demand()),
            mode,
        ));
    }
    if let Some(a) = &config.allocator
        && !mode_lanes.is_empty()
    {
        let initial = a.initial_modes(&config.lanes, &mode_lanes);
        // The swaps measured by earlier runs, kept in the ledger's file.
        let costs_path = config.ledger_path();
        let costs = horos_gpu_alloc::cost_store::CostStore::open(&costs_path)
            .map_err(|e| AppError::Usage(format!("swap costs in {}: {e}", costs_path.display())))?;
        let modes_config = modes::ModesConfig {
            costs: Some(Arc::new(costs)),
            host_ram: Some(Arc::clone(&host_ram)),
            ..a.modes_config(config.feeder.cooldown_s())
        };
        system.allocator = Some(
            modes::spawn(
                modes_config,
                mode_lanes,
                initial,
                queue.blocking().clone(),
                modes::Report {
                    log: system.coordinator.as_ref().map(|c| c.decision_log()),
                    board: system.coordinator.as_ref().map(|_| board.clone()),
                    asleep: Some(asleep.clone()),
                    plan: Some(plan.clone()),
                },
                swaps.unwrap_or_default(),
                stop.clone(),
            )
            .map_err(|e| AppError::Usage(format!("allocator: {e}")))?,
        );
    }
    Ok(Feeding {
        lanes,
        counters,
        temperature: system
            .gpus
            .as_ref()
            .map(|g| Arc::new(g.hottest()) as horos_feeder::TemperatureSource),
        stop,
        heartbeat,
        moved,
    })
}

/// A receiver that turns true on the first SIGINT or SIGTERM.
fn stop_on_signal() -> Result<watch::Receiver<bool>, AppError> {
    use tokio::signal::unix::{SignalKind, signal};
    let (stop, rx) = watch::channel(false);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
        }
        let _ = stop.send(true);
    });
    Ok(rx)
}

/// The feeder's lanes, each lane's server started; with `[allocator]`, one server instance
/// per lane and GPU, only those of the initial assignment started (the others wait with their
/// gates closed until the allocator switches a GPU to them).
async fn start_lanes(
    config: &Config,
    queue: &AsyncQueue,
    system: &mut RunningSystem,
    ledger: &Arc<VramLedger>,
    gpus: &Option<Arc<dyn GpuMonitor>>,
    rows: &mut Vec<status_sections::LaneRow>,
    room: &horos_gpu_alloc::booking::LatePool,
) -> Result<(Vec<Lane>, Vec<modes::ModeLane>), AppError> {
    let run_dir = config.run_dir();
    let owner = owner_of(config);
    let q = queue.blocking().clone();
    // Blocking work off the runtime (PostgreSQL's driver may not block a runtime thread).
    let sink = Arc::new(
        tokio::task::spawn_blocking(move || TableSink::new(q))
            .await
            .map_err(|e| AppError::Usage(e.to_string()))??,
    );
    horos_feeder::housekeeping::spawn_results_purge((*sink).clone(), &config.queue);
    let mut lanes = Vec::new();
    let mut mode_lanes: Vec<modes::ModeLane> = Vec::new();
    // Every server is built (leftover containers of an earlier run removed) before any starts.
    let mut to_start = Vec::new();
    for l in &config.lanes {
        let mut instances = Vec::new();
        for placement in l.placements(config.allocator.as_ref(), &config.lanes) {
            let client = Client::with_config(
                ClientConfig::new(placement.url.clone())
                    .total_timeout(Duration::from_secs(l.request_timeout_s)),
            )?;
            let gate = Arc::new(horos_feeder::LaneGate::new(true));
            let booking = l.booking(&placement, ledger, gpus.as_ref(), room);
            let server = servers::lane_server(l, &placement, booking, &run_dir, &owner)
                .await
                .map_err(|e| AppError::Usage(format!("lane `{}`: {e}", l.queue)))?;
            rows.push(status_sections::LaneRow {
                queue: l.queue.clone(),
                gpu: placement.gpu,
                url: placement.url.clone(),
                gate: gate.clone(),
                server: server.clone(),
                batch_size: l.batch_size,
            });
            let control: Arc<dyn ServerControl> = match server {
                Some(server) => {
                    system.servers.push(server.clone());
                    if placement.starts {
                        to_start.push((l.queue.clone(), server.clone()));
                    } else {
                        gate.close();
                    }
                    let control = server.control();
                    instances.push(modes::Instance {
                        gate: gate.clone(),
                        server: Arc::new(server),
                    });
                    control
                }
                None => Arc::new(HealthOnly::new(
                    client.clone(),
                    Duration::from_secs(l.start_wait_s),
                )),
            };
            lanes.push(
                Lane::new(l.queue.clone(), client, control, sink.clone())
                    .batch_size(l.batch_size)
                    .refill(l.refill)
                    .visibility(Duration::from_secs(l.visibility_s))
                    .gate(gate),
            );
        }
        mode_lanes.extend(l.mode_lane(config.allocator.as_ref(), instances));
    }
    for (queue, server) in to_start {
        server.start().await.map_err(|e| {
            AppError::Usage(format!("cannot start the server of lane `{queue}`: {e}"))
        })?;
    }
    Ok((lanes, mode_lanes))
}

/// The ledger at `config.ledger_path()`, its GPUs registered from `[gpus]`' monitor when
/// there is one.
fn open_ledger(
    config: &Config,
    gpus: Option<&dyn GpuMonitor>,
) -> Result<Arc<VramLedger>, AppError> {
    let path = config.ledger_path();
    let fail =
        |e: &dyn std::fmt::Display| AppError::Usage(format!("VRAM ledger {}: {e}", path.display()));
    let ledger = VramLedger::open(&path).map_err(|e| fail(&e))?;
    if let Some(monitor) = gpus {
        ledger.register_from(monitor).map_err(|e| fail(&e))?;
    }
    Ok(Arc::new(ledger))
}

/// Scopes the clean-up of leftover containers to this configuration's database, so two HOROS
/// instances on one machine never remove each other's containers.
fn owner_of(config: &Config) -> String {
    // Nodes share a PostgreSQL database: each node's servers and containers are its own.
    let node = config.node_name();
    let shared = config.database_url().map(|url| (url, node.as_str()));
    horos_servers::settings::container_owner(&config.database, shared)
}

/// `[coordinator.pool]`'s models loaded on demand, if the section has one. Its containers
/// have an owner of their own (the lanes' clean-up never removes them, nor theirs the lanes'),
/// and are given GPUs as devices only where NVML reads them.
async fn start_model_pool(
    config: &Config,
    section: &config::CoordinatorSection,
    gpus: Option<Arc<dyn GpuMonitor>>,
    host_ram: Arc<horos_gpu_alloc::host_ram::HostRam>,
    swaps: Option<Arc<horos_modes::SwapMetrics>>,
) -> Result<Option<horos_gpu_alloc::pool::PoolUpstream>, AppError> {
    let Some(p) = &section.pool else {
        return Ok(None);
    };
    let containers = pool::Containers {
        owner: format!("{}-pool", owner_of(config)),
        request_gpus: gpus.is_some() && config.gpus.source != config::GpuSource::Simulated,
    };
    let pool = pool::build(
        p,
        gpus,
        &config.ledger_path(),
        &config.run_dir(),
        containers,
        host_ram,
        swaps,
    )
    .await
    .map_err(AppError::Usage)?;
    // A pool that is one mode of the allocator's plan places models only on the GPUs the
    // allocator gives it, from the first load on (the pinned models' preload included).
    if config.allocator.as_ref().is_some_and(|a| a.pool.is_some()) {
        pool.pool().confine_to_given_gpus();
    }
    Ok(Some(pool))
}

/// The parts of this system `/health/ready` asks (besides the coordinator's scheduler): the
/// database takes a write, and (SQLite) its file system has 64 MB free; with lanes, the feeder moves (its loop, or an answer, within 10
/// minutes: longer than a request may take); with a pool, no model is stuck loading or stopping
/// past its start timeout and a minute; with `[ingest]`, its PDF workers are alive or can start.
fn health_parts(
    config: &Config,
    queue: &AsyncQueue,
    pool: &Option<horos_gpu_alloc::pool::PoolUpstream>,
    moved: &horos_feeder::health::Heartbeat,
    ingest: &crate::ingest::LatePipeline,
) -> Vec<Arc<dyn horos_server_control::HealthCheck>> {
    let mut parts: Vec<Arc<dyn horos_server_control::HealthCheck>> = vec![Arc::new(
        horos_feeder::health::DatabaseWrites(queue.clone()),
    )];
    // The database's file system: under 64 MB free, writes fail where the journal must grow.
    if config.database_url().is_none() {
        let dir = config
            .database
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        parts.push(Arc::new(horos_feeder::health::DiskSpace::new(dir, 64)));
    }
    if !config.lanes.is_empty() {
        parts.push(Arc::new(horos_feeder::health::FeederHealth::new(
            moved.clone(),
            Duration::from_secs(600),
        )));
    }
    if let (Some(p), Some(settings)) = (
        pool,
        config.coordinator.as_ref().and_then(|c| c.pool.as_ref()),
    ) {
        parts.push(Arc::new(horos_gpu_alloc::pool::PoolHealth::new(
            p.pool().clone(),
            Duration::from_secs(settings.start_timeout_s + 60),
        )));
    }
    if config.ingest.is_some() {
        parts.push(Arc::new(ingest_pipeline::gateway::PdfWorkersHealth::new(
            ingest.clone(),
        )));
    }
    parts
}

/// What the rest of the system hands the coordinator.
struct CoordinatorParts {
    /// The lanes the allocator switches.
    switched: Option<LaneUpstream>,
    /// `[coordinator.pool]`'s models.
    model_pool: Option<horos_gpu_alloc::pool::PoolUpstream>,
    /// The feeder's counters, on /metrics.
    counters: Arc<feeder_metrics::FeederCounters>,
    /// The allocator's swaps, on /metrics (with `[allocator]`).
    swaps: Option<Arc<horos_modes::SwapMetrics>>,
    /// The GPU view's auditor, on /metrics.
    auditor: Arc<horos_gpu_alloc::view::Auditor>,
    /// `[gpus]`' readings.
    gauges: Option<Arc<dyn horos_coordinator::GpuGauges>>,
    /// What each GPU serves, with `[allocator]`.
    modes: Option<horos_coordinator::ModeBoard>,
    /// The configuration file, read again on a reload.
    tenancy: Arc<dyn horos_coordinator::TenancySource>,
    /// What the servers' logs never show, shared with the reload that adds to it.
    log_secrets: Redactions,
    /// The VRAM ledger.
    ledger: Arc<VramLedger>,
    /// The binary's sections of the status page.
    sections: Vec<Arc<dyn horos_coordinator::StatusSection>>,
    /// With `[ingest]`: `POST /v1/search` over its pages and its workers on the admin API.
    ingest: Option<ingest::LatePipeline>,
    /// The lanes' queue database, whose jobs the admin API serves (`/api/v1/lanes`).
    queue: AsyncQueue,
    /// The parts `/health/ready` asks besides the coordinator's scheduler.
    health: Vec<Arc<dyn horos_server_control::HealthCheck>>,
}

/// The coordinator: every lane with a `model` and every `[[coordinator.model]]` is a fixed
/// upstream, the model pool (if any) adds the models loaded on demand; settings and async jobs
/// live in the queue database.
async fn start_coordinator(
    config: &Config,
    section: &config::CoordinatorSection,
    parts: CoordinatorParts,
) -> Result<horos_coordinator::Coordinator, AppError> {
    let CoordinatorParts {
        switched,
        model_pool,
        counters,
        swaps,
        auditor,
        gauges,
        modes,
        tenancy,
        log_secrets,
        ledger,
        sections,
        ingest,
        queue,
        health,
    } = parts;
    let mut upstream = horos_coordinator::StaticUpstream::new();
    for l in &config.lanes {
        if let Some(model) = &l.model
            && switched
                .as_ref()
                .is_none_or(|s| s.readiness(model) == horos_coordinator::Readiness::Unknown)
        {
            upstream = upstream.with(model.clone(), l.url.trim_end_matches('/').to_owned());
        }
    }
    for m in &section.models {
        upstream = upstream.with(m.name.clone(), m.url.trim_end_matches('/').to_owned());
    }
    let mut cfg = horos_coordinator::CoordinatorConfig {
        state_path: Some(config.database.clone()),
        watch_queues: config.lanes.iter().map(|l| l.queue.clone()).collect(),
        ..section.settings.clone()
    };
    let mut upstreams = horos_coordinator::UpstreamSet::new().with(Arc::new(upstream));
    if let Some(s) = switched {
        // Until measured, a parked lane's model is ready in about its switch time and a tick.
        let parked =
            horos_modes::settings::parked_load_s(&config.lanes, config.allocator.as_ref(), &s);
        for (model, load_s) in parked {
            cfg.load_s.entry(model).or_insert(load_s);
        }
        upstreams = upstreams.with(Arc::new(s));
    }
    if let Some(p) = model_pool {
        upstreams = upstreams.with(Arc::new(p));
    }
    let bind = cfg.bind;
    if !bind.ip().is_loopback() && cfg.api_key.is_none() && cfg.api_key_env.is_none() {
        // Only reachable with allow_unauthenticated_admin = true (validate refuses it otherwise).
        tracing::warn!(
            %bind,
            "coordinator.allow_unauthenticated_admin: the admin API (/api/*) is open to anyone who \
             can reach {bind}; set coordinator.api_key_env"
        );
    }
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| AppError::Usage(format!("coordinator.bind {bind}: {e}")))?;
    let mut builder = horos_coordinator::Coordinator::builder(cfg, Arc::new(upstreams))
        .extra_metrics(Arc::new(move |out: &mut String| {
            counters.render(out);
            if let Some(s) = &swaps {
                out.push_str(&s.render());
            }
            auditor.render(out);
        }))
        // Keys, limits and profiles read again from the file (SIGHUP, POST /api/v1/reload);
        // the servers' logs on the admin API (/api/v1/logs) and the status page.
        .tenancy_source(tenancy)
        .logs(Arc::new(crate::servers::log_book(config, log_secrets)));
    if let Some(board) = modes {
        builder = builder.modes(board);
    }
    // GPU temperature, memory, utilization and alerts on /metrics, the status page and
    // /api/v1/gpus, from [gpus]' sampler (where there are GPUs to read).
    if let Some(gauges) = gauges {
        builder = builder.gpu_gauges(gauges);
    }
    // The VRAM ledger on the admin API (/api/v1/leases): other processes book memory there,
    // and the pool and the lanes' servers place themselves around what they hold.
    builder = builder.admin_extension(Arc::new(horos_gpu_alloc::lease_api::LeaseAdmin(ledger)));
    // The lanes' jobs on the admin API (/api/v1/lanes/...): submit, a job's state and answer,
    // stats, dead letters; the operations of `submit`, `result`, `stats` and `dead`.
    let lanes = crate::lanes::lane_jobs(config, queue);
    builder = builder.admin_extension(Arc::new(horos_ops::http::LaneAdmin(lanes)));
    if let Some(addr) = section.control_bind {
        if !addr.ip().is_loopback()
            && section.settings.api_key.is_none()
            && section.settings.api_key_env.is_none()
            && !section.settings.allow_unauthenticated_admin
        {
            return Err(AppError::Usage(format!(
                "coordinator.control_bind {addr} is reachable from other machines: set \
                 coordinator.api_key_env (the admin API is served there)"
            )));
        }
        let control = std::net::TcpListener::bind(addr)
            .map_err(|e| AppError::Usage(format!("coordinator.control_bind {addr}: {e}")))?;
        builder = builder.control_listener(control);
    }
    for section in sections {
        builder = builder.status_section(section);
    }
    builder = builder.health_checks(health);
    if let (Some(p), Some(section)) = (ingest, &config.ingest) {
        // Its documents on the admin API (/api/v1/documents/...): the operations of `ingest`
        // and `docs`, confined to the inbox as theirs are.
        let inbox = ingest_pipeline::inbox::Inbox::new(&section.inbox);
        builder = builder
            .searcher(Arc::new(ingest_pipeline::gateway::IngestSearcher(
                p.clone(),
            )))
            .admin_extension(Arc::new(horos_ops::http::DocumentAdmin::new(
                p.clone(),
                inbox,
            )))
            .admin_extension(Arc::new(ingest_pipeline::gateway::IngestAdmin(p)));
    }
    builder
        .start(listener)
        .await
        .map_err(|e| AppError::Usage(format!("coordinator: {e}")))
}
