//! What the executor's swaps cost, as Prometheus counters: [`SwapMetrics`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use horos_gpu_alloc::allocator::SwapKind;

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
/// `stop`), and the loads avoided (a lane woken where it slept instead of started). Shared:
/// the executor records, a `/metrics` page renders ([`SwapMetrics::render`]).
#[derive(Debug, Default)]
pub struct SwapMetrics {
    counts: Mutex<SwapCounts>,
}

/// A snapshot of [`SwapMetrics`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwapCounts {
    /// Per kind label: swaps done and their seconds.
    pub by_kind: BTreeMap<&'static str, (u64, f64)>,
    /// Wakes that took the place of a load.
    pub avoided: u64,
}

impl SwapCounts {
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
    /// A swap of `kind` that took `seconds`; a wake counts as a load avoided.
    pub fn record(&self, kind: SwapKind, seconds: f64) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let e = c.by_kind.entry(label(kind)).or_default();
        e.0 += 1;
        e.1 += seconds.max(0.0);
        if matches!(kind, SwapKind::Wake(_)) {
            c.avoided += 1;
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> SwapCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Prometheus text: `horos_swap_seconds_total{kind}`, `horos_swaps_total{kind}` (every
    /// kind, zeros included) and `horos_swaps_avoided_total`.
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
            "# HELP horos_swaps_avoided_total Loads avoided: a lane woken where it slept.\n\
             # TYPE horos_swaps_avoided_total counter\n\
             horos_swaps_avoided_total {}\n",
            c.avoided
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horos_gpu_alloc::catalogue::SleepLevel;

    #[test]
    fn swaps_are_counted_by_kind_and_a_wake_is_a_load_avoided() {
        let m = SwapMetrics::default();
        m.record(SwapKind::Load, 2.5);
        m.record(SwapKind::Sleep(SleepLevel::One), 0.5);
        m.record(SwapKind::Wake(SleepLevel::Two), 1.0);
        m.record(SwapKind::Wake(SleepLevel::One), 0.25);
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
}
