//! Asynchronous jobs: `POST /v1/jobs` enqueues a request on a squeueha queue (one per
//! kind), workers drain the queues through the same routing as synchronous calls, and the
//! results land in a table of the same SQLite file, written in the transaction that acks the
//! job. A job claimed by a process that dies reappears after its visibility timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use horos_vllm_client::{ErrorClass, classify_status};
use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use squeueha::{AsyncQueue, Job, Lease, NewJob};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::clock::{now_ms, secs};
use crate::core::{Call, Core};
use crate::error::{ApiError, CoordinatorError};
use crate::job_api::{JobKind, JobStatus, QUEUE_PREFIX};
use crate::limits::Caller;
use crate::priority::queue_priority;
use crate::proxy::Tracker;
use crate::request::{RawObject, take_meta};
use crate::route::Route;

/// Largest result body stored.
const MAX_RESULT_BYTES: usize = 64 * 1024 * 1024;

/// What a queued job carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobPayload {
    /// Which route the request takes.
    pub kind: JobKind,
    /// The request body, as for the synchronous route.
    pub request: Map<String, Value>,
    /// Priority (smaller is more important).
    pub priority: Option<i32>,
    /// The name of the data-plane key that submitted it (`None`: a caller without a key). The
    /// job runs as that key (its allowed models, its usage) and only that key sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl JobPayload {
    /// Reads `POST /v1/jobs`' body: `{"kind": ..., "request": {...}, "priority": N}` (400 naming
    /// the field otherwise). The submitter (`key`) is the caller's, set by the server.
    pub fn from_body(body: &Map<String, Value>) -> Result<JobPayload, ApiError> {
        let name = body.get("kind").and_then(Value::as_str).ok_or_else(|| {
            ApiError::bad_request("`kind` is required (chat, embeddings or images)").param("kind")
        })?;
        let Some(kind) = JobKind::parse(name) else {
            return Err(ApiError::bad_request(format!(
                "unknown job kind `{name}` (chat, embeddings or images)"
            ))
            .param("kind"));
        };
        let request = match body.get("request") {
            Some(Value::Object(m)) => m.clone(),
            _ => {
                return Err(
                    ApiError::bad_request("`request` must be a JSON object").param("request")
                );
            }
        };
        let priority =
            match body.get("priority") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_i64().and_then(|p| i32::try_from(p).ok()).ok_or_else(
                    || ApiError::bad_request("`priority` must be an integer").param("priority"),
                )?),
            };
        // The queue's order: the job's `priority`, else its request's `x_priority`.
        let priority = priority.or_else(|| {
            request
                .get("x_priority")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
        });
        Ok(JobPayload {
            kind,
            request,
            priority,
            key: None,
        })
    }
}

/// Whose jobs a request may read or cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobScope {
    /// Every job (the admin API).
    All,
    /// The jobs submitted with this key (`None`: without a key).
    OwnedBy(Option<String>),
}

impl JobScope {
    /// The scope of `caller`'s own jobs: a key's, or those of callers without a key (client ids
    /// are labels a caller declares, not credentials, so they do not separate owners).
    pub fn of(caller: &Caller) -> JobScope {
        JobScope::OwnedBy(match caller {
            Caller::Key(name) => Some(name.clone()),
            Caller::Client(_) | Caller::Anonymous => None,
        })
    }
}

/// Whether job `id` is in `scope` (a job without an index row, submitted before owners were
/// kept, belongs to callers without a key).
fn in_scope(tx: &mut squeueha::QueueTx<'_>, id: i64, scope: &JobScope) -> squeueha::Result<bool> {
    let JobScope::OwnedBy(owner) = scope else {
        return Ok(true);
    };
    let stored: Option<Option<String>> = tx
        .query_opt(
            "SELECT owner FROM coord_jobs WHERE id = ?1",
            squeueha::params![id],
        )?
        .map(|r| r.get(0))
        .transpose()?;
    Ok(stored.flatten() == *owner)
}

/// The job store: queue + results table.
#[derive(Clone)]
pub(crate) struct Jobs {
    pub queue: AsyncQueue,
    max_attempts: u32,
    default_priority: i32,
    inflight: Arc<Mutex<HashMap<i64, Lease>>>,
    /// The tasks running this process's jobs, to abandon one that is cancelled.
    running: Arc<Mutex<HashMap<i64, tokio::task::AbortHandle>>>,
}

