//! The data plane: resolve the model (task ladder, `ladder.rs`), check the cold-load budget,
//! wait for admission, acquire the model (loading it, `load.rs`), forward.

mod ladder;
mod load;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use horos_server_control::SlotState;
use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use crate::admission::Places;
use crate::clock::{now_ms, secs};
use crate::config::CoordinatorConfig;
use crate::config::TaskSpec;
use crate::data::decision::DecisionAction;
use crate::data::manifest::{self, Manifest};
use crate::data::metrics::AttemptFailure;
use crate::data::metrics::Metrics;
use crate::data::proxy::{self, HttpClient, Tracker, UpstreamBody};
use crate::data::record::Record;
use crate::data::request::{RawObject, RequestMeta};
use crate::data::route::Route;
use crate::error::ApiError;
use crate::tenancy::Callers;
use crate::tenancy::limits::Caller;
use crate::tenancy::profiles::ClientProfile;
use crate::upstream::tasks;
use crate::upstream::{Readiness, Routes, UpstreamError, UpstreamLease, UpstreamPool};

/// Shared state of a coordinator: a few typed parts, each owned by its concern.
pub(crate) struct Core {
    /// Request settings: budgets, attempts, timeouts, tasks.
    cfg: CoordinatorConfig,
    /// Who calls and what each caller may do (tenancy).
    callers: Callers,
    /// Places under the limits, GPU room, cold-load times (admission).
    places: Places,
    /// The models' servers and the cloud-fallback guard (upstream).
    routes: Routes,
    /// Counters, decisions, request numbers.
    record: Record,
    /// What the coordinator does per model (templates, thinking mode).
    manifest: Manifest,
    /// The HTTP client to the upstreams.
    client: HttpClient,
}

impl Core {
    /// The parts put together.
    pub(crate) fn new(
        cfg: CoordinatorConfig,
        callers: Callers,
        places: Places,
        routes: Routes,
        record: Record,
        manifest: Manifest,
    ) -> Self {
        Self {
            cfg,
            callers,
            places,
            routes,
            record,
            manifest,
            client: proxy::client(),
        }
    }

    /// The settings it was started with.
    pub(crate) fn cfg(&self) -> &CoordinatorConfig {
        &self.cfg
    }

    /// Tenancy: keys, limits, profiles.
    pub(crate) fn callers(&self) -> &Callers {
        &self.callers
    }

    /// Admission: places, room, load times.
    pub(crate) fn places(&self) -> &Places {
        &self.places
    }

    /// The models' servers.
    pub(crate) fn upstream(&self) -> &Arc<dyn UpstreamPool> {
        self.routes.pool()
    }

    /// Whether `model` is a remote (cloud) model.
    pub(crate) fn is_remote(&self, model: &str) -> bool {
        self.routes.is_remote(model)
    }

    /// Counters and histograms.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        self.record.metrics()
    }

    /// The per-model manifest.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.manifest
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

/// Applies `profile` to a request: its defaults where the request sets none, its alias.
pub(crate) fn apply_profile(
    profile: &ClientProfile,
    meta: &mut RequestMeta,
    body: &mut RawObject,
) -> Result<(), ApiError> {
    meta.priority = meta.priority.or(profile.priority);
    meta.timeout_s = meta.timeout_s.or(profile.budget_s);
    meta.thinking = meta.thinking.or(profile.thinking);
    meta.template.clone_from(&profile.template);
    let model = body.get_str("model").or_else(|| {
        if meta.task.is_none() {
            profile.default_model.clone()
        } else {
            None
        }
    });
    if let Some(m) = model {
        let target = profile.aliases.get(&m).cloned().unwrap_or(m);
        body.set("model", &target)?;
    }
    Ok(())
}

