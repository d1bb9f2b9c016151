//! The feeder: batches in, results out, poison pills isolated by bisection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horos_gpu_alloc::thermal::ThermalPolicy;
use horos_vllm_client::{ChatRequest, ChatResponse, Client, ErrorClass, TimeoutPhase};
use squeueha::{AsyncQueue, Job, Lease};
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::gate::LaneGate;
use crate::sink::{Completed, ResultSink};
use horos_server_control::{Backoff, ServerControl};

/// Turns a claimed job into the request to send. An `Err` means the payload can never become a
/// request: the job is dead-lettered with that message.
pub type RequestBuilder =
    Arc<dyn Fn(&Job) -> std::result::Result<ChatRequest, String> + Send + Sync>;

/// A source of the GPU's temperature (°C) for a temperature-following [`ThermalPolicy`].
pub type TemperatureSource = Arc<dyn Fn() -> Option<f64> + Send + Sync>;

/// One model type: its queue, its server (a client and a [`ServerControl`]) and where its results
/// go.
#[derive(Clone)]
pub struct Lane {
    queue: String,
    client: Client,
    control: Arc<dyn ServerControl>,
    sink: Arc<dyn ResultSink>,
    batch_size: usize,
    refill: usize,
    visibility: Duration,
    build: RequestBuilder,
    gate: Arc<LaneGate>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("queue", &self.queue)
            .field("server", &self.client.base_url())
            .field("batch_size", &self.batch_size)
            .field("refill", &self.refill)
            .field("visibility", &self.visibility)
            .finish_non_exhaustive()
    }
}

/// The default [`RequestBuilder`]: the payload is a JSON [`ChatRequest`].
pub fn json_chat_request(job: &Job) -> std::result::Result<ChatRequest, String> {
    serde_json::from_slice(&job.payload)
        .map_err(|e| format!("payload of job {} is not a chat request: {e}", job.id))
}

impl Lane {
    /// A lane claiming from `queue`, sending to `client`'s server, storing into `sink`; batches of
    /// 16, a 5-minute visibility, payloads read as JSON [`ChatRequest`]s.
    pub fn new(
        queue: impl Into<String>,
        client: Client,
        control: Arc<dyn ServerControl>,
        sink: Arc<dyn ResultSink>,
    ) -> Self {
        Lane {
            queue: queue.into(),
            client,
            control,
            sink,
            batch_size: 16,
            refill: 0,
            visibility: Duration::from_secs(300),
            build: Arc::new(json_chat_request),
            gate: Arc::new(LaneGate::default()),
        }
    }

    /// Jobs claimed per batch (the seed: 8–16, matching the server's `--max-num-seqs`). At least 1.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// Refill mode: after the first batch of a round, claim a new job as each one finishes, so
    /// that `batch_size` requests stay in flight, up to `n` more jobs per round (then the round
    /// ends: the thermal pause, the lane priorities and a stop request are looked at). `0` (the
    /// default) is the seed's behaviour: one batch per round, all of it finished before the next.
    /// Refilling stops at the first cut or refused connection, so a crash still bisects at most
    /// `batch_size` jobs.
    pub fn refill(mut self, n: usize) -> Self {
        self.refill = n;
        self
    }

    /// How long claimed jobs stay invisible. The leases of jobs whose requests are running are
    /// renewed every third of it (and during bisection restarts), so it bounds how soon a crashed
    /// feeder's jobs come back, not how long a request may take.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// How a job becomes a request (default: [`json_chat_request`]).
    pub fn request_builder(mut self, build: RequestBuilder) -> Self {
        self.build = build;
        self
    }

    /// Shares `gate` (default: a gate of its own, always open): batches start only while it is
    /// open.
    pub fn gate(mut self, gate: Arc<LaneGate>) -> Self {
        self.gate = gate;
        self
    }

