//! The data plane: resolve the model (task ladder), check the cold-load budget, wait for
//! admission, acquire the model (loading it), forward.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use horos_server_control::SlotState;
use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use tokio::sync::mpsc;

use crate::clock::{now_ms, secs};
use crate::config::CoordinatorConfig;
use crate::config::TaskSpec;
use crate::decision::{Decision, DecisionAction};
use crate::error::ApiError;
use crate::limits::{Caller, Gatekeeper};
use crate::loadclock::LoadClock;
use crate::manifest::Manifest;
use crate::metrics::AttemptFailure;
use crate::metrics::Metrics;
use crate::profiles::{self, ClientProfile, Profiles};
use crate::proxy::{self, HttpClient, Tracker, UpstreamBody};
use crate::request::{RawObject, RequestMeta};
use crate::room::RoomQueue;
use crate::route::Route;
use crate::scheduler::Scheduler;
use crate::settings::Settings;
use crate::tasks;
use crate::upstream::{Readiness, UpstreamError, UpstreamLease, UpstreamPool};

/// Shared state of a coordinator.
pub(crate) struct Core {
    pub cfg: CoordinatorConfig,
    pub upstream: Arc<dyn UpstreamPool>,
    pub sched: Arc<Scheduler>,
    pub loads: Arc<LoadClock>,
    pub metrics: Arc<Metrics>,
    pub settings: Arc<Settings>,
    pub client: HttpClient,
    pub decisions: mpsc::Sender<Decision>,
    /// Requests waiting for GPU room; told when a lease leaves its model idle, a model is
    /// unloaded, or a load ends.
    pub room: Arc<RoomQueue>,
    pub next_request: AtomicU64,
    /// Names of the remote models (cloud models for the fallback guard).
    pub remotes: BTreeSet<String>,
    /// Keys and callers' limits.
    pub gate: Arc<Gatekeeper>,
    /// What the coordinator does per model (templates, thinking mode).
    pub manifest: Manifest,
    /// Callers' defaults (aliases, priority, allowed models), changed at run time.
    pub profiles: Arc<Profiles>,
}

/// Tells the waiters for GPU room that a lease ended, when its model has no other request.
struct LeaseEnd {
    room: Arc<RoomQueue>,
    upstream: Arc<dyn UpstreamPool>,
    model: String,
    armed: bool,
}

impl Drop for LeaseEnd {
    fn drop(&mut self) {
        if self.armed && self.upstream.active(&self.model).is_none_or(|n| n == 0) {
            self.room.freed();
        }
    }
}

/// Where a call's parameters come from.
pub(crate) struct Call {
    pub route: Route,
    pub body: RawObject,
    pub meta: RequestMeta,
    pub received: Instant,
    /// Budget when neither the request nor its task sets one, seconds.
    pub default_budget_s: f64,
    /// Who calls (its allowed models bound the ladder).
    pub caller: Caller,
}

/// The models a request may try, best first.
struct Ladder {
    models: Vec<String>,
    /// A task's pick and why (a decision for the status page).
    picked: Option<(String, String)>,
}

/// What every attempt of one request shares.
struct Attempt<'a> {
    id: u64,
    meta: &'a RequestMeta,
    route: Route,
    priority: i32,
    deadline: Instant,
    budget: f64,
}

/// What a failed attempt has to say to the client, if it is the last.
enum Answer {
    /// The coordinator's own error.
    Error(ApiError),
    /// The upstream's error answer, passed through as it is.
    Upstream(Response<Incoming>),
}