/// Filters of the admin's job list.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JobFilter {
    pub state: Option<JobStatus>,
    pub kind: Option<JobKind>,
    pub client: Option<String>,
    pub model: Option<String>,
    pub limit: usize,
}

/// What a cancellation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancelled {
    /// It was waiting: it will never run.
    Queued,
    /// It was running: the run is abandoned and its answer discarded.
    Running,
    /// It had already finished in this state: nothing done.
    AlreadyFinished(JobStatus),
}

/// What a cancelled job's `error` says.
const CANCELLED_BODY: &str = r#"{"message":"cancelled by an operator","type":"cancelled"}"#;

impl Jobs {
    /// Opens the queue and creates the results table (blocking work on the blocking pool).
    pub async fn open(
        path: PathBuf,
        max_attempts: u32,
        default_priority: i32,
    ) -> Result<Self, CoordinatorError> {
        let queue = AsyncQueue::open(&path, squeueha::Config::default()).await?;
        let q = queue.clone();
        tokio::task::spawn_blocking(move || {
            q.blocking().transaction(|tx| {
                crate::schema::MIGRATIONS
                    .apply_in_tx(tx)
                    .map(drop)
                    .map_err(CoordinatorError::from)
            })
        })
        .await
        .map_err(|e| CoordinatorError::Join(e.to_string()))??;
        Ok(Self {
            queue,
            max_attempts: max_attempts.max(1),
            default_priority,
            inflight: Arc::new(Mutex::new(HashMap::new())),
            running: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    fn running(&self) -> MutexGuard<'_, HashMap<i64, tokio::task::AbortHandle>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn inflight(&self) -> MutexGuard<'_, HashMap<i64, Lease>> {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enqueues a job (its submitter in `payload.key`); returns its id.
    pub async fn submit(&self, payload: JobPayload) -> Result<i64, ApiError> {
        let (kind, priority) = (payload.kind, payload.priority);
        let client = payload
            .request
            .get("x_client_id")
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
        let model = payload
            .request
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let job = NewJob::json(&payload)
            .map_err(|e| ApiError::internal(e.to_string()))?
            .priority(queue_priority(priority.unwrap_or(self.default_priority)))
            .max_attempts(self.max_attempts);
        let queue = kind.queue();
        let owner = payload.key.clone();
        // The job and its index row commit together: a listed job exists, a job is listed.
        let id = self
            .queue
            .transaction(move |tx| {
                let id = tx.enqueue(&queue, job.clone())?.id();
                tx.execute(
                    "INSERT INTO coord_jobs (id, kind, client, model, submitted_ms, owner)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    squeueha::params![
                        id,
                        kind.as_str(),
                        client.clone(),
                        model.clone(),
                        i64::try_from(now_ms()).unwrap_or(i64::MAX),
                        owner.clone()
                    ],
                )?;
                Ok::<i64, squeueha::Error>(id)
            })
            .await
            .map_err(|e| ApiError::internal(format!("job queue: {e}")))?;
        Ok(id)
    }

    /// Jobs, newest first, as the admin API lists them.
    pub async fn list(&self, f: JobFilter) -> Result<Vec<Value>, ApiError> {
        let q = self.queue.blocking().clone();
        tokio::task::spawn_blocking(move || list_blocking(&q, &f))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("job store: {e}")))
    }

    /// Cancels a job: a queued one never runs; a running one is abandoned (here, or wherever it
    /// runs: its answer is not stored) and given back to the queue as done.
    /// A job outside `scope` is as absent as one that never was (`None`).
    pub async fn cancel(&self, id: i64, scope: JobScope) -> Result<Option<Cancelled>, ApiError> {
        let r = self
            .queue
            .transaction(move |tx| {
                if !in_scope(tx, id, &scope)? {
                    return Ok(None);
                }
                let finished: Option<String> = tx
                    .query_opt(
                        "SELECT state FROM coord_job_results WHERE id = ?1",
                        squeueha::params![id],
                    )?
                    .map(|r| r.get(0))
                    .transpose()?;
                if let Some(state) = finished {
                    let state = JobStatus::parse(&state).unwrap_or(JobStatus::Failed);
                    return Ok(Some(Cancelled::AlreadyFinished(state)));
                }
                let was = if tx.cancel(id)? {
                    Cancelled::Queued
                } else {
                    match tx.get(id)?.filter(|i| i.queue.starts_with(QUEUE_PREFIX)) {
                        None => return Ok(None),
                        Some(i) if i.state == squeueha::JobState::InFlight => Cancelled::Running,
                        Some(i) => {
                            return Ok(Some(Cancelled::AlreadyFinished(JobStatus::from(i.state))));
                        }
                    }
                };
                let kind: String = tx
                    .query_opt(
                        "SELECT kind FROM coord_jobs WHERE id = ?1",
                        squeueha::params![id],
                    )?
                    .map(|r| r.get(0))
                    .transpose()?
                    .unwrap_or_default();
                tx.execute(
                    "INSERT INTO coord_job_results (id, kind, state, status, body, finished_ms)
                     VALUES (?1, ?2, ?3, 409, ?4, ?5)",
                    squeueha::params![
                        id,
                        kind,
                        JobStatus::Cancelled.as_str(),
                        CANCELLED_BODY.as_bytes(),
                        i64::try_from(now_ms()).unwrap_or(i64::MAX)
                    ],
                )?;
                Ok::<_, squeueha::Error>(Some(was))
            })
            .await
            .map_err(|e| ApiError::internal(format!("job queue: {e}")))?;
        if r == Some(Cancelled::Running) {
            // Here: stop the run and hand the job back as done. Elsewhere: that worker finds
            // the cancellation when it finishes and stores nothing.
            if let Some(task) = self.running().remove(&id) {
                task.abort();
            }
            let lease = self.inflight().remove(&id);
            if let Some(lease) = lease
                && let Err(e) = self.queue.ack(lease).await
            {
                tracing::warn!(job = id, error = %e, "cancelled job not acked");
            }
        }
        Ok(r)
    }

    /// Adds the usage counted since the last save to the state file (given back to the book
    /// when the write fails, so nothing is lost).
    pub async fn save_usage(&self, book: &crate::usage::UsageBook) -> Result<(), CoordinatorError> {
        let unsaved = book.take_unsaved();
        if unsaved.is_empty() {
            return Ok(());
        }
        let day = i64::try_from(now_ms() / 86_400_000).unwrap_or(0);
        let counts = Arc::new(unsaved);
        let c = Arc::clone(&counts);
        let r = self
            .queue
            .transaction(move |tx| crate::usage::save(tx, day, &c))
            .await;
        if r.is_err() {
            book.unsave(Arc::try_unwrap(counts).unwrap_or_else(|a| (*a).clone()));
        }
        r.map_err(CoordinatorError::from)
    }

    /// The saved usage, newest day first (at most 10,000 rows).
    pub async fn usage_by_day(&self) -> Result<Vec<Value>, ApiError> {
        let rows = self
            .queue
            .query(
                "SELECT day, caller, model, requests, prompt_tokens, completion_tokens
                 FROM coord_usage ORDER BY day DESC, caller, model LIMIT 10000",
                squeueha::params![],
            )
            .await
            .map_err(|e| ApiError::internal(format!("usage: {e}")))?;
        rows.iter()
            .map(|r| {
                Ok(json!({
                    "day_since_epoch": r.get::<i64>(0)?,
                    "caller": r.get::<String>(1)?,
                    "model": r.get::<String>(2)?,
                    "requests": r.get::<i64>(3)?,
                    "prompt_tokens": r.get::<i64>(4)?,
                    "completion_tokens": r.get::<i64>(5)?,
                }))
            })
            .collect::<squeueha::Result<Vec<_>>>()
            .map_err(|e| ApiError::internal(format!("usage: {e}")))
    }

    /// Deletes the results (and index rows) of jobs finished before `now - keep`.
    pub async fn purge(&self, keep: Duration) -> Result<usize, CoordinatorError> {
        let cutoff = i64::try_from(
            now_ms().saturating_sub(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX)),
        )
        .unwrap_or(i64::MAX);
        self.queue
            .transaction(move |tx| {
                tx.execute(
                    "DELETE FROM coord_jobs WHERE id IN
                     (SELECT id FROM coord_job_results WHERE finished_ms < ?1)",
                    squeueha::params![cutoff],
                )?;
                let n = tx.execute(
                    "DELETE FROM coord_job_results WHERE finished_ms < ?1",
                    squeueha::params![cutoff],
                )?;
                Ok::<usize, squeueha::Error>(usize::try_from(n).unwrap_or(usize::MAX))
            })
            .await
            .map_err(CoordinatorError::from)
    }

