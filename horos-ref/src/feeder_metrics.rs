//! The feeder's totals on the coordinator's `/metrics`. A task copies them into atomics once a
//! second; the metrics handler reads only the atomics (the control plane never waits on the
//! feeder).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horos_feeder::{Feeder, FeederStats, LaneTotals};

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

/// The published copy of the feeder's totals.
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

/// Copies `feeder`'s totals into `counters` every second until the feeder is dropped.
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
