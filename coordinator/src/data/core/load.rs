//! A model in use: an operator's preload, the cold-load budget check, a load started in the
//! background and measured, and the lease that waits for GPU room.

use std::collections::BTreeSet;

use super::*;
use crate::admission::room::RoomQueue;

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

impl Core {
    /// Loads `model` now (an operator's preload) and waits until it is ready, within
    /// `budget`; returns how long it took (zero when it was ready).
    pub async fn preload(
        self: &Arc<Self>,
        model: &str,
        priority: i32,
        budget: Duration,
    ) -> Result<Duration, ApiError> {
        if self.upstream().readiness(model) == Readiness::Unknown {
            return Err(ApiError::model_not_found(model));
        }
        let id = self.record.next_request();
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

    pub(super) fn check_cold(
        self: &Arc<Self>,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let readiness = self.upstream().readiness(model);
        if readiness == Readiness::Ready {
            return Ok(());
        }
        // Asleep: ready in a wake, as the upstream measured it, not in a load.
        let asleep = readiness == Readiness::Asleep;
        let wake_s = asleep.then(|| self.upstream().expected_ready_s(model));
        let eta = self.places.loads().eta(model, wake_s.flatten());
        let remaining = deadline.saturating_duration_since(Instant::now());
        if eta <= remaining {
            return Ok(());
        }
        self.metrics()
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
                "{}: ready in ~{:.1} s > {:.1} s left of the budget; {}",
                if asleep { "asleep" } else { "cold" },
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
                "`{model}` is {}; expected ready in {:.0} s, more than the {:.1} s left of this request's budget. Retry later or raise x_timeout_s.",
                if asleep { "waking" } else { "loading" },
                eta.as_secs_f64(),
                remaining.as_secs_f64()
            ),
        )
        .code("model_loading")
        .retry_after(secs_up(eta).max(1))
        .extra(json!({
            "model": model,
            "waking": asleep,
            "estimated_ready_s": eta.as_secs_f64(),
            "estimated_ready_at_ms": now_ms() + u64::try_from(eta.as_millis()).unwrap_or(0),
        })))
    }

    /// Starts a load of `model` on its own task unless one is running; `true` when started.
    pub(super) fn background_load(
        self: &Arc<Self>,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
    ) -> bool {
        if !self.places.loads().begin(model) {
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
    pub(super) async fn measured_load(
        &self,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
    ) -> Result<UpstreamLease, UpstreamError> {
        let end = self.places.loads().ending(model);
        // A model asleep is woken, not loaded: its time is not a load's (the upstream measures
        // its wakes itself).
        let waking = self.upstream().readiness(model) == Readiness::Asleep;
        let before: BTreeSet<String> = self
            .upstream()
            .slots()
            .into_iter()
            .filter(|s| s.state == SlotState::Ready && s.model != model)
            .map(|s| s.model)
            .collect();
        let r = self.lease(model, priority).await;
        let took = end.finish(r.is_ok() && !waking).unwrap_or_default();
        let m = self.metrics().model(model);
        match &r {
            Ok(_) => {
                if waking {
                    m.wakes.fetch_add(1, Ordering::Relaxed);
                    m.wake_seconds.observe(took);
                } else {
                    m.loads.fetch_add(1, Ordering::Relaxed);
                    m.load_seconds.observe(took);
                }
                // Swapped out: ready before, not now (stopped, or asleep).
                let after: BTreeSet<String> = self
                    .upstream()
                    .slots()
                    .into_iter()
                    .filter(|s| s.state == SlotState::Ready)
                    .map(|s| s.model)
                    .collect();
                let gone: Vec<&String> = before.difference(&after).collect();
                if !gone.is_empty() {
                    m.swaps.fetch_add(1, Ordering::Relaxed);
                }
                // A load in progress counts at its full size until READY: now it does not.
                self.places.room().freed();
                let what = if waking { "woken from sleep" } else { "loaded" };
                self.decide(
                    id,
                    meta,
                    model,
                    DecisionAction::Load,
                    if gone.is_empty() {
                        format!("{what} in {:.2} s", took.as_secs_f64())
                    } else {
                        format!(
                            "{what} in {:.2} s, swapped out {gone:?}",
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
                self.places.room().freed();
            }
        }
        r
    }

    /// A lease on `model` from the upstream that tells the waiters for GPU room when it ends
    /// and leaves its model idle (evictable).
    pub(super) async fn lease(
        &self,
        model: &str,
        priority: i32,
    ) -> Result<UpstreamLease, UpstreamError> {
        // Armed before the call: a caller dropped while the upstream hands over the lease
        // still tells the waiters (the lease ends unseen, inside the upstream's task).
        let mut ends = LeaseEnd {
            room: Arc::clone(self.places.room()),
            upstream: Arc::clone(self.upstream()),
            model: model.to_owned(),
            armed: true,
        };
        let lease = match self.upstream().acquire(model, priority).await {
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
    pub(super) async fn acquire(
        self: &Arc<Self>,
        id: u64,
        meta: &RequestMeta,
        model: &str,
        priority: i32,
        deadline: Instant,
    ) -> Result<UpstreamLease, ApiError> {
        let mut room = self.places.room().waiter(priority);
        let mut waited = false;
        loop {
            room.before_try();
            let r = if self.upstream().readiness(model) != Readiness::Ready
                && self.places.loads().begin(model)
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