    /// The stored outcome of a finished job.
    async fn stored(&self, id: i64) -> Result<Option<Value>, ApiError> {
        // Through the queue's pooled readers: no connection opened per request.
        let stored = self
            .queue
            .query_opt(
                "SELECT kind, state, status, body, finished_ms FROM coord_job_results WHERE id = ?1",
                squeueha::params![id],
            )
            .await
            .and_then(|row| {
                row.map(|r| {
                    Ok((
                        r.get::<String>(0)?,
                        r.get::<String>(1)?,
                        r.get::<i64>(2)?,
                        r.get::<Vec<u8>>(3)?,
                        r.get::<i64>(4)?,
                    ))
                })
                .transpose()
            })
            .map_err(|e| ApiError::internal(format!("job store: {e}")))?;
        if let Some((kind, state, status, body, finished)) = stored {
            let parsed: Value = serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
            let mut v = json!({
                "id": id, "object": "job", "kind": kind, "state": state,
                "status_code": status, "finished_ms": finished,
            });
            v[if JobStatus::parse(&state) == Some(JobStatus::Succeeded) {
                "result"
            } else {
                "error"
            }] = parsed;
            return Ok(Some(v));
        }
        Ok(None)
    }

    /// The job's state and result (`None`: no such job, or one outside `scope`).
    pub async fn get(&self, id: i64, scope: JobScope) -> Result<Option<Value>, ApiError> {
        if let JobScope::OwnedBy(owner) = &scope {
            let stored = self
                .queue
                .query_opt(
                    "SELECT owner FROM coord_jobs WHERE id = ?1",
                    squeueha::params![id],
                )
                .await
                .and_then(|row| row.map(|r| r.get::<Option<String>>(0)).transpose())
                .map_err(|e| ApiError::internal(format!("job store: {e}")))?;
            if stored.flatten() != *owner {
                return Ok(None);
            }
        }
        if let Some(v) = self.stored(id).await? {
            return Ok(Some(v));
        }
        let info = self
            .queue
            .get(id)
            .await
            .map_err(|e| ApiError::internal(format!("job queue: {e}")))?;
        let Some(info) = info.filter(|i| i.queue.starts_with(QUEUE_PREFIX)) else {
            // Finished between the two reads (the result and the ack commit together).
            return self.stored(id).await;
        };
        let kind = info.queue.trim_start_matches(QUEUE_PREFIX).to_owned();
        let state = JobStatus::from(info.state);
        let mut v = json!({
            "id": id, "object": "job", "kind": kind, "state": state,
            "attempts": info.attempts, "max_attempts": info.max_attempts,
        });
        if let Some(e) = info.last_error {
            v["error"] = json!({ "message": e });
        }
        Ok(Some(v))
    }

