//! The status page's "Swaps" section ([`SwapSection`]): what each lane's swaps cost on this
//! machine (the allocator's measured averages, from earlier runs too, per GPU and kind) and the
//! GPU time lost to swaps over the last hour, charted a bar a minute.

use std::sync::Arc;

use horos_gpu_alloc::allocator::SwapKind;
use horos_server_control::StatusSection;
use maud::{Markup, Render, html};
use serde_json::{Value, json};

use crate::metrics::{LOST_MINUTES, SwapCounts, SwapMetrics};

/// The swaps' costs and the time they took, read from the executor's [`SwapMetrics`] as the
/// page renders (never waiting for the executor).
#[derive(Debug, Clone)]
pub struct SwapSection {
    metrics: Arc<SwapMetrics>,
}

impl SwapSection {
    /// The section over `metrics` (the executor's).
    pub fn new(metrics: Arc<SwapMetrics>) -> Self {
        Self { metrics }
    }
}

/// A swap kind as the page names it: `load`, `wake l1`, `sleep l2`, `stop`.
fn kind_name(kind: SwapKind) -> String {
    match kind {
        SwapKind::Load => "load".into(),
        SwapKind::Stop => "stop".into(),
        SwapKind::Wake(l) => format!("wake l{}", l.number()),
        SwapKind::Sleep(l) => format!("sleep l{}", l.number()),
    }
}

/// The minute now (since the Unix epoch).
fn this_minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

impl SwapSection {
    /// Seconds lost to swaps in each of the last [`LOST_MINUTES`] minutes up to `now` (a
    /// minute since the Unix epoch), oldest first, from `counts`' minutes.
    fn lost(counts: &SwapCounts, now: u64) -> Vec<f64> {
        let first = now.saturating_sub(LOST_MINUTES as u64 - 1);
        let mut lost = vec![0.0; LOST_MINUTES];
        for &(m, s) in &counts.lost_by_minute {
            if (first..=now).contains(&m) {
                lost[(m - first) as usize] += s;
            }
        }
        lost
    }

    /// The page's chart: a bar a minute, its height the seconds lost in it.
    fn chart(lost: &[f64]) -> Markup {
        const W: usize = 6;
        const H: f64 = 60.0;
        let top = lost.iter().copied().fold(1.0_f64, f64::max);
        html! {
            svg class="swaps" width=(lost.len() * W) height=(H) role="img"
                aria-label={
                    "GPU seconds lost to swaps a minute, last hour (top " (format!("{top:.1}"))
                    " s)"
                }
            {
                @for (i, s) in lost.iter().enumerate() {
                    @if *s > 0.0 {
                        @let h = (s / top * H).max(1.0);
                        rect x=(i * W) y=(format!("{:.1}", H - h)) width=(W - 1)
                            height=(format!("{h:.1}"))
                        {
                            title { (format!("{s:.1}")) " s" }
                        }
                    }
                }
            }
        }
    }
}

impl StatusSection for SwapSection {
    fn render_html(&self, out: &mut String) {
        let counts = self.metrics.snapshot();
        let costs = self.metrics.costs();
        let lost = Self::lost(&counts, this_minute());
        let hour: f64 = lost.iter().sum();
        let nothing_yet = costs.iter().next().is_none();
        html! {
            h2 { "Swaps" }
            p {
                "GPU time lost to swaps in the last hour: " (format!("{hour:.1}"))
                " s; loads avoided by a wake: " (counts.avoided) "."
            }
            (Self::chart(&lost))
            table {
                tr {
                    th { "lane or pooled model" } th { "GPU" } th { "swap" } th { "measured s" }
                    th { "measurements" }
                }
                @for (mode, gpu, kind, m) in costs.iter() {
                    tr {
                        td { (mode) }
                        td { (gpu) }
                        td { (kind_name(kind)) }
                        td { (format!("{:.2}", m.mean_s)) }
                        td { (m.count) }
                    }
                }
                @if nothing_yet {
                    tr { td colspan="5" { "nothing measured yet" } }
                }
            }
        }
        .render_to(out);
    }

    fn to_json(&self) -> Option<(String, Value)> {
        let counts = self.metrics.snapshot();
        let costs: Vec<Value> = self
            .metrics
            .costs()
            .iter()
            .map(|(mode, gpu, kind, m)| {
                json!({"mode": mode, "gpu": gpu, "kind": kind_name(kind),
                       "mean_s": m.mean_s, "count": m.count})
            })
            .collect();
        Some((
            "swaps".into(),
            json!({
                "costs": costs,
                "avoided": counts.avoided,
                "lost_s_by_minute": Self::lost(&counts, this_minute()),
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use horos_gpu_alloc::allocator::{SwapCosts, SwapMeasurement};
    use horos_gpu_alloc::catalogue::SleepLevel;

    use super::*;

    fn m(mode: &str, kind: SwapKind, seconds: f64) -> SwapMeasurement {
        SwapMeasurement::new(mode, 0, kind, seconds)
    }

    #[test]
    fn the_page_shows_each_measured_cost_and_the_time_lost_this_minute() {
        let metrics = Arc::new(SwapMetrics::default());
        let section = SwapSection::new(Arc::clone(&metrics));
        let mut html = String::new();
        section.render_html(&mut html);
        assert!(html.contains("nothing measured yet"), "{html}");
        assert!(!html.contains("<rect"), "{html}");

        let mut costs = SwapCosts::new();
        for x in [
            m("think<1>", SwapKind::Load, 40.0),
            m("think<1>", SwapKind::Wake(SleepLevel::One), 0.8),
            m("embed", SwapKind::Stop, 1.5),
        ] {
            metrics.record(&x);
            costs.record(&x);
        }
        metrics.set_costs(&costs);
        let mut html = String::new();
        section.render_html(&mut html);
        assert!(
            html.contains(
                "<td>think&lt;1&gt;</td><td>0</td><td>wake l1</td><td>0.80</td><td>1</td>"
            ),
            "{html}"
        );
        assert!(html.contains("<td>load</td><td>40.00</td>"), "{html}");
        assert!(
            html.contains("last hour: 42.3 s; loads avoided by a wake: 1."),
            "{html}"
        );
        assert_eq!(html.matches("<rect").count(), 1, "{html}");

        let (name, v) = section.to_json().unwrap();
        assert_eq!(name, "swaps");
        assert_eq!(v["costs"].as_array().unwrap().len(), 3);
        assert_eq!(v["avoided"], 1);
        let lost = v["lost_s_by_minute"].as_array().unwrap();
        assert_eq!(lost.len(), LOST_MINUTES);
        let total: f64 = lost.iter().filter_map(Value::as_f64).sum();
        assert!((total - 42.3).abs() < 1e-9, "{total}");
    }
}
