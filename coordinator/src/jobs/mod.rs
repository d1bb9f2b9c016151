//! Asynchronous jobs: `POST /v1/jobs` enqueues a request on a squeueha queue (one per
//! kind), workers drain the queues through the gateway as a client of it (the [`Dispatch`]
//! seam: the same admission, routing and usage as a synchronous call), and the results land in a
//! table of the same SQLite file, written in the transaction that acks the job. A job claimed by
//! a process that dies reappears after its visibility timeout.

pub(crate) mod api;
mod dispatch;
mod payload;
mod worker;

pub(crate) use dispatch::{Answered, Dispatch, DispatchError, JobCall};
pub use payload::JobPayload;
pub(crate) use worker::{WorkerSettings, run_workers};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use horos_vllm_client::{ErrorClass, classify_status};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use squeueha::{AsyncQueue, Job, Lease, NewJob};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::admission::priority::queue_priority;
use crate::clock::{now_ms, secs};
use crate::data::metrics::Metrics;
use crate::data::request::{RawObject, take_meta};
use crate::data::route::Route;
use crate::error::{ApiError, CoordinatorError};
use crate::jobs::api::{JobKind, JobStatus, QUEUE_PREFIX};
use crate::tenancy::limits::Caller;

/// Largest result body stored.
const MAX_RESULT_BYTES: usize = 64 * 1024 * 1024;

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

/// Job `id`'s queue, if it is a coordinator job in `scope`: a job with no index row in
/// `coord_jobs` is not one of this gateway's jobs (a lane's job of the same database, say) and
/// is out of every scope, the admin's included (lane jobs have their own admin routes).
fn queue_in_scope(
    tx: &mut squeueha::QueueTx<'_>,
    id: i64,
    scope: &JobScope,
) -> squeueha::Result<Option<String>> {
    let Some(row) = tx.query_opt(
        "SELECT kind, owner FROM coord_jobs WHERE id = ?1",
        squeueha::params![id],
    )?
    else {
        return Ok(None);
    };
    let (kind, owner): (String, Option<String>) = (row.get(0)?, row.get(1)?);
    if let JobScope::OwnedBy(wanted) = scope
        && owner != *wanted
    {
        return Ok(None);
    }
    Ok(JobKind::parse(&kind).map(JobKind::queue))
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

    pub(crate) fn running(&self) -> MutexGuard<'_, HashMap<i64, tokio::task::AbortHandle>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn inflight(&self) -> MutexGuard<'_, HashMap<i64, Lease>> {
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
                let Some(queue) = queue_in_scope(tx, id, &scope)? else {
                    return Ok(None);
                };
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
                // One statement scoped by the job's own queue: never a bare delete by id.
                let was = if tx.cancel_in(&queue, id)? {
                    Cancelled::Queued
                } else {
                    match tx.get(id)?.filter(|i| i.queue == queue) {
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
    pub async fn save_usage(
        &self,
        book: &crate::tenancy::usage::UsageBook,
    ) -> Result<(), CoordinatorError> {
        let unsaved = book.take_unsaved();
        if unsaved.is_empty() {
            return Ok(());
        }
        let day = i64::try_from(now_ms() / 86_400_000).unwrap_or(0);
        let counts = Arc::new(unsaved);
        let c = Arc::clone(&counts);
        let r = self
            .queue
            .transaction(move |tx| crate::tenancy::usage::save(tx, day, &c))
            .await;
        if r.is_err() {
            book.unsave(Arc::try_unwrap(counts).unwrap_or_else(|a| (*a).clone()));
        }
        r.map_err(CoordinatorError::from)
    }

    /// Saves the load times `clock` measured since the last save (kept for the next try when
    /// the write fails).
    pub async fn save_load_times(
        &self,
        clock: &crate::admission::loadclock::LoadClock,
    ) -> Result<(), CoordinatorError> {
        let unsaved = clock.take_unsaved();
        if unsaved.is_empty() {
            return Ok(());
        }
        let rows = Arc::new(unsaved);
        let r = {
            let rows = Arc::clone(&rows);
            let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
            self.queue
                .transaction(move |tx| {
                    for l in rows.iter() {
                        tx.execute(
                            "INSERT INTO coord_swap_costs (model, kind, avg_s, count, updated_ms)
                             VALUES (?1, 'load', ?2, ?3, ?4)
                             ON CONFLICT (model, kind) DO UPDATE SET avg_s = excluded.avg_s,
                               count = excluded.count, updated_ms = excluded.updated_ms",
                            squeueha::params![
                                l.model.clone(),
                                l.avg_s,
                                i64::try_from(l.loads).unwrap_or(i64::MAX),
                                now
                            ],
                        )?;
                    }
                    Ok::<(), squeueha::Error>(())
                })
                .await
        };
        if r.is_err() {
            clock.unsave(&rows);
        }
        r.map_err(CoordinatorError::from)
    }

    /// The load times an earlier run measured.
    pub async fn load_times(
        &self,
    ) -> Result<Vec<crate::admission::loadclock::LearnedLoad>, CoordinatorError> {
        let rows = self
            .queue
            .query(
                "SELECT model, avg_s, count FROM coord_swap_costs WHERE kind = 'load'",
                squeueha::params![],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(crate::admission::loadclock::LearnedLoad {
                    model: r.get::<String>(0)?,
                    avg_s: r.get::<f64>(1)?,
                    loads: u64::try_from(r.get::<i64>(2)?).unwrap_or(0),
                })
            })
            .collect::<squeueha::Result<Vec<_>>>()
            .map_err(CoordinatorError::from)
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
    pub(crate) async fn stored(&self, id: i64) -> Result<Option<Value>, ApiError> {
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
            // No index row: not a coordinator job, in nobody's scope.
            if stored.is_none_or(|o| o != *owner) {
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
    pub(crate) async fn finish(
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
