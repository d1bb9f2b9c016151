//! Counters and histograms as plain atomics in maps built once at start-up: the data plane
//! only increments, the control plane only loads, and neither ever waits for the other.
//! Models unknown at start-up are counted under the model label `_other`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::admission::scheduler::QueueObserver;
pub use crate::data::route::Route;
use crate::prom::esc;
use crate::tenancy::usage::UsageBook;

pub use crate::tenancy::requestors::OTHER_MODEL;

/// Upper bounds of the latency histograms, seconds.
const BUCKETS: [f64; 18] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0,
];

/// A Prometheus histogram of seconds.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cum}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// Per (route, model) figures.
#[derive(Debug, Default)]
pub struct RouteModel {
    /// Latency from request receipt to the end of the response body.
    pub latency: Histogram,
    /// Answers by status class: 2xx, 4xx, 5xx.
    pub status: [AtomicU64; 3],
}

impl RouteModel {
    /// Counts an answer.
    pub fn answered(&self, status: u16) {
        let i = match status {
            500.. => 2,
            400..=499 => 1,
            _ => 0,
        };
        self.status[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// One of a model's histograms.
type OfModel = fn(&ModelMetrics) -> &Histogram;

/// Per model figures.
#[derive(Debug, Default)]
pub struct ModelMetrics {
    /// Requests queued for admission.
    pub waiting: AtomicI64,
    /// Requests admitted (sent or about to be sent upstream).
    pub running: AtomicI64,
    /// Loads that succeeded.
    pub loads: AtomicU64,
    /// Loads that failed.
    pub load_failures: AtomicU64,
    /// Loads that displaced another resident model.
    pub swaps: AtomicU64,
    /// Load durations.
    pub load_seconds: Histogram,
    /// Wakes of the model from sleep (the upstream put it to sleep instead of stopping it).
    pub wakes: AtomicU64,
    /// Wake durations, as requests waited for them.
    pub wake_seconds: Histogram,
    /// Requests answered 503 at once because a cold load would not fit their budget.
    pub cold_rejections: AtomicU64,
    /// Attempts on this model that failed before their first byte, by [`AttemptFailure`].
    pub attempt_failures: [AtomicU64; AttemptFailure::ALL.len()],
    /// Requests sent to this model again after a failed attempt.
    pub retries: AtomicU64,
    /// Requests that left this model for the next rung of their task's ladder.
    pub fallbacks: AtomicU64,
}

/// Why an attempt failed before the client saw a byte of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptFailure {
    /// No connection (refused, reset, unreachable).
    Connect,
    /// No response headers within `upstream_timeout_s`.
    Timeout,
    /// Headers came, but the body broke, ended empty or stalled before its first byte.
    FirstByte,
    /// 500, 502, 503 or 504.
    Status5xx,
    /// 429 Too Many Requests.
    Status429,
}

impl AttemptFailure {
    /// Every reason.
    pub const ALL: [AttemptFailure; 5] = [
        AttemptFailure::Connect,
        AttemptFailure::Timeout,
        AttemptFailure::FirstByte,
        AttemptFailure::Status5xx,
        AttemptFailure::Status429,
    ];

    /// The reason's label in metrics.
    pub fn label(self) -> &'static str {
        match self {
            AttemptFailure::Connect => "connect",
            AttemptFailure::Timeout => "timeout",
            AttemptFailure::FirstByte => "first_byte",
            AttemptFailure::Status5xx => "status_5xx",
            AttemptFailure::Status429 => "status_429",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Every metric of a coordinator.
#[derive(Debug)]
pub struct Metrics {
    routes: BTreeMap<(Route, String), RouteModel>,
    models: BTreeMap<String, ModelMetrics>,
    in_flight: [AtomicI64; Route::ALL.len()],
    /// Jobs submitted through `POST /v1/jobs`.
    pub jobs_submitted: AtomicU64,
    /// Jobs finished with a result.
    pub jobs_succeeded: AtomicU64,
    /// Jobs finished with an error (including dead letters).
    pub jobs_failed: AtomicU64,
    /// Requests and tokens per caller and model.
    pub usage: UsageBook,
    /// Requests refused by a caller's limits (key or client), by caller.
    rate_limited: std::sync::Mutex<BTreeMap<String, u64>>,
    /// Who calls, how often, who is cooling down.
    pub requestors: crate::tenancy::requestors::RequestorBook,
}

impl Metrics {
    /// Metrics for these models (plus [`OTHER_MODEL`]).
    pub fn new(models: impl IntoIterator<Item = String>) -> Self {
        let mut names: Vec<String> = models.into_iter().collect();
        names.push(OTHER_MODEL.to_owned());
        names.sort();
        names.dedup();
        let mut routes = BTreeMap::new();
        for r in Route::ALL {
            for m in &names {
                routes.insert((r, m.clone()), RouteModel::default());
            }
        }
        Self {
            routes,
            models: names
                .into_iter()
                .map(|m| (m, ModelMetrics::default()))
                .collect(),
            in_flight: Default::default(),
            jobs_submitted: AtomicU64::new(0),
            jobs_succeeded: AtomicU64::new(0),
            jobs_failed: AtomicU64::new(0),
            usage: UsageBook::default(),
            rate_limited: std::sync::Mutex::new(BTreeMap::new()),
            requestors: Default::default(),
        }
    }

    /// Counts a request of `caller` refused by its limits (callers beyond 1000 share `_other`).
    pub fn rate_limited(&self, caller: &str) {
        let mut m = self.rate_limited.lock().unwrap_or_else(|e| e.into_inner());
        let key = if m.contains_key(caller) || m.len() < 1000 {
            caller
        } else {
            OTHER_MODEL
        };
        *m.entry(key.to_owned()).or_default() += 1;
    }

    /// The figures of (route, model).
    pub fn route(&self, route: Route, model: &str) -> &RouteModel {
        match self.routes.get(&(route, model.to_owned())) {
            Some(r) => r,
            None => self.other_route(route),
        }
    }

    fn other_route(&self, route: Route) -> &RouteModel {
        // Present by construction; the fallback keeps this total without a panic.
        self.routes
            .get(&(route, OTHER_MODEL.to_owned()))
            .or_else(|| self.routes.values().next())
            .unwrap_or_else(|| unreachable_route())
    }

    /// The figures of a model.
    pub fn model(&self, model: &str) -> &ModelMetrics {
        self.models
            .get(model)
            .or_else(|| self.models.get(OTHER_MODEL))
            .unwrap_or_else(|| unreachable_model())
    }

    /// Requests in progress on `route`.
    pub fn in_flight(&self, route: Route) -> &AtomicI64 {
        &self.in_flight[route.index()]
    }

    /// The Prometheus text exposition of these counters (the control plane appends the
    /// snapshot's series).
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(16 * 1024);
        o.push_str("# HELP horos_coordinator_request_duration_seconds Time from request receipt to the end of the response body.\n");
        o.push_str("# TYPE horos_coordinator_request_duration_seconds histogram\n");
        for ((r, m), v) in &self.routes {
            if v.latency.count() > 0 {
                let labels = format!("route=\"{}\",model=\"{}\"", r.label(), esc(m));
                v.latency.render(
                    &mut o,
                    "horos_coordinator_request_duration_seconds",
                    &labels,
                );
            }
        }
        o.push_str(
            "# HELP horos_coordinator_requests_total Answers by route, model and status class.\n",
        );
        o.push_str("# TYPE horos_coordinator_requests_total counter\n");
        for ((r, m), v) in &self.routes {
            for (i, class) in ["2xx", "4xx", "5xx"].iter().enumerate() {
                let n = v.status[i].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        o,
                        "horos_coordinator_requests_total{{route=\"{}\",model=\"{}\",status=\"{class}\"}} {n}",
                        r.label(),
                        esc(m)
                    );
                }
            }
        }
        o.push_str("# HELP horos_coordinator_requests_in_flight Requests in progress.\n");
        o.push_str("# TYPE horos_coordinator_requests_in_flight gauge\n");
        for r in Route::ALL {
            let _ = writeln!(
                o,
                "horos_coordinator_requests_in_flight{{route=\"{}\"}} {}",
                r.label(),
                self.in_flight(r).load(Ordering::Relaxed)
            );
        }
        gauge_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_queue_waiting",
            "Requests waiting for admission, per model.",
            |m| m.waiting.load(Ordering::Relaxed) as f64,
        );
        gauge_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_model_running",
            "Requests admitted, per model.",
            |m| m.running.load(Ordering::Relaxed) as f64,
        );
        counter_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_model_loads_total",
            "Model loads that succeeded.",
            |m| m.loads.load(Ordering::Relaxed),
        );
        counter_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_model_load_failures_total",
            "Model loads that failed.",
            |m| m.load_failures.load(Ordering::Relaxed),
        );
        counter_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_model_swaps_total",
            "Loads that displaced another resident model.",
            |m| m.swaps.load(Ordering::Relaxed),
        );
        counter_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_cold_rejections_total",
            "Requests answered 503 because a cold load would not fit their budget.",
            |m| m.cold_rejections.load(Ordering::Relaxed),
        );
        counter_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_retries_total",
            "Requests sent to a model again after a failed attempt.",
            |m| m.retries.load(Ordering::Relaxed),
        );
        counter_per_model(
            &mut o,
            &self.models,
            "horos_coordinator_fallbacks_total",
            "Requests that left a model for the next rung of their task's ladder.",
            |m| m.fallbacks.load(Ordering::Relaxed),
        );
        o.push_str("# HELP horos_coordinator_attempt_failures_total Attempts that failed before their first byte, by model and reason.\n");
        o.push_str("# TYPE horos_coordinator_attempt_failures_total counter\n");
        for (m, v) in &self.models {
            for r in AttemptFailure::ALL {
                let n = v.attempt_failures[r.index()].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        o,
                        "horos_coordinator_attempt_failures_total{{model=\"{}\",reason=\"{}\"}} {n}",
                        esc(m),
                        r.label()
                    );
                }
            }
        }
        let histograms: [(&str, &str, OfModel); 2] = [
            (
                "horos_coordinator_model_load_seconds",
                "Duration of model loads (swap-in time).",
                |v| &v.load_seconds,
            ),
            (
                "horos_coordinator_model_wake_seconds",
                "Duration of model wakes from sleep, as requests waited for them.",
                |v| &v.wake_seconds,
            ),
        ];
        for (name, help, of) in histograms {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (m, v) in &self.models {
                if of(v).count() > 0 {
                    of(v).render(&mut o, name, &format!("model=\"{}\"", esc(m)));
                }
            }
        }
        for (name, help, v) in [
            (
                "horos_coordinator_jobs_submitted_total",
                "Async jobs submitted.",
                &self.jobs_submitted,
            ),
            (
                "horos_coordinator_jobs_succeeded_total",
                "Async jobs finished with a result.",
                &self.jobs_succeeded,
            ),
            (
                "horos_coordinator_jobs_failed_total",
                "Async jobs finished with an error.",
                &self.jobs_failed,
            ),
        ] {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        self.usage.render(&mut o);
        o.push_str("# HELP horos_coordinator_rate_limited_total Requests refused (429) by a caller's limits.\n# TYPE horos_coordinator_rate_limited_total counter\n");
        for (caller, n) in self
            .rate_limited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                o,
                "horos_coordinator_rate_limited_total{{caller=\"{}\"}} {n}",
                esc(caller)
            );
        }
        self.requestors.render(&mut o, crate::clock::now_ms());
        o
    }
}