    /// The queue name.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}

/// Feeder settings.
#[derive(Debug, Clone)]
pub struct FeederConfig {
    /// Pause after each batch (gpu-alloc's thermal pacing; the seed's fixed 10 s by default).
    pub thermal: ThermalPolicy,
    /// Sleep when no lane has work.
    pub idle_poll: Duration,
    /// When released jobs (server down or busy) become visible again.
    pub release_delay: Duration,
    /// Retry delay of a job the server refused as a bad request (`None`: the queue's backoff). It is
    /// dead-lettered once its attempts are used up.
    pub bad_request_delay: Option<Duration>,
    /// Retry delay of a job that failed otherwise (a cut connection on a healthy server, a
    /// timeout, a 500, an answer that does not parse) (`None`: the queue's backoff).
    pub retry_delay: Option<Duration>,
    /// Pause before trying again after a failed restart or a queue error.
    pub error_pause: Duration,
    /// Health checks of every lane's server in [`Feeder::run`], also while idle (R3): a server
    /// found unhealthy is recovered in the background like one found down by a batch. `None`:
    /// only batches detect a dead server.
    pub health_interval: Option<Duration>,
}

impl Default for FeederConfig {
    fn default() -> Self {
        FeederConfig {
            thermal: ThermalPolicy::default(),
            idle_poll: Duration::from_millis(200),
            release_delay: Duration::from_secs(1),
            bad_request_delay: None,
            retry_delay: None,
            error_pause: Duration::from_secs(1),
            health_interval: Some(Duration::from_secs(5)),
        }
    }
}

/// A job buried as a poison pill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison {
    /// The job.
    pub job_id: i64,
    /// Bisection reruns it took to isolate it.
    pub reruns: usize,
    /// The reason written to the dead-letter table.
    pub reason: String,
}

/// What one batch (with its bisection, when it crashed the server) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// The lane (queue).
    pub lane: String,
    /// Jobs claimed.
    pub claimed: usize,
    /// Jobs whose result was stored (and acked).
    pub completed: usize,
    /// Jobs given back without counting the attempt (server down or busy, or untested after a
    /// crash).
    pub released: usize,
    /// Jobs nacked for a retry (attempt counted).
    pub retried: usize,
    /// Jobs dead-lettered for their own fault (bad request past its attempts, unusable payload).
    pub dead: usize,
    /// Jobs buried as poison pills.
    pub poisoned: Vec<Poison>,
    /// The server was down before the batch reached it: the whole batch was released.
    pub server_down: bool,
    /// The batch took the server down.
    pub crashed: bool,
    /// Server restarts.
    pub restarts: usize,
    /// Bisection reruns (sub-batches sent again after a crash).
    pub reruns: usize,
}

/// Totals over a feeder's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeederStats {
    /// Batches run (with at least one job).
    pub batches: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs released.
    pub released: u64,
    /// Jobs nacked for a retry.
    pub retried: u64,
    /// Jobs dead-lettered for their own fault.
    pub dead: u64,
    /// Poison pills buried.
    pub poisoned: u64,
    /// Batches that crashed their server.
    pub crashes: u64,
    /// Server restarts (after a crash, before bisection reruns, and by background recovery of a
    /// server found down or unhealthy).
    pub restarts: u64,
    /// Bisection reruns.
    pub reruns: u64,
}

impl FeederStats {
    fn add(&mut self, r: &BatchReport) {
        let n = |x: usize| u64::try_from(x).unwrap_or(u64::MAX);
        self.batches += u64::from(r.claimed > 0);
        self.completed += n(r.completed);
        self.released += n(r.released);
        self.retried += n(r.retried);
        self.dead += n(r.dead);
        self.poisoned += n(r.poisoned.len());
        self.crashes += u64::from(r.crashed);
        self.restarts += n(r.restarts);
        self.reruns += n(r.reruns);
    }
}

/// A lane whose server is being brought back by [`Feeder::run`].
struct Recovery {
    /// The background health check / restart: whether the server is back, whether it was
    /// restarted to get there.
    task: Option<tokio::task::JoinHandle<(bool, bool)>>,
    /// When to try the lane again after a failed recovery.
    retry_at: tokio::time::Instant,
    /// The waits after failed recoveries.
    backoff: Backoff,
}

