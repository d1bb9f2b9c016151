//! The status page's "Lanes" section ([`LanesSection`]): the lanes with their servers and
//! gates, rendered from their state in memory, so the page never waits.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use horos_feeder::{FeederCounters, LaneGate};
use horos_server_control::StatusSection;
use horos_servers::BookedServer;
use maud::{Markup, Render, html};
use serde_json::{Value, json};

use super::cell;

/// One feeder lane: a lane's server on one GPU (or its only server), or someone else's server.
pub struct LaneRow {
    /// The queue.
    pub queue: String,
    /// The GPU of this instance, with `[allocator]`.
    pub gpu: Option<u32>,
    /// Where the feeder sends its batches.
    pub url: String,
    /// Its gate.
    pub gate: Arc<LaneGate>,
    /// Its server, when the binary runs it.
    pub server: Option<BookedServer>,
    /// Jobs a batch may hold.
    pub batch_size: usize,
}

/// The lanes, their gates and servers, and how full their batches run.
pub struct LanesSection {
    /// One row per lane instance.
    pub rows: Vec<LaneRow>,
    /// The feeder's published totals.
    pub feeder: Arc<FeederCounters>,
    /// The lane instances the allocator has put to sleep.
    pub asleep: Asleep,
}

/// The lane instances asleep, as the allocator's executor says: (GPU, queue) and the sleep
/// level (1: weights in host RAM, 2: dropped). Shared: the executor's reporter sets it, the
/// page reads it.
#[derive(Debug, Clone, Default)]
pub struct Asleep(Arc<Mutex<BTreeMap<(u32, String), u8>>>);

impl Asleep {
    /// The instances asleep now, each with its level: replaces what was there.
    pub fn set(&self, asleep: impl IntoIterator<Item = (u32, String, u8)>) {
        let now = asleep.into_iter().map(|(g, q, l)| ((g, q), l)).collect();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = now;
    }

    /// The level lane `queue`'s instance on GPU `gpu` sleeps at, if it sleeps.
    pub fn level(&self, gpu: u32, queue: &str) -> Option<u8> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(gpu, queue.to_owned()))
            .copied()
    }
}

impl LaneRow {
    /// What the page and the API show of it; `fill`: the lane's mean batch over its batch size.
    fn view(&self, feeder: &FeederCounters, asleep: &Asleep) -> Value {
        let status = self.server.as_ref().map(BookedServer::status);
        let level = self.gpu.and_then(|g| asleep.level(g, &self.queue));
        let fill = feeder
            .lane(&self.queue)
            .filter(|t| t.batches > 0)
            .map(|t| t.claimed as f64 / (t.batches as f64 * self.batch_size.max(1) as f64));
        json!({
            "queue": self.queue,
            "gpu": self.gpu,
            "url": self.url,
            "gate": if self.gate.is_open() { "open" } else { "closed" },
            "batch": if self.gate.is_busy() { "running" } else { "idle" },
            "batch_fill": fill,
            "server": match (level, &status) {
                (Some(l), Some(_)) => format!("asleep l{l}"),
                (_, Some(s)) => format!("{:?}", s.state).to_lowercase(),
                (_, None) => "not ours".to_owned(),
            },
            "asleep": level,
            "restarts": status.as_ref().map_or(0, |s| s.restarts),
            "failed_starts": status.as_ref().map_or(0, |s| s.failed_starts),
            "last_error": status.as_ref().and_then(|s| s.last_error.clone()),
        })
    }
}

impl StatusSection for LanesSection {
    fn to_json(&self) -> Option<(String, Value)> {
        Some((
            "lanes".into(),
            Value::Array(
                self.rows
                    .iter()
                    .map(|r| r.view(&self.feeder, &self.asleep))
                    .collect(),
            ),
        ))
    }

    fn render_html(&self, o: &mut String) {
        if self.rows.is_empty() {
            return;
        }
        html! {
            h2 { "Lanes" }
            table {
                tr {
                    th { "lane" } th { "gpu" } th { "url" } th { "gate" } th { "batch" }
                    th { "batch fill" } th { "server" } th { "restarts" } th { "failed starts" }
                    th { "last error" }
                }
                @for l in &self.rows {
                    (lane_row(&l.view(&self.feeder, &self.asleep)))
                }
            }
        }
        .render_to(o);
    }
}

/// One lane's row, from its [`LaneRow::view`].
fn lane_row(v: &Value) -> Markup {
    let fill = v["batch_fill"]
        .as_f64()
        .map_or_else(String::new, |f| format!("{:.0} %", f * 100.0));
    html! {
        tr {
            td { (cell(&v["queue"])) }
            td { (cell(&v["gpu"])) }
            td { (cell(&v["url"])) }
            td { (cell(&v["gate"])) }
            td { (cell(&v["batch"])) }
            td { (fill) }
            td { (cell(&v["server"])) }
            td { (cell(&v["restarts"])) }
            td { (cell(&v["failed_starts"])) }
            td { (cell(&v["last_error"])) }
        }
    }
}
