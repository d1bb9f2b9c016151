//! What the executor's swaps cost, as Prometheus counters by kind and histograms by mode and
//! kind: [`SwapMetrics`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use horos_gpu_alloc::allocator::{SwapCosts, SwapKind, SwapMeasurement};
use horos_gpu_alloc::pool::ModelPool;

/// Upper bounds of the swap histograms' buckets, seconds: from a level-1 wake (a fraction of a
/// second) to a cold load of a large model with its CUDA graphs (minutes).
pub const SWAP_BUCKETS_S: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The kinds of swap, as the `kind` label names them.
const KINDS: [&str; 4] = ["load", "wake", "sleep", "stop"];

/// The `kind` label of a swap.
fn label(kind: SwapKind) -> &'static str {
    match kind {
        SwapKind::Load => "load",
        SwapKind::Wake(_) => "wake",
        SwapKind::Sleep(_) => "sleep",
        SwapKind::Stop => "stop",
    }
}

/// Counters of the swaps a mode executor carried out, by kind (`load`, `wake`, `sleep`,
/// `stop`), the loads avoided (a lane woken where it slept instead of started), and a
/// histogram of each (mode, kind)'s seconds. Shared: the executor records, a `/metrics` page
/// renders ([`SwapMetrics::render`]).
#[derive(Debug, Default)]
pub struct SwapMetrics {
    counts: Mutex<SwapCounts>,
    /// The costs the allocator plans with (measured here and by earlier runs).
    costs: Mutex<SwapCosts>,
    /// The costs of swaps another planner measures (the model pool: `pool:NAME`), recorded
    /// here as they are measured, on top of what earlier runs kept.
    others: Mutex<SwapCosts>,
}

/// Minutes of swap time kept for the status page's chart.
pub const LOST_MINUTES: usize = 60;

/// A snapshot of [`SwapMetrics`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwapCounts {
    /// Per kind label: swaps done and their seconds.
    pub by_kind: BTreeMap<&'static str, (u64, f64)>,
    /// Wakes that took the place of a load.
    pub avoided: u64,
    /// Per (mode, kind label): the swaps' seconds as a histogram.
    pub by_mode: BTreeMap<(String, &'static str), Histogram>,
    /// GPU seconds lost to swaps per minute (minutes since the Unix epoch), the last
    /// [`LOST_MINUTES`] with a swap ended in them, oldest first.
    pub lost_by_minute: VecDeque<(u64, f64)>,
}

/// A histogram of seconds over [`SWAP_BUCKETS_S`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at most each bound of [`SWAP_BUCKETS_S`] (not cumulative).
    pub buckets: [u64; SWAP_BUCKETS_S.len()],
    /// Observations in all (the `+Inf` bucket).
    pub count: u64,
    /// Their sum, seconds.
    pub sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = SWAP_BUCKETS_S.iter().position(|b| seconds <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// A label value as Prometheus' text format writes it (`\`, `"` and newlines escaped).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl SwapCounts {
    /// `seconds` lost to a swap that ended in `minute`; the minutes older than the last
    /// [`LOST_MINUTES`] are dropped.
    fn lose(&mut self, minute: u64, seconds: f64) {
        match self.lost_by_minute.back_mut() {
            Some((m, s)) if *m == minute => *s += seconds,
            _ => self.lost_by_minute.push_back((minute, seconds)),
        }
        let oldest = minute.saturating_sub(LOST_MINUTES as u64 - 1);
        while self
            .lost_by_minute
            .front()
            .is_some_and(|(m, _)| *m < oldest)
        {
            self.lost_by_minute.pop_front();
        }
    }

    /// Swaps of kind `kind` (`load`, `wake`, `sleep`, `stop`).
    pub fn count(&self, kind: &str) -> u64 {
        self.by_kind.get(kind).map_or(0, |c| c.0)
    }

    /// Their seconds in all.
    pub fn seconds(&self, kind: &str) -> f64 {
        self.by_kind.get(kind).map_or(0.0, |c| c.1)
    }
}

