//! The data plane: resolve the model (task ladder), check the cold-load budget, wait for
//! admission, acquire the model (loading it), forward.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use horos_gpu_alloc::pool::SlotState;
use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use tokio::sync::mpsc;

use crate::clock::{now_ms, secs};
use crate::config::CoordinatorConfig;
use crate::decision::{Decision, DecisionAction};
use crate::error::ApiError;
use crate::loadclock::LoadClock;
use crate::metrics::Metrics;
use crate::proxy::{self, HttpClient, Tracker};
use crate::request::{RawObject, RequestMeta};
use crate::room::RoomQueue;
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
    pub path: &'static str,
    pub body: RawObject,
    pub meta: RequestMeta,
    pub received: Instant,
    /// Budget when neither the request nor its task sets one, seconds.
    pub default_budget_s: f64,
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

    /// Runs a call up to the upstream's response headers; the tracker receives the
    /// concurrency place, the model lease and the keep-alive.
    pub async fn dispatch(
        self: &Arc<Self>,
        mut call: Call,
        tracker: &mut Tracker,
    ) -> Result<Response<Incoming>, ApiError> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let meta = &call.meta;

        // 1. The model: a task's pick, or the body's `model`.
        let model_field = call.body.get_str("model");
        let task_name = meta.task.clone().or_else(|| {
            model_field
                .as_deref()
                .and_then(|m| m.strip_prefix("task:"))
                .map(str::to_owned)
        });
        let task = match &task_name {
            Some(name) => Some(self.cfg.tasks.get(name).ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    format!("the task `{name}` does not exist"),
                )
                .param("x_task")
                .code("task_not_found")
            })?),
            None => None,
        };
        let model = match (&task_name, task) {
            (Some(name), Some(t)) => {
                let up = &self.upstream;
                let r = tasks::resolve(
                    name,
                    t,
                    self.settings.allow_cloud_fallback(),
                    &self.cfg.cloud_prefixes,
                    |m| up.readiness(m),
                )
                .ok_or_else(|| ApiError::bad_request(format!("the task `{name}` has no model")))?;
                self.decide(id, meta, &r.model, DecisionAction::Task, r.reason);
                r.model
            }
            _ => model_field
                .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?,
        };
        if self.upstream.readiness(&model) == Readiness::Unknown {
            return Err(ApiError::model_not_found(&model));
        }
        tracker.model.clone_from(&model);
        call.body.set("model", &model)?;

        let priority = meta
            .priority
            .or(task.and_then(|t| t.priority))
            .unwrap_or(self.cfg.default_priority);
        let budget = meta
            .timeout_s
            .or(task.and_then(|t| t.budget_s))
            .unwrap_or(call.default_budget_s);
        let deadline = call.received + secs(budget);
        let keep_alive = meta.keep_alive.or_else(|| {
            task.and_then(|t| t.keep_alive_s)
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(secs)
        });

        // 2. A cold load that cannot fit the budget: answer now, load in the background.
        self.check_cold(id, meta, &model, priority, deadline)?;

        // 3. Admission (priority queue, concurrency limits).
        let warm = self.upstream.readiness(&model) == Readiness::Ready;
        let permit = match tokio::time::timeout_at(
            deadline.into(),
            self.sched.admit(&model, priority, warm),
        )
        .await
        {
            Ok(p) => p,
            Err(_) => {
                self.decide(
                    id,
                    meta,
                    &model,
                    DecisionAction::QueueTimeout,
                    format!("no place within the {budget:.1} s budget"),
                );
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    format!("`{model}` is saturated: no place within the {budget:.1} s budget"),
                )
                .code("queue_timeout")
                .retry_after(1));
            }
        };
        tracker.permit = Some(permit);

        // 4. The model (maybe loading it); the budget is checked again after the wait.
        self.check_cold(id, meta, &model, priority, deadline)?;
        let lease = self.acquire(id, meta, &model, priority, deadline).await?;

        // 5. Forward.
        let payload = call.body.to_vec();
        let timeout = secs(self.cfg.upstream_timeout_s).max(Duration::from_millis(1));
        let resp = proxy::send(
            &self.client,
            lease.endpoint(),
            call.path,
            Bytes::from(payload),
            timeout,
        )
        .await?;
        tracker.lease = Some(lease);
        tracker.keep_alive = keep_alive.map(|d| (Arc::clone(&self.upstream), d));
        Ok(resp)
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
        let endpoint = lease.endpoint().to_owned();
        // Fields drop in order: the lease first, then the waiters are told.
        Ok(UpstreamLease::new(endpoint, Some(Box::new((lease, ends)))))
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
                Err(UpstreamError::Failed(e)) => {
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
    fn secs_up_rounds_up() {
        assert_eq!(secs_up(Duration::from_millis(1001)), 2);
    }
}
