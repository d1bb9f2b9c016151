//! The feeder's totals for a metrics page ([`FeederCounters`]): a task ([`publish`]) copies
//! [`Feeder::stats`] into atomics once a second; a metrics handler (the coordinator's
//! `/metrics`) and a status page read only the atomics, so they never wait on the feeder.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{Feeder, FeederStats, LaneTotals};

/// The counters' names (`horos_feeder_NAME_total`) and help texts, in [`FeederCounters`]'
/// order.
const SERIES: [(&str, &str); 9] = [
    ("batches", "Batches run by the feeder"),
    ("completed", "Jobs completed by the feeder"),
    ("released", "Jobs released (server down or busy)"),
    ("retried", "Jobs nacked for a retry"),
    ("dead", "Jobs dead-lettered for their own fault"),
    ("poisoned", "Poison pills isolated and buried"),
    ("crashes", "Batches that took their server down"),
    ("restarts", "Server restarts"),
    ("reruns", "Bisection reruns"),
];

/// The published copy of the feeder's totals (all zero until [`publish`] first runs).
#[derive(Debug, Default)]
pub struct FeederCounters {
    totals: [AtomicU64; 9],
    lanes: Mutex<BTreeMap<String, LaneTotals>>,
}

impl FeederCounters {
    /// The last published totals of lane `queue` (none before its first batch).
    pub fn lane(&self, queue: &str) -> Option<LaneTotals> {
        self.lanes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(queue)
            .copied()
    }

    fn store(&self, s: &FeederStats) {
        s.lanes
            .clone_into(&mut self.lanes.lock().unwrap_or_else(|e| e.into_inner()));
        let values = [
            s.batches,
            s.completed,
            s.released,
            s.retried,
            s.dead,
            s.poisoned,
            s.crashes,
            s.restarts,
            s.reruns,
        ];
        for (slot, v) in self.totals.iter().zip(values) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// Appends the series (Prometheus text format) to `out`.
    pub fn render(&self, out: &mut String) {
        for ((name, help), value) in SERIES.iter().zip(&self.totals) {
            let _ = writeln!(
                out,
                "# HELP horos_feeder_{name}_total {help}.\n# TYPE horos_feeder_{name}_total counter\n\
                 horos_feeder_{name}_total {}",
                value.load(Ordering::Relaxed)
            );
        }
    }
}

/// Copies `feeder`'s totals into `counters` every second until the feeder is dropped (a task
/// on the current tokio runtime).
pub fn publish(feeder: &Arc<Feeder>, counters: Arc<FeederCounters>) {
    let feeder = Arc::downgrade(feeder);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let Some(f) = feeder.upgrade() else { return };
            counters.store(&f.stats());
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_totals_are_rendered_as_prometheus_counters_and_the_lanes_kept() {
        let counters = FeederCounters::default();
        assert_eq!(counters.lane("think"), None);
        let mut stats = FeederStats {
            batches: 3,
            completed: 20,
            reruns: 2,
            ..FeederStats::default()
        };
        let think = LaneTotals {
            batches: 3,
            claimed: 24,
        };
        stats.lanes.insert("think".into(), think);
        counters.store(&stats);
        assert_eq!(counters.lane("think"), Some(think));

        let mut out = String::new();
        counters.render(&mut out);
        assert!(
            out.contains(
                "# HELP horos_feeder_batches_total Batches run by the feeder.\n\
                 # TYPE horos_feeder_batches_total counter\nhoros_feeder_batches_total 3\n"
            ),
            "{out}"
        );
        assert!(out.contains("horos_feeder_completed_total 20\n"), "{out}");
        assert!(out.contains("horos_feeder_reruns_total 2\n"), "{out}");
        assert!(out.contains("horos_feeder_dead_total 0\n"), "{out}");
        assert_eq!(out.matches("# TYPE").count(), SERIES.len());
    }
}