    /// Stores a job's outcome and acks it, in one transaction (a stale lease — another
    /// worker took the job over — stores nothing).
    async fn finish(
        &self,
        lease: Lease,
        kind: &str,
        ok: bool,
        status: u16,
        body: Bytes,
    ) -> Result<(), CoordinatorError> {
        let q = self.queue.clone();
        let kind = kind.to_owned();
        tokio::task::spawn_blocking(move || {
            q.blocking().transaction(|tx| {
                tx.execute(
                    // A cancellation stored first wins: this answer is discarded.
                    "INSERT INTO coord_job_results (id, kind, state, status, body, finished_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                    squeueha::params![
                        lease.job_id,
                        &kind,
                        if ok {
                            JobStatus::Succeeded
                        } else {
                            JobStatus::Failed
                        }
                        .as_str(),
                        i64::from(status),
                        body.as_ref(),
                        i64::try_from(now_ms()).unwrap_or(i64::MAX),
                    ],
                )?;
                tx.ack(lease)?;
                Ok::<(), CoordinatorError>(())
            })
        })
        .await
        .map_err(|e| CoordinatorError::Join(e.to_string()))?
    }

    /// Gives back the jobs this process holds (at shutdown): visible again at once.
    pub async fn release_all(&self) {
        let leases: Vec<Lease> = self.inflight().drain().map(|(_, l)| l).collect();
        for l in leases {
            let _ = self.queue.release(l, Duration::ZERO).await;
        }
    }
}

