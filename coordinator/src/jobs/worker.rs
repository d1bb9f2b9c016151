//! The job workers: each kind's queue drained through the gateway's [`Dispatch`] (the same
//! admission and routing as synchronous calls), a job's lease kept while it runs, its outcome
//! stored, postponed or retried.

use super::*;

/// How the workers run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerSettings {
    /// Jobs run at once (at least 1).
    pub workers: usize,
    /// A claimed job's lease, renewed while it runs.
    pub visibility: Duration,
    /// A job's budget, seconds: a run, answer included, and how long a job may wait to start.
    pub budget_s: f64,
}

/// What every worker shares.
struct Workers {
    dispatch: Arc<dyn Dispatch>,
    jobs: Jobs,
    metrics: Arc<Metrics>,
    settings: WorkerSettings,
}

/// Drains every job queue with at most `settings.workers` jobs at a time, each call through
/// `dispatch`. Dropping (aborting) this future aborts the jobs in progress; their leases expire
/// (or `release_all` gives them back).
pub(crate) async fn run_workers(
    dispatch: Arc<dyn Dispatch>,
    jobs: Jobs,
    metrics: Arc<Metrics>,
    settings: WorkerSettings,
) {
    let permits = Arc::new(Semaphore::new(settings.workers.max(1)));
    let visibility = settings.visibility;
    let w = Arc::new(Workers {
        dispatch,
        jobs,
        metrics,
        settings,
    });
    let mut set = JoinSet::new();
    for kind in JobKind::ALL {
        let (w, permits) = (Arc::clone(&w), Arc::clone(&permits));
        set.spawn(async move {
            let jobs = &w.jobs;
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
                let w2 = Arc::clone(&w);
                let id = job.id;
                // Registered before it can finish: the task removes its own entry at the end.
                let mut registry = jobs.running();
                let task = running.spawn(async move {
                    let lease = job.lease;
                    process(&w2, job, kind.as_str(), kind.route()).await;
                    let jobs = &w2.jobs;
                    if jobs.inflight().get(&id) == Some(&lease) {
                        jobs.inflight().remove(&id);
                    }
                    jobs.running().remove(&id);
                    drop(permit);
                });
                registry.insert(id, task);
                drop(registry);
            }
        });
    }
    while set.join_next().await.is_some() {}
}