/// What sending a group of jobs left undecided: jobs whose connection was cut or refused.
struct GroupOutcome {
    /// (job, whether its request reached the server).
    suspects: Vec<(Job, bool)>,
    /// No job of the group reached the server (every one was refused at connect).
    none_reached: bool,
}

enum Sent {
    Answer(ChatResponse),
    Invalid(String),
    Failed(horos_vllm_client::Error),
    Lost(String),
}

/// The feeder: claims batches per lane (first lane first: put Think first), sends each batch's
/// requests concurrently so the server batches them, stores results, releases the batch when the
/// server is down, dead-letters bad requests after their attempts, and isolates poison pills by
/// bisection. See the crate documentation.
pub struct Feeder {
    queue: AsyncQueue,
    lanes: Vec<Lane>,
    config: FeederConfig,
    temperature: Option<TemperatureSource>,
    in_flight: Arc<AtomicUsize>,
    stats: Mutex<FeederStats>,
}

impl std::fmt::Debug for Feeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeder")
            .field("lanes", &self.lanes)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Feeder {
    /// A feeder over `queue` (the database every lane claims from).
    pub fn new(queue: AsyncQueue, lanes: Vec<Lane>, config: FeederConfig) -> Result<Self> {
        if lanes.is_empty() {
            return Err(Error::Config("a feeder needs at least one lane".into()));
        }
        Ok(Feeder {
            queue,
            lanes,
            config,
            temperature: None,
            in_flight: Arc::new(AtomicUsize::new(0)),
            stats: Mutex::new(FeederStats::default()),
        })
    }

    /// Reads the GPU temperature for [`ThermalPolicy::FollowTemperature`].
    pub fn with_temperature(mut self, source: TemperatureSource) -> Self {
        self.temperature = Some(source);
        self
    }

    /// The lanes, in priority order.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// Requests being sent right now (all lanes): a gauge for pacing and benchmarks.
    pub fn in_flight_gauge(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.in_flight)
    }

    /// Totals so far.
    pub fn stats(&self) -> FeederStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn record(&self, report: &BatchReport) {
        if let Ok(mut s) = self.stats.lock() {
            s.add(report);
        }
    }

    /// Runs until `stop` becomes true (or its sender is dropped): batch after batch, first lane with
    /// work first, the thermal pause after each batch. A batch in progress is finished (results
    /// stored, the rest released) before returning, so stopping loses no job.
    ///
    /// A lane whose server is down (its batch was released) is recovered in the background —
    /// [`ServerControl::recover`] unless it is healthy again — and skipped meanwhile, so the other
    /// lanes keep working; a failed recovery is tried again after a backoff (from
    /// [`FeederConfig::error_pause`], doubling, at most 60 s).
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) -> FeederStats {
        let mut recovering: Vec<Option<Recovery>> = self.lanes.iter().map(|_| None).collect();
        let mut probes: Vec<Option<tokio::task::JoinHandle<bool>>> =
            self.lanes.iter().map(|_| None).collect();
        let mut next_probe = tokio::time::Instant::now();
        // When each lane last completed a job: a failed probe of a lane that is completing jobs
        // means a busy server (the probe queued behind real work), not a hung one.
        let mut progressed: Vec<Option<tokio::time::Instant>> =
            self.lanes.iter().map(|_| None).collect();
        loop {
            // Stop when asked, or when nobody can ask any more (the sender is gone).
            if *stop.borrow() || stop.has_changed().is_err() {
                // No health check or restart may run on after this returns: the caller goes on
                // to stop the servers. A restart under way is finished rather than cut short
                // (a half-started server could outlive its stop).
                for p in probes.iter().flatten() {
                    p.abort();
                }
                for r in recovering.iter_mut().flatten() {
                    if let Some(t) = r.task.take()
                        && let Ok((_, true)) = t.await
                        && let Ok(mut s) = self.stats.lock()
                    {
                        s.restarts += 1;
                    }
                }
                return self.stats();
            }
            let now = tokio::time::Instant::now();
            if let Some(interval) = self.config.health_interval
                && now >= next_probe
            {
                next_probe = now + interval;
                for ((lane, probe), rec) in self.lanes.iter().zip(&mut probes).zip(&recovering) {
                    if probe.is_none() && rec.is_none() && lane.gate.is_open() {
                        let control = Arc::clone(&lane.control);
                        *probe = Some(tokio::spawn(async move { control.healthy().await }));
                    }
                }
            }
            for (i, lane) in self.lanes.iter().enumerate() {
                if !probes[i].as_ref().is_some_and(|p| p.is_finished()) {
                    continue;
                }
                let healthy = match probes[i].take() {
                    Some(p) => p.await.unwrap_or(false),
                    None => true,
                };
                let busy = match (progressed[i], self.config.health_interval) {
                    (Some(at), Some(interval)) => now.duration_since(at) < interval * 2,
                    _ => false,
                };
                if !healthy && busy {
                    tracing::info!(lane = %lane.queue, "health check failed while the lane completes jobs: busy, not restarted");
                } else if !healthy && recovering[i].is_none() && lane.gate.is_open() {
                    tracing::warn!(lane = %lane.queue, "health check failed: recovering the server");
                    recovering[i] = Some(Recovery {
                        task: Some(spawn_recovery(lane)),
                        retry_at: now,
                        backoff: self.recovery_backoff(),
                    });
                }
            }
            for (lane, slot) in self.lanes.iter().zip(recovering.iter_mut()) {
                if let Some(r) = slot
                    && r.task.as_ref().is_some_and(|t| t.is_finished())
                {
                    let (recovered, restarted) = match r.task.take() {
                        Some(task) => task.await.unwrap_or((false, false)),
                        None => (false, false),
                    };
                    if restarted && let Ok(mut s) = self.stats.lock() {
                        s.restarts += 1;
                    }
                    if recovered {
                        tracing::info!(lane = %lane.queue, "server recovered");
                        *slot = None;
                    } else {
                        let wait = r.backoff.next_delay();
                        tracing::warn!(lane = %lane.queue, retry_in = ?wait, "server recovery failed");
                        r.retry_at = now + wait;
                    }
                }
            }
            let mut worked = false;
            for (i, lane) in self.lanes.iter().enumerate() {
                let backoff = match &recovering[i] {
                    Some(r) if r.task.is_some() || now < r.retry_at => continue,
                    Some(r) => r.backoff.clone(),
                    None => self.recovery_backoff(),
                };
                let Some(busy) = lane.gate.enter() else {
                    continue;
                };
                let outcome = self.run_lane_batch(lane).await;
                drop(busy);
                match outcome {
                    Ok(report) if report.claimed == 0 => {
                        // An idle lane whose recovery failed: nothing else would try again
                        // (probes skip a recovering lane), so retry the recovery itself.
                        if let Some(r) = &mut recovering[i] {
                            tracing::info!(lane = %lane.queue, "retrying the server recovery");
                            r.task = Some(spawn_recovery(lane));
                            r.backoff = backoff;
                        }
                        continue;
                    }
                    Ok(report) if report.server_down => {
                        worked = true;
                        tracing::warn!(lane = %lane.queue, "server down: batch released, recovering the server");
                        recovering[i] = Some(Recovery {
                            task: Some(spawn_recovery(lane)),
                            retry_at: now,
                            backoff,
                        });
                        // Nothing ran: no thermal pause; the next lanes get their turn.
                        continue;
                    }
                    Ok(report) => {
                        worked = true;
                        recovering[i] = None;
                        if report.completed > 0 {
                            progressed[i] = Some(tokio::time::Instant::now());
                        }
                        let temp = match &self.temperature {
                            // NVML behind it: a driver call, kept off the runtime's workers.
                            Some(t) => {
                                let t = Arc::clone(t);
                                tokio::task::spawn_blocking(move || t())
                                    .await
                                    .ok()
                                    .flatten()
                            }
                            None => None,
                        };
                        let s = self.config.thermal.pause_after_batch(temp);
                        // NaN (a bad reading) pauses nothing rather than panicking.
                        let d = Duration::try_from_secs_f64(s.clamp(0.0, 3600.0));
                        pause(&mut stop, d.unwrap_or_default()).await;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(lane = %lane.queue, error = %e, "batch failed");
                        worked = true;
                        pause(&mut stop, self.config.error_pause).await;
                        break;
                    }
                }
            }
            if !worked {
                pause(&mut stop, self.config.idle_poll).await;
            }
        }
    }

    /// Claims and runs one batch of lane `index` (see [`Feeder::run`]); a report with `claimed ==
    /// 0` when its queue had nothing ready.
    pub async fn run_batch(&self, index: usize) -> Result<BatchReport> {
        let lane = self
            .lanes
            .get(index)
            .ok_or_else(|| Error::Config(format!("no lane {index}")))?;
        self.run_lane_batch(lane).await
    }

    async fn run_lane_batch(&self, lane: &Lane) -> Result<BatchReport> {
        let mut report = BatchReport {
            lane: lane.queue.clone(),
            ..BatchReport::default()
        };
        let jobs = self
            .queue
            .poll_batch(&lane.queue, lane.batch_size, lane.visibility)
            .await?;
        report.claimed = jobs.len();
        if jobs.is_empty() {
            return Ok(report);
        }
        let result = self.batch(lane, jobs, &mut report).await;
        self.record(&report);
        result.map(|()| report)
    }

    async fn batch(&self, lane: &Lane, jobs: Vec<Job>, report: &mut BatchReport) -> Result<()> {
        let outcome = self.run_group(lane, jobs, lane.refill, report).await?;
        if outcome.suspects.is_empty() {
            return Ok(());
        }
        if outcome.none_reached {
            // Not the jobs' fault: nothing was sent. Give the batch back, attempts not counted.
            report.server_down = true;
            let jobs = outcome.suspects.into_iter().map(|(j, _)| j).collect();
            return self.release(jobs, self.config.release_delay, report).await;
        }
        if lane.control.healthy().await {
            return self.settle_hiccups(lane, outcome.suspects, report).await;
        }
        report.crashed = true;
        tracing::warn!(lane = %lane.queue, suspects = outcome.suspects.len(), "batch crashed the server: bisecting");
        let suspects = outcome.suspects.into_iter().map(|(j, _)| j).collect();
        self.isolate(lane, suspects, report).await
    }

    /// Connections were cut or refused but the server is healthy: a cut request counts an attempt
    /// (a request that keeps cutting its connection dies eventually), a refused one is released.
    async fn settle_hiccups(
        &self,
        lane: &Lane,
        suspects: Vec<(Job, bool)>,
        report: &mut BatchReport,
    ) -> Result<()> {
        let mut refused = Vec::new();
        for (job, reached) in suspects {
            if reached {
                let dead = self
                    .sink_nack(
                        lane,
                        job,
                        "connection lost mid-request".into(),
                        self.config.retry_delay,
                    )
                    .await?;
                if dead {
                    report.dead += 1;
                } else {
                    report.retried += 1;
                }
            } else {
                refused.push(job);
            }
        }
        self.release(refused, self.config.release_delay, report)
            .await
    }

    /// Bisection: rerun the smaller half of the suspects; if it crashes, its unfinished jobs are the
    /// new suspects and the untested half is released; if not, the other half is. A suspect that
    /// crashes the server when sent alone is buried. At most ⌈log2 n⌉ + 1 reruns per poison job.
    async fn isolate(
        &self,
        lane: &Lane,
        suspects: Vec<Job>,
        report: &mut BatchReport,
    ) -> Result<()> {
        let mut suspects = suspects;
        let mut need_restart = true;
        let mut reruns = 0usize;
        loop {
            if need_restart {
                if let Err(e) = self.restart(lane, report).await {
                    self.release(suspects, self.config.release_delay, report)
                        .await?;
                    return Err(e);
                }
                suspects = self.extend_all(lane, suspects).await?;
            }
            if suspects.is_empty() {
                return Ok(());
            }
            let half = suspects.len() / 2;
            let rest = if half == 0 {
                Vec::new()
            } else {
                suspects.split_off(half)
            };
            let alone = suspects.len() == 1 && rest.is_empty();
            reruns += 1;
            report.reruns += 1;
            let outcome = match self.run_group(lane, suspects, 0, report).await {
                Ok(o) => o,
                Err(e) => {
                    // Best effort: the untested half goes back now rather than at lease expiry.
                    let _ = self.release(rest, Duration::ZERO, report).await;
                    return Err(e);
                }
            };
            let crashed = !outcome.suspects.is_empty() && !lane.control.healthy().await;
            if !crashed {
                self.settle_hiccups(lane, outcome.suspects, report).await?;
                if rest.is_empty() {
                    // Sent alone without crashing: the crash did not reproduce.
                    return Ok(());
                }
                suspects = rest;
                need_restart = false;
                continue;
            }
            // This group crashed the server again: the untested half goes back to the queue.
            self.release(rest, Duration::ZERO, report).await?;
            let failed: Vec<Job> = outcome.suspects.into_iter().map(|(j, _)| j).collect();
            if alone {
                for job in failed {
                    let reason = format!(
                        "poison pill: this request crashed the inference server of lane `{}` when sent alone (isolated by bisection in {} reruns)",
                        lane.queue, reruns
                    );
                    tracing::warn!(lane = %lane.queue, job = job.id, reruns, "poison pill buried");
                    self.sink_bury(lane, &job, &reason).await?;
                    report.poisoned.push(Poison {
                        job_id: job.id,
                        reruns,
                        reason,
                    });
                }
                return self.restart(lane, report).await;
            }
            suspects = failed;
            need_restart = true;
        }
    }

    async fn restart(&self, lane: &Lane, report: &mut BatchReport) -> Result<()> {
        report.restarts += 1;
        lane.control
            .recover()
            .await
            .map_err(|source| Error::Restart {
                lane: lane.queue.clone(),
                source,
            })
    }

    /// The waits between failed recoveries of a lane's server: from
    /// [`FeederConfig::error_pause`] (at least 10 ms), doubling, at most 60 s.
    fn recovery_backoff(&self) -> Backoff {
        Backoff::new(
            self.config.error_pause.max(Duration::from_millis(10)),
            Duration::from_secs(60),
        )
    }

    /// Extends every lease by the lane's visibility (a restart can be long); jobs whose lease went
    /// stale are dropped (another worker has them).
    async fn extend_all(&self, lane: &Lane, jobs: Vec<Job>) -> Result<Vec<Job>> {
        let mut kept = Vec::with_capacity(jobs.len());
        for job in jobs {
            match self.queue.extend(job.lease, lane.visibility).await {
                Ok(_) => kept.push(job),
                Err(squeueha::Error::StaleLease { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(kept)
    }

    async fn release(
        &self,
        jobs: Vec<Job>,
        delay: Duration,
        report: &mut BatchReport,
    ) -> Result<()> {
        self.release_leases(jobs.into_iter().map(|j| j.lease), delay, report)
            .await
    }

    /// [`Feeder::release`] by leases; a lease no longer current (the job was settled meanwhile)
    /// is skipped.
    async fn release_leases(
        &self,
        leases: impl IntoIterator<Item = Lease>,
        delay: Duration,
        report: &mut BatchReport,
    ) -> Result<()> {
        for lease in leases {
            match self.queue.release(lease, delay).await {
                Ok(()) => report.released += 1,
                Err(squeueha::Error::StaleLease { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Sends `jobs` concurrently, stores the answers, settles the jobs that failed for their own
    /// reasons, and returns those whose connection was cut or refused. With `refill > 0`, each
    /// finished job is replaced by a newly claimed one (up to `refill` more in all) as long as no
    /// connection was cut or refused, so the server never waits for the slowest request of a batch.
    async fn run_group(
        &self,
        lane: &Lane,
        jobs: Vec<Job>,
        refill: usize,
        report: &mut BatchReport,
    ) -> Result<GroupOutcome> {
        let mut set: JoinSet<Sent> = JoinSet::new();
        let mut held: HashMap<tokio::task::Id, Job> = HashMap::new();
        let mut budget = refill;
        let mut suspects = Vec::new();
        let mut answered = 0usize;
        let mut others = 0usize;
        // Jobs of the round being settled, out of `held` but not yet stored, nacked or released:
        // given back if the queue or the sink fails midway.
        let mut unsettled: Vec<Lease> = Vec::new();
        self.spawn_requests(lane, jobs, &mut set, &mut held);
        // The leases of the requests in flight are renewed every third of the lease, so a long
        // request (a vision model on a big page) is never claimed again while it runs, and a short
        // lease still brings a crashed feeder's jobs back soon.
        let every = (lane.visibility / 3).max(Duration::from_millis(50));
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let driven: Result<()> = async {
            loop {
                let first = tokio::select! {
                    next = set.join_next_with_id() => match next {
                        Some(first) => first,
                        None => break,
                    },
                    _ = renew.tick() => {
                        self.renew_leases(lane, held.values().map(|j| j.lease)).await;
                        continue;
                    }
                };
                let mut finished = vec![first];
                while let Some(more) = set.try_join_next_with_id() {
                    finished.push(more);
                }
                let freed = finished.len();
                let mut done = Vec::new();
                let mut release = Vec::new();
                for result in finished {
                    let (id, sent) = match result {
                        Ok(pair) => pair,
                        Err(e) => (e.id(), Sent::Lost(format!("request task failed: {e}"))),
                    };
                    let Some(job) = held.remove(&id) else {
                        continue;
                    };
                    unsettled.push(job.lease);
                    match sent {
                        Sent::Answer(response) => done.push(Completed { job, response }),
                        Sent::Invalid(msg) => {
                            others += 1;
                            self.sink_bury(lane, &job, &format!("invalid request: {msg}"))
                                .await?;
                            report.dead += 1;
                        }
                        Sent::Lost(msg) => {
                            others += 1;
                            let delay = self.config.retry_delay;
                            self.nack_counted(lane, job, msg, delay, report).await?;
                        }
                        Sent::Failed(e) => match e.class() {
                            ErrorClass::ServerCrashed => suspects.push((job, true)),
                            ErrorClass::Retryable if is_refusal(&e) => suspects.push((job, false)),
                            ErrorClass::Retryable if e.status().is_some() => {
                                // 429/503...: the server is busy, not the job's fault.
                                others += 1;
                                release.push(job);
                            }
                            class => {
                                others += 1;
                                let (delay, reason) = if class == ErrorClass::BadRequest {
                                    (self.config.bad_request_delay, format!("bad request: {e}"))
                                } else {
                                    (self.config.retry_delay, e.to_string())
                                };
                                self.nack_counted(lane, job, reason, delay, report).await?;
                            }
                        },
                    }
                }
                answered += done.len();
                if !done.is_empty() {
                    let sink = Arc::clone(&lane.sink);
                    let n = blocking(move || sink.store(&done)).await?;
                    report.completed += n;
                }
                self.release(release, self.config.release_delay, report)
                    .await?;
                unsettled.clear();
                // A closed gate (the GPU is leaving this lane) ends the refills: the switch
                // waits for this group only.
                if suspects.is_empty() && budget > 0 && lane.gate.is_open() {
                    let n = freed.min(budget);
                    let more = self
                        .queue
                        .poll_batch(&lane.queue, n, lane.visibility)
                        .await?;
                    // An empty claim: the backlog is drained, stop refilling.
                    budget = if more.is_empty() {
                        0
                    } else {
                        budget.saturating_sub(more.len())
                    };
                    report.claimed += more.len();
                    self.spawn_requests(lane, more, &mut set, &mut held);
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = driven {
            // The queue or the sink failed: give back what this group still holds (best effort;
            // what cannot be released comes back when its lease expires).
            set.abort_all();
            let mut left: Vec<Lease> = held.into_values().map(|j| j.lease).collect();
            left.extend(suspects.into_iter().map(|(j, _)| j.lease));
            // Settled ones among them answer `StaleLease`, which `release_leases` skips.
            left.extend(unsettled);
            let _ = self.release_leases(left, Duration::ZERO, report).await;
            return Err(e);
        }
        let none_reached = report_none_reached(&suspects) && others == 0 && answered == 0;
        Ok(GroupOutcome {
            suspects,
            none_reached,
        })
    }

    /// Extends `leases` by the lane's visibility. Best effort: a lease that went stale (the job
    /// was claimed again) or a queue error is only logged, the request runs on either way.
    async fn renew_leases(&self, lane: &Lane, leases: impl Iterator<Item = Lease>) {
        for lease in leases {
            match self.queue.extend(lease, lane.visibility).await {
                Ok(_) => {}
                Err(squeueha::Error::StaleLease { .. }) => {
                    tracing::warn!(lane = %lane.queue, job = lease.job_id, "lease lost while the request ran");
                }
                Err(e) => {
                    tracing::warn!(lane = %lane.queue, job = lease.job_id, error = %e, "lease renewal failed");
                }
            }
        }
    }

    async fn nack_counted(
        &self,
        lane: &Lane,
        job: Job,
        reason: String,
        delay: Option<Duration>,
        report: &mut BatchReport,
    ) -> Result<()> {
        if self.sink_nack(lane, job, reason, delay).await? {
            report.dead += 1;
        } else {
            report.retried += 1;
        }
        Ok(())
    }

    fn spawn_requests(
        &self,
        lane: &Lane,
        jobs: Vec<Job>,
        set: &mut JoinSet<Sent>,
        held: &mut HashMap<tokio::task::Id, Job>,
    ) {
        for job in jobs {
            let request = (lane.build)(&job);
            let client = lane.client.clone();
            let gauge = Arc::clone(&self.in_flight);
            let handle = set.spawn(async move {
                let request = match request {
                    Ok(r) => r,
                    Err(msg) => return Sent::Invalid(msg),
                };
                gauge.fetch_add(1, Ordering::Relaxed);
                let answer = client.chat(&request).await;
                gauge.fetch_sub(1, Ordering::Relaxed);
                match answer {
                    Ok(a) => Sent::Answer(a),
                    Err(e) => Sent::Failed(e),
                }
            });
            held.insert(handle.id(), job);
        }
    }

    async fn sink_bury(&self, lane: &Lane, job: &Job, reason: &str) -> Result<()> {
        let sink = Arc::clone(&lane.sink);
        let job = job.clone();
        let reason = reason.to_owned();
        blocking(move || sink.bury(&job, &reason)).await
    }

    async fn sink_nack(
        &self,
        lane: &Lane,
        job: Job,
        reason: String,
        delay: Option<Duration>,
    ) -> Result<bool> {
        let sink = Arc::clone(&lane.sink);
        blocking(move || sink.nack(&job, &reason, delay)).await
    }
}

/// Checks the lane's server and asks for its recovery if it is down: `(recovered, restarted)`. The
/// recovery counts as work on the lane (its gate's busy flag is held), so a mode switch that
/// closes the gate waits for it instead of having its stopped server started again behind it;
/// a closed gate starts no recovery.
fn spawn_recovery(lane: &Lane) -> tokio::task::JoinHandle<(bool, bool)> {
    let control = Arc::clone(&lane.control);
    let gate = Arc::clone(&lane.gate);
    tokio::spawn(async move {
        // Held until the end, also if the restart panics or is aborted.
        let Some(_busy) = gate.enter() else {
            return (false, false);
        };
        if control.healthy().await {
            (true, false)
        } else {
            match control.recover().await {
                Ok(()) => (true, true),
                Err(e) => {
                    tracing::warn!(error = %e, "server restart failed");
                    (false, true)
                }
            }
        }
    })
}

/// A connection refused (or not opened in time): the request never reached the server.
fn is_refusal(e: &horos_vllm_client::Error) -> bool {
    matches!(
        e,
        horos_vllm_client::Error::Connect { .. }
            | horos_vllm_client::Error::Timeout {
                phase: TimeoutPhase::Connect,
                ..
            }
    )
}

fn report_none_reached(suspects: &[(Job, bool)]) -> bool {
    !suspects.is_empty() && suspects.iter().all(|(_, reached)| !reached)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

async fn pause(stop: &mut tokio::sync::watch::Receiver<bool>, d: Duration) {
    if d.is_zero() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}
