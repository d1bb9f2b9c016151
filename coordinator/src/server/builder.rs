//! Setting up and starting a [`Coordinator`]: its configuration, upstream and optional parts
//! ([`CoordinatorBuilder`]), then its listeners, background tasks and health parts.

use super::*;

/// How often counted usage is added to the state file.
const USAGE_SAVE_EVERY: Duration = Duration::from_secs(2);

/// Sets up a [`Coordinator`]: configuration, upstream, optional GPU gauges.
pub struct CoordinatorBuilder {
    cfg: CoordinatorConfig,
    upstream: Arc<dyn UpstreamPool>,
    gauges: Option<Arc<dyn GpuGauges>>,
    modes: Option<ModeBoard>,
    control_listener: Option<std::net::TcpListener>,
    extra: Option<ExtraMetrics>,
    sections: Vec<Arc<dyn StatusSection>>,
    searcher: Option<Arc<dyn Searcher>>,
    extensions: Vec<Arc<dyn AdminExtension>>,
    logs: Option<Arc<dyn LogBook>>,
    tenancy: Option<Arc<dyn TenancySource>>,
    health: Vec<Arc<dyn HealthCheck>>,
}

impl std::fmt::Debug for CoordinatorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorBuilder")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl CoordinatorBuilder {
    /// A builder over `cfg` and `upstream`, with none of the optional parts.
    pub(super) fn new(cfg: CoordinatorConfig, upstream: Arc<dyn UpstreamPool>) -> Self {
        CoordinatorBuilder {
            cfg,
            upstream,
            gauges: None,
            modes: None,
            control_listener: None,
            extra: None,
            sections: Vec::new(),
            searcher: None,
            extensions: Vec::new(),
            logs: None,
            tenancy: None,
            health: Vec::new(),
        }
    }

    /// GPU readings shown in `/metrics` and `/status`.
    pub fn gpu_gauges(mut self, g: Arc<dyn GpuGauges>) -> Self {
        self.gauges = Some(g);
        self
    }

    /// What each GPU serves, as an allocator sets it (status page and `/metrics`).
    pub fn modes(mut self, board: ModeBoard) -> Self {
        self.modes = Some(board);
        self
    }

    /// More series appended to `/metrics` (see [`ExtraMetrics`]).
    pub fn extra_metrics(mut self, f: ExtraMetrics) -> Self {
        self.extra = Some(f);
        self
    }

    /// Also serves the control plane (`/metrics`, `/status`, `/api/*`, `/health`) on this
    /// listener, from a thread and runtime of its own: it then stays fast even when the data
    /// plane saturates the CPU, not only when it saturates the GPUs. (The main listener keeps
    /// serving the control routes too.)
    pub fn control_listener(mut self, l: std::net::TcpListener) -> Self {
        self.control_listener = Some(l);
        self
    }

    /// Serves `extension`'s routes under `/api/v1/{name}` of the admin API (behind its key).
    pub fn admin_extension(mut self, extension: Arc<dyn AdminExtension>) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Serves the servers' logs from `book` under `/api/v1/logs` (behind the admin key) and
    /// shows their last lines on the status page.
    pub fn logs(mut self, book: Arc<dyn LogBook>) -> Self {
        self.logs = Some(book);
        self
    }

    /// Parts of the owner's system that `GET /health/ready` asks besides the coordinator's
    /// own scheduler (the feeder, the model pool, the database, worker pools).
    pub fn health_checks(mut self, parts: Vec<Arc<dyn HealthCheck>>) -> Self {
        self.health.extend(parts);
        self
    }

    /// Where [`Coordinator::reload`] and `POST /api/v1/reload` read the keys, limits and
    /// profiles again (see [`Tenancy`](crate::Tenancy)); without one a reload is refused.
    pub fn tenancy_source(mut self, source: Arc<dyn TenancySource>) -> Self {
        self.tenancy = Some(source);
        self
    }

    /// Answers `POST /v1/search` from `searcher` (without one the route answers 404).
    pub fn searcher(mut self, searcher: Arc<dyn Searcher>) -> Self {
        self.searcher = Some(searcher);
        self
    }

    /// Adds a section to the status page, after the coordinator's own (see [`StatusSection`]).
    pub fn status_section(mut self, section: Arc<dyn StatusSection>) -> Self {
        self.sections.push(section);
        self
    }

    /// Binds `config.bind` (127.0.0.1:8210 by default) and starts (see
    /// [`CoordinatorBuilder::start`]).
    pub async fn bind(self) -> Result<Coordinator, CoordinatorError> {
        let listener = TcpListener::bind(self.cfg.bind).await?;
        self.start(listener).await
    }

    /// Starts serving on `listener` (bind it to `config.bind`, or port 0 in tests) and
    /// starts the background tasks: snapshotter, pool housekeeping, job workers.
    pub async fn start(self, listener: TcpListener) -> Result<Coordinator, CoordinatorError> {
        let cfg = self.cfg;
        cfg.validate()?;
        // An extension named as an admin route, or as another extension, is refused here.
        let admin_routes = admin::admin_routes(&self.extensions)?;
        let admin_key = cfg.admin_key(|var| std::env::var(var).ok())?;
        let addr = listener.local_addr()?;
        let exposed = |a: SocketAddr| !a.ip().is_loopback() && !cfg.public_status;
        if cfg.public_status && !addr.ip().is_loopback() {
            tracing::warn!(
                %addr,
                "public_status = true: /status and /metrics are served without a key to anyone \
                 who can reach this address (documents, decisions, callers and usage)"
            );
        }
        let remotes = RemoteUpstream::from_env(&cfg.remotes)?;
        let gate = Arc::new(Gatekeeper::new(GatePolicy::new(
            &cfg.keys,
            cfg.allow_anonymous,
            &cfg.anonymous_collections,
            &cfg.clients,
            |var| std::env::var(var).ok(),
        )?));
        let remote_names = remotes.models().into_iter().collect();
        let manifest = Manifest::new(&cfg.manifest).map_err(InvalidConfig::from)?;
        let upstream: Arc<dyn UpstreamPool> = if remotes.is_empty() {
            self.upstream
        } else {
            Arc::new(
                UpstreamSet::new()
                    .with(self.upstream)
                    .with(Arc::new(remotes)),
            )
        };
        let models = upstream.models();
        let metrics = Arc::new(Metrics::new(models.iter().cloned()));
        let limits = cfg.clone();
        let sched = Scheduler::new(
            cfg.max_in_flight,
            move |m| limits.concurrency_of(m),
            Some(Arc::clone(&metrics) as Arc<dyn QueueObserver>),
        );
        let sched_for_health = Arc::clone(&sched);
        let loads = Arc::new(LoadClock::new(
            cfg.default_load_s,
            cfg.load_s.clone(),
            cfg.load_avg_alpha,
        ));
        let jobs = match &cfg.state_path {
            Some(p) => {
                Some(Jobs::open(p.clone(), cfg.job_max_attempts, cfg.default_priority).await?)
            }
            None => None,
        };
        // Load times an earlier run measured: the estimates start from them.
        if let Some(j) = &jobs {
            match j.load_times().await {
                Ok(learned) => loads.seed(learned),
                Err(e) => tracing::warn!(error = %e, "learned load times not read"),
            }
        }
        // The settings and profiles live in the jobs' database (a file, or PostgreSQL).
        let store = jobs.as_ref().map(|j| j.queue.blocking().clone());
        let (db, allow) = (store.clone(), cfg.allow_cloud_fallback);
        let settings = Arc::new(
            tokio::task::spawn_blocking(move || Settings::load(db, allow))
                .await
                .map_err(|e| CoordinatorError::Join(e.to_string()))??,
        );
        let configured = cfg.profiles.clone();
        let profiles = Arc::new(
            tokio::task::spawn_blocking(move || Profiles::load(&configured, store))
                .await
                .map_err(|e| CoordinatorError::Join(e.to_string()))??,
        );
        let (dtx, drx) = mpsc::channel(4096);
        let room = Arc::new(RoomQueue::default());
        let core = Arc::new(Core::new(
            cfg.clone(),
            Callers::new(gate, profiles),
            Places::new(sched, Arc::clone(&room), Arc::clone(&loads)),
            Routes::new(Arc::clone(&upstream), remote_names, Arc::clone(&settings)),
            Record::new(Arc::clone(&metrics), dtx.clone()),
            manifest,
        ));

        let mut tasks = Vec::new();
        let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
        tasks.push(tokio::spawn(snapshot::run(
            Sources {
                upstream: Arc::clone(&upstream),
                loads: Arc::clone(&loads),
                queue: jobs.as_ref().map(|j| j.queue.clone()),
                gauges: self.gauges,
                modes: self.modes,
                decisions: drx,
                keep: cfg.decisions_kept,
                interval: Duration::from_millis(cfg.snapshot_interval_ms),
                watch: cfg.watch_queues.clone(),
            },
            snap_tx,
        )));
        let up = Arc::clone(&upstream);
        let room = Arc::clone(core.places().room());
        let every = Duration::from_millis(cfg.maintain_interval_ms.max(10));
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match up.maintain().await {
                    Ok(unloaded) if !unloaded.is_empty() => {
                        tracing::info!(?unloaded, "models unloaded (stay-warm / keep-alive)");
                        room.freed();
                    }
                    Ok(_) => {}
                    // Not told to the waiters: they look every second anyway, and a failure
                    // that repeats must not wake them every tick.
                    Err(e) => tracing::warn!(error = %e, "pool housekeeping failed"),
                }
            }
        }));
        if let Some(j) = &jobs {
            // Finished jobs' results are kept `job_result_retention_s`, then deleted.
            let (j, keep) = (j.clone(), crate::clock::secs(cfg.job_result_retention_s));
            let every = (keep / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
            tasks.push(tokio::spawn(async move {
                loop {
                    match j.purge(keep).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(results = n, "old job results deleted"),
                        Err(e) => tracing::warn!(error = %e, "job results not purged"),
                    }
                    tokio::time::sleep(every).await;
                }
            }));
        }
        if let Some(j) = &jobs {
            // Usage goes to the state file every few seconds, and once more at shutdown.
            let (j, m, l) = (j.clone(), Arc::clone(&metrics), Arc::clone(&loads));
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(USAGE_SAVE_EVERY).await;
                    if let Err(e) = j.save_usage(&m.usage).await {
                        tracing::warn!(error = %e, "usage not saved (kept for the next try)");
                    }
                    if let Err(e) = j.save_load_times(&l).await {
                        tracing::warn!(error = %e, "load times not saved (kept for the next try)");
                    }
                }
            }));
        }
        if let (Some(j), true) = (&jobs, cfg.job_workers > 0) {
            tasks.push(tokio::spawn(jobs::run_workers(
                Arc::new(job_dispatch::CoreDispatch(Arc::clone(&core))),
                j.clone(),
                Arc::clone(&metrics),
                jobs::WorkerSettings {
                    workers: cfg.job_workers,
                    visibility: Duration::from_secs(cfg.job_visibility_s.max(1)),
                    budget_s: cfg.job_budget_s,
                },
            )));
        }

        let reloader = self.tenancy.map(|source| {
            Arc::new(Reloader::new(
                Arc::clone(core.callers().gate()),
                Arc::clone(core.callers().profiles()),
                source,
            ))
        });
        let kept_metrics = Arc::clone(&metrics);
        let kept_loads = Arc::clone(&loads);
        let kept_room = Arc::clone(core.places().room());
        let control = Arc::new(Control {
            snapshot: snap_rx,
            metrics,
            extra: self.extra,
            settings,
            api_key: admin_key,
            models,
            core: Arc::clone(&core),
            data_rt: tokio::runtime::Handle::current(),
            jobs: jobs.clone(),
            sections: self.sections,
            extensions: self.extensions,
            admin_routes,
            logs: self.logs,
            reloader: reloader.clone(),
            health: std::iter::once(
                Arc::new(SchedulerHealth(Arc::clone(&sched_for_health))) as Arc<dyn HealthCheck>
            )
            .chain(self.health)
            .collect(),
        });
        let app = Arc::new(App {
            control: Arc::clone(&control),
            core,
            jobs: jobs.clone(),
            searcher: self.searcher,
            exposed: exposed(addr),
        });
        let (stop, stop_rx) = watch::channel(false);
        let control_addr = match self.control_listener {
            Some(l) => {
                let guarded = exposed(l.local_addr()?);
                Some(spawn_control_thread(l, control, guarded, stop_rx.clone())?)
            }
            None => None,
        };
        let accept = tokio::spawn(accept_loop(listener, app, stop_rx));
        tracing::info!(%addr, "coordinator listening");
        Ok(Coordinator {
            addr,
            decision_log: DecisionLog::new(dtx),
            control_addr,
            tasks,
            accept: Some(accept),
            stop,
            jobs,
            metrics: kept_metrics,
            loads: kept_loads,
            room: kept_room,
            reloader,
        })
    }
}