/// Drains every job queue with at most `workers` jobs at a time. Dropping (aborting) this
/// future aborts the jobs in progress; their leases expire (or `release_all` gives them
/// back).
pub(crate) async fn run_workers(core: Arc<Core>, jobs: Jobs, workers: usize, visibility: Duration) {
    let permits = Arc::new(Semaphore::new(workers.max(1)));
    let mut set = JoinSet::new();
    for kind in JobKind::ALL {
        let (core, jobs, permits) = (Arc::clone(&core), jobs.clone(), Arc::clone(&permits));
        set.spawn(async move {
            let mut running = JoinSet::new();
            let queue = kind.queue();
            let mut work = jobs.queue.watch(&queue);
            loop {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                while running.try_join_next().is_some() {}
                work.mark_seen();
                let job = match jobs.queue.poll_batch(&queue, 1, visibility).await {
                    Ok(mut v) if !v.is_empty() => v.remove(0),
                    Ok(_) => {
                        // Wait for work with no place held: an idle kind must not keep the
                        // places of a busy one.
                        drop(permit);
                        if let Err(e) = work.wait(Duration::from_secs(1)).await {
                            tracing::warn!(queue, error = %e, "job queue watch failed");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        continue;
                    }
                    Err(e) => {
                        drop(permit);
                        tracing::warn!(queue, error = %e, "job queue poll failed");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                jobs.inflight().insert(job.id, job.lease);
                let (core, jobs2) = (Arc::clone(&core), jobs.clone());
                let id = job.id;
                // Registered before it can finish: the task removes its own entry at the end.
                let mut registry = jobs.running();
                let task = running.spawn(async move {
                    let lease = job.lease;
                    process(&core, &jobs2, job, kind.as_str(), kind.route(), visibility).await;
                    if jobs2.inflight().get(&id) == Some(&lease) {
                        jobs2.inflight().remove(&id);
                    }
                    jobs2.running().remove(&id);
                    drop(permit);
                });
                registry.insert(id, task);
                drop(registry);
            }
        });
    }
    while set.join_next().await.is_some() {}
}

async fn process(
    core: &Arc<Core>,
    jobs: &Jobs,
    job: Job,
    kind: &str,
    route: Route,
    visibility: Duration,
) {
    let lease = job.lease;
    // Cancelled while it was claimed elsewhere (or a run that was abandoned): nothing to do.
    match jobs.stored(job.id).await {
        Ok(Some(_)) => {
            if let Err(e) = jobs.queue.ack(lease).await {
                tracing::warn!(job = job.id, error = %e, "finished job not acked");
            }
            return;
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(job = job.id, error = %e.message, "job store not read"),
    }
    // Heartbeat: keep the lease while the call runs (a load may take minutes).
    let q = jobs.queue.clone();
    let _beat = AbortOnDrop(tokio::spawn(async move {
        let every = (visibility / 3).max(Duration::from_millis(200));
        loop {
            tokio::time::sleep(every).await;
            match q.extend(lease, visibility).await {
                Ok(_) => {}
                // Claimed again: this run's answer will not be stored (its ack fails).
                Err(squeueha::Error::StaleLease { .. }) => return,
                // A busy or failing database: try again at the next beat rather than let the
                // lease lapse and the job run twice.
                Err(e) => {
                    tracing::warn!(job = lease.job_id, error = %e, "job lease renewal failed")
                }
            }
        }
    }));
    let outcome = match run_one(core, &job, route).await {
        // Postponing costs no attempt, unless the job would then start past its budget: so a
        // job that can never start (a model larger than the GPUs, say) ends failed instead of
        // waiting for ever.
        Outcome::Later { why, delay } => {
            let waited = waited_s(&job);
            if waited + delay.as_secs_f64() > core.cfg.job_budget_s {
                Outcome::Retry {
                    why: format!(
                        "{why}; could not start within the job budget of {:.0} s ({waited:.0} s since submission, next try in {:.0} s)",
                        core.cfg.job_budget_s,
                        delay.as_secs_f64()
                    ),
                }
            } else {
                Outcome::Later { why, delay }
            }
        }
        other => other,
    };
    let m = &core.metrics;
    let result = match outcome {
        Outcome::Done { ok, status, body } => {
            let counter = if ok {
                &m.jobs_succeeded
            } else {
                &m.jobs_failed
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            jobs.finish(lease, kind, ok, status, body).await
        }
        Outcome::Later { delay, why } => {
            tracing::info!(job = job.id, why, "job postponed");
            jobs.queue
                .release(lease, delay)
                .await
                .map_err(CoordinatorError::from)
        }
        Outcome::Retry { why } => {
            if job.is_last_attempt() {
                m.jobs_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            tracing::warn!(
                job = job.id,
                attempt = job.attempts,
                why,
                "job failed, retrying"
            );
            jobs.queue
                .nack(lease, &why, None)
                .await
                .map(|_| ())
                .map_err(CoordinatorError::from)
        }
    };
    if let Err(e) = result {
        tracing::warn!(job = job.id, error = %e, "job outcome not recorded");
    }
}

enum Outcome {
    /// Finished: stored and acked.
    Done { ok: bool, status: u16, body: Bytes },
    /// Not started (cold model, no room): back to the queue after `delay`, no attempt lost.
    Later { delay: Duration, why: String },
    /// Failed transiently: nack (counts an attempt; dead after the last).
    Retry { why: String },
}

async fn run_one(core: &Arc<Core>, job: &Job, route: Route) -> Outcome {
    let payload: JobPayload = match job.json() {
        Ok(p) => p,
        Err(e) => {
            let body = ApiError::bad_request(format!("undecodable job: {e}")).body();
            return Outcome::Done {
                ok: false,
                status: 400,
                body: Bytes::from(body.to_string()),
            };
        }
    };
    let mut body = payload.request;
    let meta = match take_meta(&mut body) {
        Ok(mut m) => {
            if payload.priority.is_some() {
                m.priority = payload.priority;
            }
            m
        }
        Err(e) => {
            return Outcome::Done {
                ok: false,
                status: e.status.as_u16(),
                body: Bytes::from(e.body().to_string()),
            };
        }
    };
    let body = match RawObject::from_map(&body) {
        Ok(b) => b,
        Err(e) => {
            return Outcome::Done {
                ok: false,
                status: e.status.as_u16(),
                body: Bytes::from(e.body().to_string()),
            };
        }
    };
    let received = Instant::now();
    // The whole job, answer included, within its budget: an upstream that stalls mid-answer
    // must not hold the job (renewed lease, admission place, model) for ever.
    let budget = secs(
        meta.timeout_s
            .unwrap_or(core.cfg.job_budget_s)
            .max(core.cfg.job_budget_s),
    );
    // A job runs as the caller that submitted it: its key (still configured: a key removed
    // since stops its jobs), or, without one, its request's client.
    let caller = match payload.key {
        Some(name) => Caller::Key(name),
        None => meta
            .client_id
            .clone()
            .map_or(Caller::Anonymous, Caller::Client),
    };
    if !core.gate.still_admits(&caller) {
        let e = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            format!(
                "{} submitted this job and is no longer let in (its key was removed)",
                caller.label()
            ),
        )
        .code("invalid_api_key");
        return Outcome::Done {
            ok: false,
            status: e.status.as_u16(),
            body: Bytes::from(e.body().to_string()),
        };
    }
    let mut tracker = Tracker::new(Arc::clone(&core.metrics), Route::Job, received);
    tracker.caller = Some((caller.clone(), Arc::clone(&core.gate)));
    let call = Call {
        route,
        body,
        meta,
        received,
        default_budget_s: core.cfg.job_budget_s,
        caller,
    };
    let resp = match core.dispatch(call, &mut tracker).await {
        Ok(r) => r,
        Err(e) => {
            tracker.status = e.status.as_u16();
            return match (e.status, e.retry_after_s) {
                (StatusCode::SERVICE_UNAVAILABLE, Some(s)) => Outcome::Later {
                    delay: Duration::from_secs(s),
                    why: e.message,
                },
                (s, _)
                    if classify_status(s.as_u16()) == ErrorClass::BadRequest
                        || matches!(
                            s,
                            StatusCode::NOT_FOUND
                                | StatusCode::UNAUTHORIZED
                                | StatusCode::FORBIDDEN
                        ) =>
                {
                    Outcome::Done {
                        ok: false,
                        status: s.as_u16(),
                        body: Bytes::from(e.body().to_string()),
                    }
                }
                _ => Outcome::Retry { why: e.to_string() },
            };
        }
    };
    let status = resp.status().as_u16();
    tracker.status = status;
    let answer = Limited::new(resp.into_body(), MAX_RESULT_BYTES).collect();
    let body = match tokio::time::timeout_at((received + budget).into(), answer).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            return Outcome::Retry {
                why: format!("reading the answer: {e}"),
            };
        }
        Err(_) => {
            return Outcome::Retry {
                why: format!(
                    "the answer did not end within the job's {:.0} s budget",
                    budget.as_secs_f64()
                ),
            };
        }
    };
    tracker.tail.push(&body);
    drop(tracker);
    if (200..300).contains(&status) {
        return Outcome::Done {
            ok: true,
            status,
            body,
        };
    }
    match classify_status(status) {
        ErrorClass::Retryable | ErrorClass::ServerCrashed => Outcome::Retry {
            why: format!(
                "upstream {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            ),
        },
        _ => Outcome::Done {
            ok: false,
            status,
            body,
        },
    }
}

/// The admin's job list, on a blocking thread: the index and results in one read, the live
/// state of unfinished jobs from the queue.
fn list_blocking(q: &squeueha::Queue, f: &JobFilter) -> squeueha::Result<Vec<Value>> {
    let finished_filter = f.state.filter(|s| {
        matches!(
            s,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    });
    let unfinished_only = matches!(f.state, Some(JobStatus::Queued | JobStatus::Running));
    let limit = i64::try_from(f.limit.clamp(1, 10_000)).unwrap_or(100);
    let (client, model, kind) = (
        f.client.clone(),
        f.model.clone(),
        f.kind.map(JobKind::as_str),
    );
    let rows = q
        .query(
            // The casts type the parameters for PostgreSQL, which cannot infer them from IS NULL.
            "SELECT j.id, j.kind, j.client, j.model, j.submitted_ms, r.state, r.status, r.finished_ms,
                    j.owner
             FROM coord_jobs j LEFT JOIN coord_job_results r ON r.id = j.id
             WHERE (CAST(?1 AS TEXT) IS NULL OR j.client = ?1)
               AND (CAST(?2 AS TEXT) IS NULL OR j.model = ?2)
               AND (CAST(?3 AS TEXT) IS NULL OR j.kind = ?3)
               AND (CAST(?4 AS TEXT) IS NULL OR r.state = ?4) AND (?5 = 0 OR r.state IS NULL)
             ORDER BY j.id DESC LIMIT ?6",
            squeueha::params![
                client,
                model,
                kind,
                finished_filter.map(JobStatus::as_str),
                i64::from(unfinished_only),
                limit
            ],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.get::<i64>(0)?,
                r.get::<String>(1)?,
                r.get::<Option<String>>(2)?,
                r.get::<Option<String>>(3)?,
                r.get::<i64>(4)?,
                r.get::<Option<String>>(5)?,
                r.get::<Option<i64>>(6)?,
                r.get::<Option<i64>>(7)?,
                r.get::<Option<String>>(8)?,
            ))
        })
        .collect::<squeueha::Result<Vec<_>>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (id, kind, client, model, submitted, state, status, finished, owner) in rows {
        let mut v = json!({
            "id": id, "object": "job", "kind": kind, "client": client, "model": model,
            "key": owner, "submitted_ms": submitted,
        });
        match state {
            Some(state) => {
                v["state"] = json!(state);
                v["status_code"] = json!(status);
                v["finished_ms"] = json!(finished);
            }
            None => {
                let Some(info) = q.get(id)? else { continue };
                let state = JobStatus::from(info.state);
                if f.state.is_some_and(|s| s != state) {
                    continue;
                }
                v["state"] = json!(state);
                v["attempts"] = json!(info.attempts);
                if let Some(e) = info.last_error {
                    v["error"] = json!({ "message": e });
                }
            }
        }
        out.push(v);
    }
    Ok(out)
}

/// Seconds since the job was submitted.
fn waited_s(job: &Job) -> f64 {
    now_ms().saturating_sub(u64::try_from(job.enqueued_at).unwrap_or(0)) as f64 / 1000.0
}

/// Aborts a task when dropped (a heartbeat must not outlive its job, even when the job's own
/// task is aborted).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