impl Answer {
    fn into_result(self) -> Result<Response<UpstreamBody>, ApiError> {
        match self {
            Answer::Error(e) => Err(e),
            Answer::Upstream(r) => {
                let (parts, body) = r.into_parts();
                Ok(Response::from_parts(parts, UpstreamBody::new(None, body)))
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Answer::Error(e) => e.message.clone(),
            Answer::Upstream(r) => format!("upstream answered {}", r.status()),
        }
    }
}

/// Where a failed attempt leaves the request.
enum FailureKind {
    /// Nothing else to try (bad request, budget spent).
    Final,
    /// This model cannot serve it now (cold beyond the budget, load failed): another rung may.
    NotHere,
    /// The upstream failed before the first byte: another rung, or this model again.
    Upstream {
        reason: AttemptFailure,
        retry_after: Option<Duration>,
    },
}

struct Failure {
    kind: FailureKind,
    answer: Answer,
}

impl Failure {
    fn upstream(reason: AttemptFailure, retry_after: Option<Duration>, answer: Answer) -> Self {
        Self {
            kind: FailureKind::Upstream {
                reason,
                retry_after,
            },
            answer,
        }
    }
}

/// An upstream's `Retry-After` in seconds (the HTTP-date form is not used by inference servers
/// and is ignored), capped at an hour.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let v = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    let s: f64 = v.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(3600.0)))
}