async fn process(w: &Workers, job: Job, kind: &str, route: Route) {
    let (jobs, visibility, budget_s) = (&w.jobs, w.settings.visibility, w.settings.budget_s);
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
    let outcome = match run_one(w.dispatch.as_ref(), &job, route, budget_s).await {
        // Postponing costs no attempt, unless the job would then start past its budget: so a
        // job that can never start (a model larger than the GPUs, say) ends failed instead of
        // waiting for ever.
        Outcome::Later { why, delay } => {
            let waited = waited_s(&job);
            if waited + delay.as_secs_f64() > budget_s {
                Outcome::Retry {
                    why: format!(
                        "{why}; could not start within the job budget of {:.0} s ({waited:.0} s since submission, next try in {:.0} s)",
                        budget_s,
                        delay.as_secs_f64()
                    ),
                }
            } else {
                Outcome::Later { why, delay }
            }
        }
        other => other,
    };
    let m = &w.metrics;
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

#[derive(Debug)]
enum Outcome {
    /// Finished: stored and acked.
    Done { ok: bool, status: u16, body: Bytes },
    /// Not started (cold model, no room): back to the queue after `delay`, no attempt lost.
    Later { delay: Duration, why: String },
    /// Failed transiently: nack (counts an attempt; dead after the last).
    Retry { why: String },
}

async fn run_one(dispatch: &dyn Dispatch, job: &Job, route: Route, budget_s: f64) -> Outcome {
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
        Err(e) => return Outcome::refused(&e),
    };
    let body = match RawObject::from_map(&body) {
        Ok(b) => b,
        Err(e) => return Outcome::refused(&e),
    };
    // The whole job, answer included, within its budget: an upstream that stalls mid-answer
    // must not hold the job (renewed lease, admission place, model) for ever.
    let budget = secs(meta.timeout_s.unwrap_or(budget_s).max(budget_s));
    // A job runs as the caller that submitted it: its key, or, without one, its request's
    // client.
    let caller = match payload.key {
        Some(name) => Caller::Key(name),
        None => meta
            .client_id
            .clone()
            .map_or(Caller::Anonymous, Caller::Client),
    };
    let call = JobCall {
        route,
        body,
        meta,
        caller,
        received: Instant::now(),
        budget,
        max_answer_bytes: MAX_RESULT_BYTES,
    };
    let answer = match dispatch.dispatch(call).await {
        Ok(a) => a,
        Err(DispatchError::Refused(e)) => {
            return match (e.status, e.retry_after_s) {
                // No room, or over the caller's limits: back later, no attempt lost.
                (StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS, Some(s)) => {
                    Outcome::Later {
                        delay: Duration::from_secs(s),
                        why: e.message,
                    }
                }
                (s, _)
                    if classify_status(s.as_u16()) == ErrorClass::BadRequest
                        || matches!(
                            s,
                            StatusCode::NOT_FOUND
                                | StatusCode::UNAUTHORIZED
                                | StatusCode::FORBIDDEN
                        ) =>
                {
                    Outcome::refused(&e)
                }
                _ => Outcome::Retry { why: e.to_string() },
            };
        }
        Err(e) => return Outcome::Retry { why: e.to_string() },
    };
    let Answered {
        status,
        content_type,
        body,
    } = answer;
    if (200..300).contains(&status) {
        // Audio is no JSON: kept base64-encoded in the JSON result, with its content type.
        let body = match route {
            Route::Speech => Bytes::from(
                crate::data::speech::job_result(content_type.as_deref(), &body).to_string(),
            ),
            _ => body,
        };
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

impl Outcome {
    /// Failed for good with the gateway's error `e`, as a synchronous caller would have got it.
    fn refused(e: &ApiError) -> Outcome {
        Outcome::Done {
            ok: false,
            status: e.status.as_u16(),
            body: Bytes::from(e.body().to_string()),
        }
    }
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

#[cfg(test)]
mod tests {
    //! The workers against a scripted gateway: no HTTP, no upstream, only what [`Dispatch`]
    //! answers and what the job store then holds.
    #![allow(clippy::unwrap_used)]

    use std::collections::VecDeque;

    use super::*;
    use crate::jobs::JobScope;

    /// A gateway that answers from a script, one entry a call, and keeps what it was called
    /// with.
    struct Scripted {
        script: Mutex<VecDeque<Result<Answered, DispatchError>>>,
        calls: Mutex<Vec<(Route, Caller, Option<i32>)>>,
    }

    impl Scripted {
        fn new(script: Vec<Result<Answered, DispatchError>>) -> Arc<Self> {
            Arc::new(Self {
                script: Mutex::new(script.into()),
                calls: Mutex::new(Vec::new()),
            })
        }

        fn calls(&self) -> Vec<(Route, Caller, Option<i32>)> {
            self.calls.lock().unwrap().clone()
        }
    }

    #[async_trait::async_trait]
    impl Dispatch for Scripted {
        async fn dispatch(&self, call: JobCall) -> Result<Answered, DispatchError> {
            self.calls
                .lock()
                .unwrap()
                .push((call.route, call.caller, call.meta.priority));
            self.script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Err(DispatchError::Refused(ApiError::internal("script ended"))))
        }
    }

    fn ok(text: &str) -> Result<Answered, DispatchError> {
        Ok(Answered {
            status: 200,
            content_type: Some("application/json".into()),
            body: Bytes::from(json!({"answer": text}).to_string()),
        })
    }

    fn refused(status: StatusCode, retry_after_s: Option<u64>) -> Result<Answered, DispatchError> {
        let mut e = ApiError::new(status, "test_error", format!("scripted {status}"));
        e.retry_after_s = retry_after_s;
        Err(DispatchError::Refused(e))
    }

    /// A job store with `max_attempts`, one chat job of key `team` in it, and workers (budget
    /// `budget_s`) draining it through `gateway`; the job's final state.
    async fn run(
        gateway: Arc<Scripted>,
        max_attempts: u32,
        budget_s: f64,
    ) -> (Value, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Jobs::open(dir.path().join("state.db"), max_attempts, 0)
            .await
            .unwrap();
        let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let id = jobs
            .submit(JobPayload {
                kind: JobKind::Chat,
                request: request.as_object().unwrap().clone(),
                priority: Some(3),
                key: Some("team".into()),
            })
            .await
            .unwrap();
        let workers = tokio::spawn(run_workers(
            gateway,
            jobs.clone(),
            Arc::new(Metrics::new(["m".to_owned()])),
            WorkerSettings {
                workers: 2,
                visibility: Duration::from_secs(30),
                budget_s,
            },
        ));
        let deadline = Instant::now() + Duration::from_secs(20);
        let state = loop {
            let v = jobs.get(id, JobScope::All).await.unwrap().unwrap();
            if matches!(v["state"].as_str(), Some("succeeded" | "failed")) {
                break v;
            }
            assert!(Instant::now() < deadline, "the job did not end: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        workers.abort();
        (state, dir)
    }

    #[tokio::test]
    async fn a_job_runs_as_its_submitter_and_a_transient_failure_is_retried() {
        let gateway = Scripted::new(vec![refused(StatusCode::BAD_GATEWAY, None), ok("two")]);
        let (v, _dir) = run(Arc::clone(&gateway), 3, 60.0).await;
        assert_eq!(v["state"], "succeeded", "{v}");
        assert_eq!(v["result"]["answer"], "two");
        let team = Caller::Key("team".into());
        assert_eq!(
            gateway.calls(),
            vec![
                (Route::Chat, team.clone(), Some(3)),
                (Route::Chat, team, Some(3))
            ]
        );
    }

    #[tokio::test]
    async fn a_refused_request_fails_at_once_with_the_gateways_error() {
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::NOT_FOUND,
        ] {
            let gateway = Scripted::new(vec![refused(status, None), ok("never")]);
            let (v, _dir) = run(Arc::clone(&gateway), 3, 60.0).await;
            assert_eq!(v["state"], "failed", "{v}");
            assert_eq!(v["status_code"], status.as_u16(), "{v}");
            assert_eq!(v["error"]["error"]["type"], "test_error", "{v}");
            assert_eq!(gateway.calls().len(), 1, "{status}");
        }
    }

    #[tokio::test]
    async fn a_caller_over_its_limits_waits_without_losing_an_attempt() {
        // One attempt only: had the 429 cost it, the job would be dead.
        let gateway = Scripted::new(vec![
            refused(StatusCode::TOO_MANY_REQUESTS, Some(1)),
            refused(StatusCode::SERVICE_UNAVAILABLE, Some(1)),
            ok("later"),
        ]);
        let (v, _dir) = run(Arc::clone(&gateway), 1, 60.0).await;
        assert_eq!(v["state"], "succeeded", "{v}");
        assert_eq!(gateway.calls().len(), 3);
    }

    #[tokio::test]
    async fn a_caller_over_its_limits_beyond_the_budget_fails_with_the_limit_named() {
        let gateway = Scripted::new(vec![refused(StatusCode::TOO_MANY_REQUESTS, Some(5))]);
        let (v, _dir) = run(Arc::clone(&gateway), 1, 1.0).await;
        assert_eq!(v["state"], "failed", "{v}");
        let why = v["error"]["message"].as_str().unwrap();
        assert!(
            why.contains("scripted 429") && why.contains("job budget of 1 s"),
            "{v}"
        );
    }

    #[tokio::test]
    async fn an_answer_that_breaks_or_outlives_the_budget_costs_an_attempt() {
        let gateway = Scripted::new(vec![
            Err(DispatchError::OverBudget(Duration::from_secs(60))),
            Err(DispatchError::Broken("connection reset".into())),
            ok("third"),
        ]);
        let (v, _dir) = run(Arc::clone(&gateway), 3, 60.0).await;
        assert_eq!(v["state"], "succeeded", "{v}");
        let gateway = Scripted::new(vec![Err(DispatchError::Broken("reset".into()))]);
        let (v, _dir) = run(Arc::clone(&gateway), 1, 60.0).await;
        assert_eq!(v["state"], "failed", "{v}");
        assert_eq!(v["error"]["message"], "reading the answer: reset", "{v}");
    }
}