#[cold]
fn unreachable_route() -> &'static RouteModel {
    static EMPTY: std::sync::OnceLock<RouteModel> = std::sync::OnceLock::new();
    EMPTY.get_or_init(RouteModel::default)
}

#[cold]
fn unreachable_model() -> &'static ModelMetrics {
    static EMPTY: std::sync::OnceLock<ModelMetrics> = std::sync::OnceLock::new();
    EMPTY.get_or_init(ModelMetrics::default)
}

fn gauge_per_model(
    o: &mut String,
    models: &BTreeMap<String, ModelMetrics>,
    name: &str,
    help: &str,
    f: impl Fn(&ModelMetrics) -> f64,
) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (m, v) in models {
        let _ = writeln!(o, "{name}{{model=\"{}\"}} {}", esc(m), f(v));
    }
}

fn counter_per_model(
    o: &mut String,
    models: &BTreeMap<String, ModelMetrics>,
    name: &str,
    help: &str,
    f: impl Fn(&ModelMetrics) -> u64,
) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
    for (m, v) in models {
        let _ = writeln!(o, "{name}{{model=\"{}\"}} {}", esc(m), f(v));
    }
}

impl QueueObserver for Metrics {
    fn changed(&self, model: &str, waiting: usize, running: usize) {
        let m = self.model(model);
        m.waiting.store(
            i64::try_from(waiting).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        m.running.store(
            i64::try_from(running).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_renders_cumulative_buckets() {
        let m = Metrics::new(["a".to_owned()]);
        m.route(Route::Chat, "a")
            .latency
            .observe(Duration::from_millis(3));
        m.route(Route::Chat, "zzz").answered(503);
        let text = m.render();
        assert!(text.contains(
            "horos_coordinator_request_duration_seconds_bucket{route=\"chat\",model=\"a\",le=\"0.005\"} 1"
        ));
        assert!(text.contains(
            "horos_coordinator_requests_total{route=\"chat\",model=\"_other\",status=\"5xx\"} 1"
        ));
    }
}