/// The place (`messages[i].content[j].image_url`) of the first image a chat request gives by an
/// address another server would fetch (anything but a `data:` URL), if any.
fn remote_image(body: &RawObject) -> Option<String> {
    // Parsed only when an image is there at all (a chat's messages are left as text otherwise).
    const NEEDLE: &[u8] = b"image_url";
    if !body
        .raw("messages")?
        .windows(NEEDLE.len())
        .any(|w| w == NEEDLE)
    {
        return None;
    }
    let messages = body.get("messages")?;
    for (i, m) in messages.as_array()?.iter().enumerate() {
        let Some(parts) = m.get("content").and_then(serde_json::Value::as_array) else {
            continue;
        };
        for (j, part) in parts.iter().enumerate() {
            let url = part.get("image_url").and_then(|u| match u {
                serde_json::Value::String(s) => Some(s.as_str()),
                other => other.get("url").and_then(serde_json::Value::as_str),
            });
            if let Some(url) = url
                && !url
                    .trim_start()
                    .get(..5)
                    .is_some_and(|p| p.eq_ignore_ascii_case("data:"))
            {
                return Some(format!("messages[{i}].content[{j}].image_url"));
            }
        }
    }
    None
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

    /// Logs a decision about request `request` and sends it to the decision log.
    pub fn decide(
        &self,
        request: u64,
        meta: &RequestMeta,
        model: &str,
        action: DecisionAction,
        reason: String,
    ) {
        let client = meta.client_id.as_deref();
        self.record.decide(request, client, model, action, reason);
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
        let id = self.record.next_request();
        let Call {
            route,
            mut body,
            mut meta,
            received,
            default_budget_s,
            caller,
        } = call;

        // 0. What the caller may ask for, where keys are configured: an `x_priority` no more
        //    important than its key grants (the operator's default otherwise), a
        //    `keep_alive` only for a key that may unload models. The profile's own defaults,
        //    set by the operator, apply after this.
        if let Some(g) = self.callers.gate().grants(&caller) {
            let top = g.top_priority.unwrap_or(self.cfg.default_priority);
            meta.priority = meta.priority.map(|p| p.max(top));
            if !g.may_unload {
                meta.keep_alive = None;
            }
        }
        // 0a. The caller's profile: its aliases and defaults.
        let profile = self.callers.profile_of(&caller);
        if let Some(p) = &profile {
            apply_profile(p, &mut meta, &mut body)?;
        }

        // 0b. A streamed answer is charged like any other: the upstream is asked for its usage
        //     (the event that carries it is kept from a caller that did not ask for it), and
        //     its events are counted where it gives none.
        if matches!(route, Route::Chat | Route::Completions)
            && body.get("stream") == Some(serde_json::Value::Bool(true))
        {
            let mut options = body
                .get("stream_options")
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({}));
            let asked = options.get("include_usage") == Some(&serde_json::Value::Bool(true));
            if !asked {
                options["include_usage"] = serde_json::Value::Bool(true);
                body.set("stream_options", &options)?;
            }
            tracker.stream = Some(crate::data::proxy::StreamAccount::new(!asked));
        }

        // 1. The models to try: a task's ladder from its pick, or the body's `model`; a model
        //    whose server does not serve the route is refused (or skipped) before any load.
        let (ladder, task) = self.ladder(route, &meta, &body, &caller, profile.as_deref())?;
        if let Some((model, reason)) = &ladder.picked {
            self.decide(id, &meta, model, DecisionAction::Task, reason.clone());
        }
        let ladder = ladder.models;
        if route == Route::Chat
            && let Some(param) = remote_image(&body)
            && let Some(m) = ladder.iter().find(|m| {
                !self
                    .cfg
                    .allow_remote_images
                    .iter()
                    .any(|a| a == "*" || a == *m)
            })
        {
            return Err(ApiError::bad_request(format!(
                "an image by http(s) address is not fetched for {m}: send it as a data: URL \
                 (or the operator lists the model in [coordinator] allow_remote_images)"
            ))
            .param(&param)
            .code("remote_image_refused"));
        }
        if route == Route::Speech {
            // Speech is paid for by its input's characters (the answer is audio, no `usage`).
            tracker.input_units = Some(crate::data::speech::check(&body)?);
        }
        // A request its models' manifests cannot carry (tools through a text template, ...)
        // is refused now, before it waits for a place or a load.
        for m in ladder.iter().filter(|m| self.manifest.has_entry(m)) {
            manifest::shape(&self.manifest, route, m, &body, &meta, id)?;
        }
        let priority = meta
            .priority
            .or(task.and_then(|t| t.priority))
            .unwrap_or(self.cfg.default_priority);
        // A caller's `x_timeout_s` shortens its budget; it never stretches it past the task's
        // (or the default) budget, where keys are configured.
        let ceiling = task
            .and_then(|t| t.budget_s)
            .unwrap_or(default_budget_s)
            .max(profile.as_ref().and_then(|p| p.budget_s).unwrap_or(0.0));
        let asked = meta.timeout_s.filter(|t| t.is_finite() && *t > 0.0);
        let budget = match asked {
            Some(t) if self.callers.gate().has_keys() => t.min(ceiling),
            Some(t) => t,
            None => ceiling,
        };
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
                    tracker.keep_alive = keep_alive.map(|d| (Arc::clone(self.upstream()), d));
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
            let m = self.metrics().model(model);
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

    fn fall_back(&self, a: &Attempt<'_>, from: &str, to: &str, why: String) {
        self.metrics()
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
        if self.upstream().readiness(model) == Readiness::Unknown {
            return Err(not_here(ApiError::model_not_found(model)));
        }
        // 2. A cold load that cannot fit the budget: answer now, load in the background.
        self.check_cold(a.id, a.meta, model, a.priority, a.deadline)
            .map_err(not_here)?;

        // 3. Admission (priority queue, concurrency limits).
        let warm = self.upstream().readiness(model) == Readiness::Ready;
        let permit = match tokio::time::timeout_at(
            a.deadline.into(),
            self.places.admit(model, a.priority, warm),
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
        let shaped = manifest::shape(&self.manifest, a.route, model, body, a.meta, a.id)
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