fn secs_up(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Core {
    /// How long a request's body may take to arrive (`body_read_timeout_s`).
    pub fn body_timeout(&self) -> std::time::Duration {
        crate::clock::secs(self.cfg.body_read_timeout_s)
    }

    pub fn decide(
        &self,
        request: u64,
        meta: &RequestMeta,
        model: &str,
        action: DecisionAction,
        reason: String,
    ) {
        tracing::info!(request, client = meta.client_id.as_deref(), model, action = action.as_str(), %reason, "decision");
        // Never waits: a full channel drops the entry (the status page is best effort).
        let _ = self.decisions.try_send(Decision {
            at_ms: now_ms(),
            request,
            client: meta.client_id.clone(),
            model: model.to_owned(),
            action,
            reason,
        });
    }

    /// Runs a call up to the upstream's first byte; the tracker receives the concurrency
    /// place, the model lease and the keep-alive of the attempt that answers.
    ///
    /// A task's request walks its ladder: after a refused connection, a 5xx or 429 answer, or
    /// no first byte in time, it moves to the next rung, or retries the last one after a
    /// back-off (or the upstream's `Retry-After`), while `max_attempts` and its budget last.
    pub async fn dispatch(
        self: &Arc<Self>,
        call: Call,
        tracker: &mut Tracker,
    ) -> Result<Response<UpstreamBody>, ApiError> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let Call {
            route,
            mut body,
            mut meta,
            received,
            default_budget_s,
            caller,
        } = call;

        // 0. The caller's profile: its aliases and defaults.
        let profile = self.profiles.of(&caller);
        if let Some(p) = &profile {
            profiles::apply(p, &mut meta, &mut body)?;
        }

        // 1. The models to try: a task's ladder from its pick, or the body's `model`; a model
        //    whose server does not serve the route is refused (or skipped) before any load.
        let (ladder, task) = self.ladder(route, &meta, &body, &caller, profile.as_deref())?;
        if let Some((model, reason)) = &ladder.picked {
            self.decide(id, &meta, model, DecisionAction::Task, reason.clone());
        }
        let ladder = ladder.models;
        // A request its models' manifests cannot carry (tools through a text template, ...)
        // is refused now, before it waits for a place or a load.
        for m in ladder.iter().filter(|m| self.manifest.plan(m).is_some()) {
            self.manifest.shape(route, m, &body, &meta, id)?;
        }
        let priority = meta
            .priority
            .or(task.and_then(|t| t.priority))
            .unwrap_or(self.cfg.default_priority);
        let budget = meta
            .timeout_s
            .or(task.and_then(|t| t.budget_s))
            .unwrap_or(default_budget_s);
        let deadline = received + secs(budget);
        let keep_alive = meta.keep_alive.or_else(|| {
            task.and_then(|t| t.keep_alive_s)
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(secs)
        });
        let attempt = Attempt {
            id,
            meta: &meta,
            route,
            priority,
            deadline,
            budget,
        };

        let mut rung = 0;
        let mut backoff = secs(self.cfg.retry_backoff_s);
        for attempts in 1.. {
            let Some(model) = ladder.get(rung) else {
                return Err(ApiError::internal("empty ladder"));
            };
            tracker.model.clone_from(model);
            tracker.permit = None;
            tracker.lease = None;
            let failure = match self.attempt(&attempt, model, &mut body, tracker).await {
                Ok(resp) => {
                    tracker.keep_alive = keep_alive.map(|d| (Arc::clone(&self.upstream), d));
                    return Ok(resp);
                }
                Err(f) => f,
            };
            let more = attempts < self.cfg.max_attempts;
            let next = ladder.get(rung + 1).filter(|_| more);
            let (reason, retry_after) = match &failure.kind {
                FailureKind::Final => return failure.answer.into_result(),
                FailureKind::NotHere => match next {
                    Some(next) => {
                        self.fall_back(&attempt, model, next, failure.answer.describe());
                        rung += 1;
                        continue;
                    }
                    None => return failure.answer.into_result(),
                },
                FailureKind::Upstream {
                    reason,
                    retry_after,
                } => (*reason, *retry_after),
            };
            let m = self.metrics.model(model);
            if let Some(c) = m.attempt_failures.get(reason.index()) {
                c.fetch_add(1, Ordering::Relaxed);
            }
            let why = failure.answer.describe();
            if let Some(next) = next {
                self.fall_back(&attempt, model, next, why);
                rung += 1;
                continue;
            }
            let wait = backoff.max(retry_after.unwrap_or_default());
            if !more || Instant::now() + wait >= deadline {
                return failure.answer.into_result();
            }
            drop(failure);
            tracker.permit = None;
            tracker.lease = None;
            m.retries.fetch_add(1, Ordering::Relaxed);
            self.decide(
                id,
                &meta,
                model,
                DecisionAction::Retry,
                format!(
                    "attempt {attempts} failed ({why}); retrying in {:.2} s",
                    wait.as_secs_f64()
                ),
            );
            tokio::time::sleep(wait).await;
            backoff = backoff.saturating_mul(2);
        }
        Err(ApiError::internal("attempts exhausted"))
    }

    /// Whether `caller` may make this call now, as [`Core::dispatch`] would decide before it
    /// takes a place or loads a model: its profile applied, the model (or a model of its task)
    /// known, allowed to the caller and serving the route. An async job is checked so when it is
    /// submitted, and again when it runs.
    pub fn check_call(
        &self,
        route: Route,
        body: &RawObject,
        meta: &RequestMeta,
        caller: &Caller,
    ) -> Result<(), ApiError> {
        let profile = self.profiles.of(caller);
        let (mut body, mut meta) = (body.clone(), meta.clone());
        if let Some(p) = &profile {
            profiles::apply(p, &mut meta, &mut body)?;
        }
        self.ladder(route, &meta, &body, caller, profile.as_deref())
            .map(drop)
    }

    /// The models a request on `route` may try, best first, and its task. A rung whose server
    /// does not serve the route is left out.
    fn ladder<'a>(
        &'a self,
        route: Route,
        meta: &RequestMeta,
        body: &RawObject,
        caller: &Caller,
        profile: Option<&ClientProfile>,
    ) -> Result<(Ladder, Option<&'a TaskSpec>), ApiError> {
        let allows = |m: &str| self.gate.allows(caller, m) && profile.is_none_or(|p| p.allows(m));
        let refused = |what: &str| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                format!("{} may not call {what}", caller.label()),
            )
            .param("model")
            .code("model_not_allowed")
        };
        let model_field = body.get_str("model");
        let task_name = meta.task.clone().or_else(|| {
            model_field
                .as_deref()
                .and_then(|m| m.strip_prefix("task:"))
                .map(str::to_owned)
        });
        let Some(name) = task_name else {
            let model = model_field
                .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?;
            if self.upstream.readiness(&model) == Readiness::Unknown {
                return Err(ApiError::model_not_found(&model));
            }
            if !allows(&model) {
                return Err(refused(&format!("`{model}`")));
            }
            self.serves(route, &model)?;
            return Ok((
                Ladder {
                    models: vec![model],
                    picked: None,
                },
                None,
            ));
        };
        let task = self.cfg.tasks.get(&name).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the task `{name}` does not exist"),
            )
            .param("x_task")
            .code("task_not_found")
        })?;
        let allow_cloud = self.settings.allow_cloud_fallback();
        let is_cloud = |m: &str| self.is_cloud(m);
        let up = &self.upstream;
        // A rung the caller may not call, or that does not serve the route, is as good as
        // unknown to it.
        let readiness = |m: &str| {
            if allows(m) && self.serves_route(route, m) {
                up.readiness(m)
            } else {
                Readiness::Unknown
            }
        };
        if task.models.iter().all(|m| !allows(m)) {
            return Err(refused(&format!("any model of the task `{name}`")));
        }
        let r = tasks::resolve(&name, task, allow_cloud, is_cloud, readiness)
            .ok_or_else(|| ApiError::bad_request(format!("the task `{name}` has no model")))?;
        let picked = (r.model.clone(), r.reason);
        let mut ladder = vec![r.model];
        if !task.pin_primary {
            // The rest of the ladder in its order, models this process does not serve left out.
            for m in tasks::candidates(task, allow_cloud, is_cloud) {
                if !ladder.iter().any(|l| l == m) && readiness(m) != Readiness::Unknown {
                    ladder.push(m.to_owned());
                }
            }
        }
        if ladder.iter().all(|m| readiness(m) == Readiness::Unknown) {
            if !allows(&ladder[0]) {
                return Err(refused(&format!("`{}`", ladder[0])));
            }
            self.serves(route, &ladder[0])?;
            return Err(ApiError::model_not_found(&ladder[0]));
        }
        Ok((
            Ladder {
                models: ladder,
                picked: Some(picked),
            },
            Some(task),
        ))
    }

    /// Refuses a request on `route` that `model`'s server would not serve: the path it would be
    /// sent to (after the model's manifest) is not one its upstream declares for it.
    fn serves(&self, route: Route, model: &str) -> Result<(), ApiError> {
        if self.serves_route(route, model) {
            return Ok(());
        }
        let path = self.manifest.upstream_path(route, model);
        let paths = self.upstream.paths(model).unwrap_or_default();
        let serves = match paths.is_empty() {
            true => "no request path".to_owned(),
            false => paths.join(", "),
        };
        Err(ApiError::bad_request(format!(
            "the model `{model}` does not serve {path}: it serves {serves}"
        ))
        .param("model")
        .code("unsupported_endpoint")
        .extra(json!({"model": model, "serves": paths})))
    }

    /// Whether `model`'s server serves the path a request on `route` goes to (or declares none).
    fn serves_route(&self, route: Route, model: &str) -> bool {
        let path = self.manifest.upstream_path(route, model);
        self.upstream.serves_path(model, path).unwrap_or(true)
    }

    /// Whether `model` is a cloud model for the fallback guard: a remote model, or a name with
    /// one of `cloud_prefixes`.
    pub fn is_cloud(&self, model: &str) -> bool {
        self.remotes.contains(model)
            || self
                .cfg
                .cloud_prefixes
                .iter()
                .any(|p| model.starts_with(p.as_str()))
    }

    fn fall_back(&self, a: &Attempt<'_>, from: &str, to: &str, why: String) {
        self.metrics
            .model(from)
            .fallbacks
            .fetch_add(1, Ordering::Relaxed);
        self.decide(
            a.id,
            a.meta,
            to,
            DecisionAction::Fallback,
            format!("{from} failed ({why}); next rung {to}"),
        );
    }

    /// One attempt on `model`: cold-load check, admission, the model's lease, the upstream's
    /// headers and its first byte.
    async fn attempt(
        self: &Arc<Self>,
        a: &Attempt<'_>,
        model: &str,
        body: &mut RawObject,
        tracker: &mut Tracker,
    ) -> Result<Response<UpstreamBody>, Failure> {
        let final_error = |e: ApiError| Failure {
            kind: FailureKind::Final,
            answer: Answer::Error(e),
        };
        let not_here = |e: ApiError| Failure {
            kind: FailureKind::NotHere,
            answer: Answer::Error(e),
        };
        if self.upstream.readiness(model) == Readiness::Unknown {
            return Err(not_here(ApiError::model_not_found(model)));
        }
        // 2. A cold load that cannot fit the budget: answer now, load in the background.
        self.check_cold(a.id, a.meta, model, a.priority, a.deadline)
            .map_err(not_here)?;

        // 3. Admission (priority queue, concurrency limits).
        let warm = self.upstream.readiness(model) == Readiness::Ready;
        let permit = match tokio::time::timeout_at(
            a.deadline.into(),
            self.sched.admit(model, a.priority, warm),
        )
        .await
        {
            Ok(p) => p,
            Err(_) => {
                let budget = a.budget;
                self.decide(
                    a.id,
                    a.meta,
                    model,
                    DecisionAction::QueueTimeout,
                    format!("no place within the {budget:.1} s budget"),
                );
                return Err(final_error(
                    ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "server_error",
                        format!("`{model}` is saturated: no place within the {budget:.1} s budget"),
                    )
                    .code("queue_timeout")
                    .retry_after(1),
                ));
            }
        };
        tracker.permit = Some(permit);

        // 4. The model (maybe loading it); the budget is checked again after the wait.
        self.check_cold(a.id, a.meta, model, a.priority, a.deadline)
            .map_err(not_here)?;
        let lease = match self
            .acquire(a.id, a.meta, model, a.priority, a.deadline)
            .await
        {
            Ok(l) => l,
            Err(e) if e.code == Some("model_load_failed") => return Err(not_here(e)),
            Err(e) => return Err(final_error(e)),
        };

        // 5. Forward, and wait for the answer's first byte.
        body.set("model", &lease.upstream_model().unwrap_or(model))
            .map_err(final_error)?;
        // The model's manifest: a chat rendered through its template, its thinking mode.
        let shaped = self
            .manifest
            .shape(a.route, model, body, a.meta, a.id)
            .map_err(final_error)?;
        let timeout = secs(self.cfg.upstream_timeout_s).max(Duration::from_millis(1));
        let sent = proxy::send(&self.client, &lease, shaped.path, shaped.payload, timeout).await;
        tracker.lease = Some(lease);
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                let reason = if e.status == StatusCode::GATEWAY_TIMEOUT {
                    AttemptFailure::Timeout
                } else {
                    AttemptFailure::Connect
                };
                return Err(Failure::upstream(reason, None, Answer::Error(e)));
            }
        };
        let status = resp.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let after = retry_after(resp.headers());
            return Err(Failure::upstream(
                AttemptFailure::Status429,
                after,
                Answer::Upstream(resp),
            ));
        }
        if matches!(status.as_u16(), 500 | 502 | 503 | 504) {
            let after = retry_after(resp.headers());
            return Err(Failure::upstream(
                AttemptFailure::Status5xx,
                after,
                Answer::Upstream(resp),
            ));
        }
        let (mut parts, mut rest) = resp.into_parts();
        if !status.is_success() {
            return Ok(Response::from_parts(parts, UpstreamBody::new(None, rest)));
        }
        if shaped.reshaper.is_some() {
            // The answer is rewritten on its way: its length changes.
            parts.headers.remove(http::header::CONTENT_LENGTH);
        }
        match proxy::first_frame(&mut rest, timeout).await {
            Ok(first) => Ok(Response::from_parts(
                parts,
                UpstreamBody::new(first, rest).reshaped(shaped.reshaper),
            )),
            Err(why) => Err(Failure::upstream(
                AttemptFailure::FirstByte,
                None,
                Answer::Error(
                    ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        format!("upstream for `{model}`: {why}"),
                    )
                    .code("upstream_unavailable"),
                ),
            )),
        }
    }

    /// Loads `model` now (an operator's preload) and waits until it is ready, within
    /// `budget`; returns how long it took (zero when it was ready).
    pub async fn preload(
        self: &Arc<Self>,
        model: &str,
        priority: i32,
        budget: Duration,
    ) -> Result<Duration, ApiError> {
        if self.upstream.readiness(model) == Readiness::Unknown {
            return Err(ApiError::model_not_found(model));
        }
        let id = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let meta = RequestMeta {
            client_id: Some("admin".to_owned()),
            ..RequestMeta::default()
        };
        let start = Instant::now();
        let lease = self
            .acquire(id, &meta, model, priority, start + budget)
            .await?;
        drop(lease);
        Ok(start.elapsed())
    }

    fn check_cold(
        self: &Arc<Self>,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        if self.upstream.readiness(model) == Readiness::Ready {
            return Ok(());
        }
        let eta = self.loads.eta(model);
        let remaining = deadline.saturating_duration_since(Instant::now());
        if eta <= remaining {
            return Ok(());
        }
        self.metrics
            .model(model)
            .cold_rejections
            .fetch_add(1, Ordering::Relaxed);
        let started = self.background_load(id, meta, model, priority);
        self.decide(
            id,
            meta,
            model,
            DecisionAction::ColdReject,
            format!(
                "cold: ready in ~{:.1} s > {:.1} s left of the budget; {}",
                eta.as_secs_f64(),
                remaining.as_secs_f64(),
                if started {
                    "load started"
                } else {
                    "load in progress"
                }
            ),
        );
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!(
                "`{model}` is loading; expected ready in {:.0} s, more than the {:.1} s left of this request's budget. Retry later or raise x_timeout_s.",
                eta.as_secs_f64(),
                remaining.as_secs_f64()
            ),
        )
        .code("model_loading")
        .retry_after(secs_up(eta).max(1))
        .extra(json!({
            "model": model,
            "estimated_ready_s": eta.as_secs_f64(),
            "estimated_ready_at_ms": now_ms() + u64::try_from(eta.as_millis()).unwrap_or(0),
        })))
    }

    /// Starts a load of `model` on its own task unless one is running; `true` when started.
    fn background_load(
        self: &Arc<Self>,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
    ) -> bool {
        if !self.loads.begin(model) {
            return false;
        }
        let me = Arc::clone(self);
        let model = model.to_owned();
        let meta = meta.clone();
        tokio::spawn(async move {
            let r = me.measured_load(id, &meta, &model, priority).await;
            drop(r); // the lease: the model stays warm by the pool's own timer
        });
        true
    }

    /// Acquires a model whose load this caller owns (`loads.begin` returned true), records
    /// the figures.
    async fn measured_load(
        &self,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
    ) -> Result<UpstreamLease, UpstreamError> {
        let end = self.loads.ending(model);
        let before: BTreeSet<String> = self
            .upstream
            .slots()
            .into_iter()
            .filter(|s| s.state == SlotState::Ready && s.model != model)
            .map(|s| s.model)
            .collect();
        let r = self.lease(model, priority).await;
        let took = end.finish(r.is_ok()).unwrap_or_default();
        let m = self.metrics.model(model);
        match &r {
            Ok(_) => {
                m.loads.fetch_add(1, Ordering::Relaxed);
                m.load_seconds.observe(took);
                let after: BTreeSet<String> =
                    self.upstream.slots().into_iter().map(|s| s.model).collect();
                let gone: Vec<&String> = before.difference(&after).collect();
                if !gone.is_empty() {
                    m.swaps.fetch_add(1, Ordering::Relaxed);
                }
                // A load in progress counts at its full size until READY: now it does not.
                self.room.freed();
                self.decide(
                    id,
                    meta,
                    model,
                    DecisionAction::Load,
                    if gone.is_empty() {
                        format!("loaded in {:.2} s", took.as_secs_f64())
                    } else {
                        format!(
                            "loaded in {:.2} s, swapped out {gone:?}",
                            took.as_secs_f64()
                        )
                    },
                );
            }
            Err(UpstreamError::NoCapacity(_)) => {}
            Err(e) => {
                m.load_failures.fetch_add(1, Ordering::Relaxed);
                self.decide(id, meta, model, DecisionAction::LoadFailed, e.to_string());
                // What the failed load had reserved is free again.
                self.room.freed();
            }
        }
        r
    }

    /// A lease on `model` from the upstream that tells the waiters for GPU room when it ends
    /// and leaves its model idle (evictable).
    async fn lease(&self, model: &str, priority: i32) -> Result<UpstreamLease, UpstreamError> {
        // Armed before the call: a caller dropped while the upstream hands over the lease
        // still tells the waiters (the lease ends unseen, inside the upstream's task).
        let mut ends = LeaseEnd {
            room: Arc::clone(&self.room),
            upstream: Arc::clone(&self.upstream),
            model: model.to_owned(),
            armed: true,
        };
        let lease = match self.upstream.acquire(model, priority).await {
            Ok(l) => l,
            Err(e) => {
                ends.armed = false;
                return Err(e);
            }
        };
        // The lease's own guard drops first, then the waiters are told.
        Ok(lease.guarded(Box::new(ends)))
    }

    /// Acquires `model`, waiting for room when the pool has none (VRAM gate): waiters are
    /// offered freed room most important first ([`RoomQueue`]). A load, once started, is never
    /// cut short by the deadline.
    async fn acquire(
        self: &Arc<Self>,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
        deadline: Instant,
    ) -> Result<UpstreamLease, ApiError> {
        let mut room = self.room.waiter(priority);
        let mut waited = false;
        loop {
            room.before_try();
            let r = if self.upstream.readiness(model) != Readiness::Ready && self.loads.begin(model)
            {
                // On its own task: a caller that leaves must not leave the clock's load open.
                let me = Arc::clone(self);
                let (m, meta) = (model.to_owned(), meta.clone());
                tokio::spawn(async move { me.measured_load(id, &meta, &m, priority).await })
                    .await
                    .unwrap_or_else(|e| Err(UpstreamError::Failed(format!("load task: {e}"))))
            } else {
                self.lease(model, priority).await
            };
            match r {
                Ok(l) => return Ok(l),
                Err(UpstreamError::UnknownModel(m)) => return Err(ApiError::model_not_found(&m)),
                Err(UpstreamError::Failed(e) | UpstreamError::Unsupported(e)) => {
                    return Err(ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        format!("could not load `{model}`: {e}"),
                    )
                    .code("model_load_failed"));
                }
                Err(UpstreamError::NoCapacity(_)) => {
                    if !waited {
                        waited = true;
                        self.decide(
                            id,
                            meta,
                            model,
                            DecisionAction::WaitVram,
                            "no room: waiting for a model to be released".into(),
                        );
                    }
                    // Woken by an offer of freed room, or every second (other processes).
                    loop {
                        let now = Instant::now();
                        if now >= deadline {
                            return Err(ApiError::new(
                                StatusCode::SERVICE_UNAVAILABLE,
                                "server_error",
                                format!("no GPU room for `{model}` within the budget (every resident model is busy or more important)"),
                            )
                            .code("no_capacity")
                            .retry_after(5));
                        }
                        if room
                            .wait((deadline - now).min(Duration::from_secs(1)))
                            .await
                        {
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_only() {
        let mut h = http::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(http::header::RETRY_AFTER, "0.5".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
        h.insert(
            http::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
        h.insert(http::header::RETRY_AFTER, "999999".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn secs_up_rounds_up() {
        assert_eq!(secs_up(Duration::from_millis(1001)), 2);
    }
}