impl SwapMetrics {
    /// A swap measured: counted by kind and in its (mode, kind)'s histogram; a wake counts as a
    /// load avoided.
    pub fn record(&self, m: &SwapMeasurement) {
        let seconds = if m.seconds.is_finite() {
            m.seconds.max(0.0)
        } else {
            0.0
        };
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let e = c.by_kind.entry(label(m.kind)).or_default();
        e.0 += 1;
        e.1 += seconds;
        if matches!(m.kind, SwapKind::Wake(_)) {
            c.avoided += 1;
        }
        c.by_mode
            .entry((m.mode.clone(), label(m.kind)))
            .or_default()
            .observe(seconds);
        let minute = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 60);
        c.lose(minute, seconds);
    }

    /// A swap another planner (the model pool) measured: counted as [`SwapMetrics::record`]
    /// counts it, and its cost shown beside the allocator's.
    fn record_other(&self, m: &SwapMeasurement) {
        self.record(m);
        self.others
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(m);
    }

    /// Shows `pool`'s swaps here beside the allocator's: each one it measures counted as
    /// [`SwapMetrics::record`] counts it and its cost shown, starting from those it read from earlier runs.
    pub fn watch_pool(self: &Arc<Self>, pool: ModelPool) -> ModelPool {
        {
            let mut o = self.others.lock().unwrap_or_else(|p| p.into_inner());
            for (mode, gpu, kind, m) in pool.swap_costs().iter() {
                o.restore(mode, gpu, kind, m);
            }
        }
        let me = Arc::clone(self);
        pool.with_swap_observer(Arc::new(move |m| me.record_other(m)))
    }

    /// The costs the allocator plans with now (set by the executor as they are measured).
    pub fn set_costs(&self, costs: &SwapCosts) {
        let mut c = self.costs.lock().unwrap_or_else(|p| p.into_inner());
        if *c != *costs {
            *c = costs.clone();
        }
    }

    /// The costs last set, and those of the other planners.
    pub fn costs(&self) -> SwapCosts {
        let mut all = self.costs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let others = self.others.lock().unwrap_or_else(|p| p.into_inner());
        for (mode, gpu, kind, m) in others.iter() {
            all.restore(mode, gpu, kind, m);
        }
        all
    }

    /// The counts now.
    pub fn snapshot(&self) -> SwapCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Prometheus text: `horos_swap_seconds_total{kind}`, `horos_swaps_total{kind}` (every
    /// kind, zeros included), `horos_swaps_avoided_total`, and the histogram
    /// `horos_swap_seconds{mode,kind}` (`_bucket{le}`, `_sum`, `_count`; a series per (mode,
    /// kind) measured).
    pub fn render(&self) -> String {
        let c = self.snapshot();
        let mut o = String::new();
        o.push_str(
            "# HELP horos_swap_seconds_total Seconds a GPU spent on swaps, by kind.\n\
             # TYPE horos_swap_seconds_total counter\n",
        );
        for k in KINDS {
            let _ = writeln!(
                o,
                "horos_swap_seconds_total{{kind=\"{k}\"}} {}",
                c.seconds(k)
            );
        }
        o.push_str(
            "# HELP horos_swaps_total Swaps carried out, by kind.\n\
             # TYPE horos_swaps_total counter\n",
        );
        for k in KINDS {
            let _ = writeln!(o, "horos_swaps_total{{kind=\"{k}\"}} {}", c.count(k));
        }
        let _ = write!(
            o,
            "# HELP horos_swaps_avoided_total Loads avoided: a lane or a pooled model woken where it slept.\n\
             # TYPE horos_swaps_avoided_total counter\n\
             horos_swaps_avoided_total {}\n",
            c.avoided
        );
        o.push_str(
            "# HELP horos_swap_seconds Seconds each swap took, by mode and kind.\n\
             # TYPE horos_swap_seconds histogram\n",
        );
        for ((mode, kind), h) in &c.by_mode {
            let labels = format!("mode=\"{}\",kind=\"{kind}\"", escape(mode));
            let mut cumulative = 0;
            for (bound, n) in SWAP_BUCKETS_S.iter().zip(h.buckets) {
                cumulative += n;
                let _ = writeln!(
                    o,
                    "horos_swap_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                o,
                "horos_swap_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(o, "horos_swap_seconds_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(o, "horos_swap_seconds_count{{{labels}}} {}", h.count);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horos_gpu_alloc::catalogue::SleepLevel;

    #[test]
    fn the_time_lost_is_kept_a_minute_at_a_time_for_the_last_hour() {
        let mut c = SwapCounts::default();
        c.lose(1000, 2.0);
        c.lose(1000, 3.0);
        c.lose(1030, 1.0);
        c.lose(1059, 1.5);
        assert_eq!(
            Vec::from(c.lost_by_minute.clone()),
            [(1000, 5.0), (1030, 1.0), (1059, 1.5)]
        );
        // Minute 1060's hour starts at 1001: minute 1000 is dropped.
        c.lose(1060, 4.0);
        assert_eq!(
            Vec::from(c.lost_by_minute.clone()),
            [(1030, 1.0), (1059, 1.5), (1060, 4.0)]
        );
    }

    fn swap(mode: &str, kind: SwapKind, seconds: f64) -> SwapMeasurement {
        SwapMeasurement {
            mode: mode.into(),
            gpu: 0,
            kind,
            seconds,
        }
    }

    #[test]
    fn swaps_are_counted_by_kind_and_a_wake_is_a_load_avoided() {
        let m = SwapMetrics::default();
        m.record(&swap("think", SwapKind::Load, 2.5));
        m.record(&swap("think", SwapKind::Sleep(SleepLevel::One), 0.5));
        m.record(&swap("think", SwapKind::Wake(SleepLevel::Two), 1.0));
        m.record(&swap("think", SwapKind::Wake(SleepLevel::One), 0.25));
        let c = m.snapshot();
        assert_eq!(
            (c.count("load"), c.count("wake"), c.count("stop")),
            (1, 2, 0)
        );
        assert_eq!(c.avoided, 2);
        let text = m.render();
        assert!(
            text.contains("horos_swap_seconds_total{kind=\"wake\"} 1.25\n"),
            "{text}"
        );
        assert!(
            text.contains("horos_swap_seconds_total{kind=\"stop\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("horos_swaps_total{kind=\"load\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("horos_swaps_avoided_total 2\n"), "{text}");
    }

    #[test]
    fn each_mode_and_kind_has_a_histogram_that_parses_as_prometheus_text() {
        let m = SwapMetrics::default();
        m.record(&swap("think", SwapKind::Wake(SleepLevel::One), 0.3));
        m.record(&swap("think", SwapKind::Wake(SleepLevel::Two), 2.0));
        m.record(&swap("think", SwapKind::Load, 170.0));
        m.record(&swap("vi\"sion", SwapKind::Load, 900.0));
        m.record(&swap("vi\"sion", SwapKind::Stop, f64::NAN));
        let text = m.render();
        let samples = horos_vllm_client::parse_prometheus(&text);
        // Every line that is not a comment is a sample.
        let lines = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(samples.len(), lines, "{text}");
        let get = |name: &str, mode: &str, kind: &str, le: Option<&str>| {
            samples
                .iter()
                .find(|s| {
                    s.name == name
                        && s.labels.iter().any(|(k, v)| k == "mode" && v == mode)
                        && s.labels.iter().any(|(k, v)| k == "kind" && v == kind)
                        && le.is_none_or(|le| s.labels.iter().any(|(k, v)| k == "le" && v == le))
                })
                .map(|s| s.value)
        };
        // Both wakes in one series, cumulative buckets.
        assert_eq!(
            get("horos_swap_seconds_bucket", "think", "wake", Some("0.25")),
            Some(0.0)
        );
        assert_eq!(
            get("horos_swap_seconds_bucket", "think", "wake", Some("0.5")),
            Some(1.0)
        );
        assert_eq!(
            get("horos_swap_seconds_bucket", "think", "wake", Some("2.5")),
            Some(2.0)
        );
        assert_eq!(
            get("horos_swap_seconds_bucket", "think", "wake", Some("+Inf")),
            Some(2.0)
        );
        assert_eq!(
            get("horos_swap_seconds_count", "think", "wake", None),
            Some(2.0)
        );
        assert!((get("horos_swap_seconds_sum", "think", "wake", None).unwrap() - 2.3).abs() < 1e-9);
        assert_eq!(
            get("horos_swap_seconds_bucket", "think", "load", Some("120")),
            Some(0.0)
        );
        assert_eq!(
            get("horos_swap_seconds_bucket", "think", "load", Some("300")),
            Some(1.0)
        );
        // Past the last bound: only in +Inf. A label value is escaped.
        assert!(text.contains("mode=\"vi\\\"sion\""), "{text}");
        assert!(
            text.contains(
                "horos_swap_seconds_bucket{mode=\"vi\\\"sion\",kind=\"load\",le=\"600\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "horos_swap_seconds_bucket{mode=\"vi\\\"sion\",kind=\"load\",le=\"+Inf\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("horos_swap_seconds_count{mode=\"vi\\\"sion\",kind=\"stop\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE horos_swap_seconds histogram\n"),
            "{text}"
        );
    }
}
