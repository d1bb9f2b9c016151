//! The control plane's view of the world: a [`Snapshot`] rebuilt by one background task
//! (the snapshotter) and published through a `watch` channel that only it writes.
//!
//! Why: the pool, the job queue and the GPU readers all have locks or connection pools that
//! the data plane holds while saturated. The snapshotter may wait on them; `/metrics`,
//! `/status` and `/api/*` never do — they read the last snapshot and atomics.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

pub use horos_server_control::{GpuGauge, GpuGauges, HistoryPoint};
use serde::Serialize;
use squeueha::QueueStats;
use tokio::sync::{mpsc, watch};

use crate::admission::loadclock::{LoadClock, LoadFigures};
use crate::clock::now_ms;
pub use crate::data::decision::{Decision, DecisionAction};
use crate::prom::esc;
use crate::upstream::{SlotView, UpstreamPool};

/// What one GPU serves, as the component that decides it (an allocator) last said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeView {
    /// GPU index.
    pub gpu: u32,
    /// The mode (a lane, a model group) it serves or is switching from.
    pub mode: String,
    /// Serving, or what is under way.
    pub state: ModeState,
    /// Since when, milliseconds since the Unix epoch.
    pub since_ms: u64,
}

/// What a GPU is doing with its mode. Serialised as `serving`, `down`, `switching to <mode>`,
/// or a state another allocator names itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModeState {
    /// Serving its mode.
    Serving,
    /// Its mode's servers are down (a failed switch or restore).
    Down,
    /// Finishing its mode's work, then switching to the mode named.
    SwitchingTo(String),
    /// A state another allocator names itself.
    Other(String),
}

impl ModeState {
    const SWITCHING: &str = "switching to ";
}

impl From<&str> for ModeState {
    /// `serving`, `down`, `switching to <mode>`, else [`ModeState::Other`].
    fn from(s: &str) -> Self {
        match s {
            "serving" => ModeState::Serving,
            "down" => ModeState::Down,
            _ => match s.strip_prefix(Self::SWITCHING) {
                Some(to) => ModeState::SwitchingTo(to.to_owned()),
                None => ModeState::Other(s.to_owned()),
            },
        }
    }
}

impl std::fmt::Display for ModeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModeState::Serving => f.write_str("serving"),
            ModeState::Down => f.write_str("down"),
            ModeState::SwitchingTo(to) => write!(f, "{}{to}", Self::SWITCHING),
            ModeState::Other(s) => f.write_str(s),
        }
    }
}

impl Serialize for ModeState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Compares with the serialised form (`state == "serving"`).
impl PartialEq<str> for ModeState {
    fn eq(&self, other: &str) -> bool {
        match self {
            ModeState::Serving => other == "serving",
            ModeState::Down => other == "down",
            ModeState::SwitchingTo(to) => other.strip_prefix(Self::SWITCHING) == Some(to.as_str()),
            ModeState::Other(s) => s == other,
        }
    }
}

/// Compares with the serialised form (`state == "serving"`).
impl PartialEq<&str> for ModeState {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

/// The modes per GPU, set by an allocator, shown on the status page and in `/metrics`. Cheap to
/// clone; its lock is held only to copy a small map (never by a request).
#[derive(Debug, Clone, Default)]
pub struct ModeBoard {
    inner: Arc<std::sync::Mutex<BTreeMap<u32, ModeView>>>,
}

impl ModeBoard {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    /// GPU `gpu` now serves `mode`, in `state` (a [`ModeState`] or its serialised form).
    pub fn set(&self, gpu: u32, mode: &str, state: impl Into<ModeState>) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(
            gpu,
            ModeView {
                gpu,
                mode: mode.to_owned(),
                state: state.into(),
                since_ms: now_ms(),
            },
        );
    }

    /// Every GPU's entry, by index.
    pub fn read(&self) -> Vec<ModeView> {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        m.values().cloned().collect()
    }
}

/// Where other components post their decisions (an allocator switching a GPU's mode, say) so the
/// status page lists them beside the coordinator's own. Cheap to clone; never waits (a full
/// channel drops the entry: the page is best effort).
#[derive(Debug, Clone)]
pub struct DecisionLog {
    tx: mpsc::Sender<Decision>,
}

impl DecisionLog {
    pub(crate) fn new(tx: mpsc::Sender<Decision>) -> Self {
        DecisionLog { tx }
    }

    /// Records `action` on `subject` (a model, a GPU, a mode) and why. A name the
    /// coordinator uses for its own decisions (see [`DecisionAction`]) reads as that action.
    pub fn record(
        &self,
        subject: &str,
        action: impl Into<DecisionAction>,
        reason: impl Into<String>,
    ) {
        let _ = self.tx.try_send(Decision {
            at_ms: now_ms(),
            request: 0,
            client: None,
            model: subject.to_owned(),
            action: action.into(),
            reason: reason.into(),
        });
    }
}

/// What the control plane shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// When it was taken, milliseconds since the Unix epoch (0: none yet).
    pub taken_ms: u64,
    /// Model slots.
    pub slots: Vec<SlotView>,
    /// Learned load times.
    pub loads: BTreeMap<String, LoadFigures>,
    /// Job queues.
    pub queues: Vec<QueueStats>,
    /// GPUs.
    pub gpus: Vec<GpuGauge>,
    /// The GPUs' recent readings, oldest first ([`GpuGauges::history`]); served by
    /// `GET /api/v1/gpus`, not part of the status JSON (it can be long).
    #[serde(skip)]
    pub gpu_history: Arc<Vec<HistoryPoint>>,
    /// Each queue's depth (ready, in flight and delayed jobs) over the last hour, one point
    /// per column of the chart (the largest depth seen in it), oldest first; drawn on the status
    /// page, not part of the status JSON.
    #[serde(skip)]
    pub queue_history: Arc<BTreeMap<String, Vec<(u64, u64)>>>,
    /// What each GPU serves, where an allocator says so.
    pub modes: Vec<ModeView>,
    /// Recent decisions, newest first.
    pub decisions: Vec<Decision>,
    /// The latest dead letters of the job and watched queues, newest first.
    pub dead: Vec<DeadView>,
}

/// A dead letter as the status page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadView {
    /// The job's id (requeue it with `POST /api/v1/dead/ID/requeue`).
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Claims made.
    pub attempts: u32,
    /// Why it died.
    pub last_error: Option<String>,
    /// When, milliseconds since the Unix epoch.
    pub died_at_ms: i64,
}

/// Dead letters shown at most.
const DEAD_SHOWN: usize = 20;

impl Snapshot {
    /// Appends the snapshot's metrics (queues, dead letters, GPUs, slots).
    pub fn render_metrics(&self, o: &mut String) {
        o.push_str("# HELP horos_coordinator_job_queue_depth Async jobs by queue and state.\n# TYPE horos_coordinator_job_queue_depth gauge\n");
        for q in &self.queues {
            for (state, n) in [
                ("ready", q.ready),
                ("in_flight", q.in_flight),
                ("delayed", q.delayed),
            ] {
                let _ = writeln!(
                    o,
                    "horos_coordinator_job_queue_depth{{queue=\"{}\",state=\"{state}\"}} {n}",
                    esc(&q.queue)
                );
            }
        }
        o.push_str("# HELP horos_coordinator_dead_letters Jobs in the dead-letter table.\n# TYPE horos_coordinator_dead_letters gauge\n");
        for q in &self.queues {
            let _ = writeln!(
                o,
                "horos_coordinator_dead_letters{{queue=\"{}\"}} {}",
                esc(&q.queue),
                q.dead
            );
        }
        o.push_str("# HELP horos_gpu_temperature_celsius GPU die temperature.\n# TYPE horos_gpu_temperature_celsius gauge\n");
        for g in &self.gpus {
            if let Some(t) = g.temperature_c {
                let _ = writeln!(
                    o,
                    "horos_gpu_temperature_celsius{{gpu=\"{}\"}} {t}",
                    g.index
                );
            }
        }
        o.push_str("# HELP horos_gpu_memory_used_bytes GPU memory used.\n# TYPE horos_gpu_memory_used_bytes gauge\n");
        for g in &self.gpus {
            let _ = writeln!(
                o,
                "horos_gpu_memory_used_bytes{{gpu=\"{}\"}} {}",
                g.index,
                g.memory_used_mb * 1024 * 1024
            );
        }
        o.push_str("# HELP horos_gpu_memory_total_bytes GPU memory total.\n# TYPE horos_gpu_memory_total_bytes gauge\n");
        for g in &self.gpus {
            let _ = writeln!(
                o,
                "horos_gpu_memory_total_bytes{{gpu=\"{}\"}} {}",
                g.index,
                g.memory_total_mb * 1024 * 1024
            );
        }
        o.push_str("# HELP horos_gpu_utilization_ratio GPU compute utilization (0 to 1).\n# TYPE horos_gpu_utilization_ratio gauge\n");
        for g in &self.gpus {
            if let Some(u) = g.utilization_pct {
                let _ = writeln!(
                    o,
                    "horos_gpu_utilization_ratio{{gpu=\"{}\"}} {}",
                    g.index,
                    f64::from(u) / 100.0
                );
            }
        }
        if self.gpus.iter().any(|g| g.alert_active.is_some()) {
            o.push_str("# HELP horos_gpu_temperature_alert Whether the GPU is in temperature alert (1) or not (0).\n# TYPE horos_gpu_temperature_alert gauge\n");
            for g in &self.gpus {
                if let Some(a) = g.alert_active {
                    let _ = writeln!(
                        o,
                        "horos_gpu_temperature_alert{{gpu=\"{}\"}} {}",
                        g.index,
                        u8::from(a)
                    );
                }
            }
        }
        if self.gpus.iter().any(|g| g.alerts_total.is_some()) {
            o.push_str("# HELP horos_gpu_temperature_alerts_total Temperature alerts raised (one per crossing of the threshold).\n# TYPE horos_gpu_temperature_alerts_total counter\n");
            for g in &self.gpus {
                if let Some(n) = g.alerts_total {
                    let _ = writeln!(
                        o,
                        "horos_gpu_temperature_alerts_total{{gpu=\"{}\"}} {n}",
                        g.index
                    );
                }
            }
        }
        if !self.modes.is_empty() {
            o.push_str("# HELP horos_gpu_mode The mode each GPU serves (1).\n# TYPE horos_gpu_mode gauge\n");
            for m in &self.modes {
                let _ = writeln!(
                    o,
                    "horos_gpu_mode{{gpu=\"{}\",mode=\"{}\"}} 1",
                    m.gpu,
                    esc(&m.mode)
                );
            }
        }
        o.push_str("# HELP horos_coordinator_slot_info Model slots by state.\n# TYPE horos_coordinator_slot_info gauge\n");
        for s in &self.slots {
            let _ = writeln!(
                o,
                "horos_coordinator_slot_info{{model=\"{}\",state=\"{}\"}} 1",
                esc(&s.model),
                s.state
            );
        }
        let age = if self.taken_ms == 0 {
            -1.0
        } else {
            now_ms().saturating_sub(self.taken_ms) as f64 / 1000.0
        };
        let _ = writeln!(
            o,
            "# HELP horos_coordinator_snapshot_age_seconds Age of the control plane's snapshot.\n# TYPE horos_coordinator_snapshot_age_seconds gauge\nhoros_coordinator_snapshot_age_seconds {age}"
        );
    }
}

/// One point of a queue's depth history covers this long (an hour in 240 points: one per pixel
/// column of a chart).
pub const DEPTH_COLUMN_MS: u64 = 15_000;
/// Points of depth history kept per queue.
const DEPTH_POINTS: usize = 240;

/// Adds the queues' depths at `at_ms` to `history` (the column's largest depth is kept), and
/// forgets points older than an hour and queues that are gone.
fn record_depths(
    history: &mut BTreeMap<String, VecDeque<(u64, u64)>>,
    queues: &[QueueStats],
    at_ms: u64,
) {
    let column = at_ms - at_ms % DEPTH_COLUMN_MS;
    history.retain(|name, _| queues.iter().any(|q| &q.queue == name));
    for q in queues {
        let depth = q.ready + q.in_flight + q.delayed;
        let points = history.entry(q.queue.clone()).or_default();
        match points.back_mut() {
            Some((c, d)) if *c == column => *d = (*d).max(depth),
            _ => points.push_back((column, depth)),
        }
        while points.len() > DEPTH_POINTS {
            points.pop_front();
        }
    }
}

/// Where the snapshotter reads from.
pub(crate) struct Sources {
    pub upstream: Arc<dyn UpstreamPool>,
    pub loads: Arc<LoadClock>,
    pub queue: Option<squeueha::AsyncQueue>,
    pub gauges: Option<Arc<dyn GpuGauges>>,
    pub modes: Option<ModeBoard>,
    pub decisions: mpsc::Receiver<Decision>,
    pub keep: usize,
    pub interval: Duration,
    pub watch: Vec<String>,
}

/// Rebuilds the snapshot forever (until every receiver is gone).
pub(crate) async fn run(mut src: Sources, tx: watch::Sender<Arc<Snapshot>>) {
    let mut recent: VecDeque<Decision> = VecDeque::new();
    let mut depths: BTreeMap<String, VecDeque<(u64, u64)>> = BTreeMap::new();
    let mut tick = tokio::time::interval(src.interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        while let Ok(d) = src.decisions.try_recv() {
            recent.push_front(d);
        }
        recent.truncate(src.keep);
        let queues = match &src.queue {
            Some(q) => job_queues(q, &src.watch).await,
            None => Vec::new(),
        };
        let dead = match &src.queue {
            Some(q) => dead_letters(q, &queues).await,
            None => Vec::new(),
        };
        let (gpus, gpu_history) = match &src.gauges {
            Some(g) => {
                let g = Arc::clone(g);
                tokio::task::spawn_blocking(move || (g.read(), g.history()))
                    .await
                    .unwrap_or_default()
            }
            None => (Vec::new(), Vec::new()),
        };
        let taken_ms = now_ms();
        record_depths(&mut depths, &queues, taken_ms);
        let snap = Snapshot {
            taken_ms,
            queue_history: Arc::new(
                depths
                    .iter()
                    .map(|(q, points)| (q.clone(), points.iter().copied().collect()))
                    .collect(),
            ),
            slots: src.upstream.slots(),
            loads: src.loads.figures(),
            queues,
            gpus,
            gpu_history: Arc::new(gpu_history),
            modes: src.modes.as_ref().map(ModeBoard::read).unwrap_or_default(),
            decisions: recent.iter().cloned().collect(),
            dead,
        };
        if tx.send(Arc::new(snap)).is_err() {
            return;
        }
    }
}

/// The newest dead letters of the queues that have any (the others cost no read).
async fn dead_letters(q: &squeueha::AsyncQueue, queues: &[QueueStats]) -> Vec<DeadView> {
    let mut dead = Vec::new();
    for s in queues.iter().filter(|s| s.dead > 0) {
        if let Ok(jobs) = q.newest_dead_letters(&s.queue, DEAD_SHOWN).await {
            dead.extend(jobs.into_iter().map(|j| DeadView {
                id: j.id,
                queue: j.queue,
                attempts: j.attempts,
                last_error: j.last_error,
                died_at_ms: j.died_at,
            }));
        }
    }
    dead.sort_by_key(|d| std::cmp::Reverse(d.died_at_ms));
    dead.truncate(DEAD_SHOWN);
    dead
}

/// The stats of every job queue and watched queue, the empty ones included (so their series
/// always exist).
async fn job_queues(q: &squeueha::AsyncQueue, watch: &[String]) -> Vec<QueueStats> {
    let mut v: Vec<QueueStats> = q
        .all_stats()
        .await
        .map(|v| {
            v.into_iter()
                .filter(|s| {
                    s.queue.starts_with(crate::jobs::api::QUEUE_PREFIX) || watch.contains(&s.queue)
                })
                .collect()
        })
        .unwrap_or_default();
    let kinds = crate::jobs::api::JobKind::ALL.map(crate::jobs::api::JobKind::queue);
    for name in kinds.into_iter().chain(watch.iter().cloned()) {
        if !v.iter().any(|s| s.queue == name) {
            v.push(QueueStats {
                queue: name,
                ready: 0,
                in_flight: 0,
                delayed: 0,
                done: 0,
                dead: 0,
                oldest_ready_age_ms: None,
            });
        }
    }
    v.sort_by(|a, b| a.queue.cmp(&b.queue));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_states_serialise_as_their_names_and_parse_back() {
        for (s, name) in [
            (ModeState::Serving, "serving"),
            (ModeState::Down, "down"),
            (
                ModeState::SwitchingTo("vision".into()),
                "switching to vision",
            ),
            (ModeState::Other("warming".into()), "warming"),
        ] {
            assert_eq!(serde_json::json!(s), serde_json::json!(name));
            assert_eq!(ModeState::from(name), s);
            assert!(s == name);
        }
        assert!(ModeState::Serving != "down");
    }

    fn stats(queue: &str, ready: u64, in_flight: u64) -> QueueStats {
        QueueStats {
            queue: queue.into(),
            ready,
            in_flight,
            delayed: 0,
            done: 0,
            dead: 0,
            oldest_ready_age_ms: None,
        }
    }

    #[test]
    fn queue_depth_keeps_each_columns_peak_an_hour_and_only_live_queues() {
        let mut h = BTreeMap::new();
        let t0 = 10 * DEPTH_COLUMN_MS;
        record_depths(&mut h, &[stats("a", 3, 1), stats("b", 0, 0)], t0);
        record_depths(&mut h, &[stats("a", 9, 0), stats("b", 0, 0)], t0 + 1_000);
        record_depths(&mut h, &[stats("a", 2, 0), stats("b", 0, 0)], t0 + 2_000);
        assert_eq!(h["a"], [(t0, 9)], "the column's peak");
        record_depths(&mut h, &[stats("a", 1, 0)], t0 + DEPTH_COLUMN_MS);
        assert_eq!(h["a"], [(t0, 9), (t0 + DEPTH_COLUMN_MS, 1)]);
        assert!(!h.contains_key("b"), "a queue that is gone is forgotten");
        for k in 0..500 {
            record_depths(&mut h, &[stats("a", k, 0)], t0 + (2 + k) * DEPTH_COLUMN_MS);
        }
        assert_eq!(h["a"].len(), DEPTH_POINTS);
        assert_eq!(h["a"].back(), Some(&(t0 + 501 * DEPTH_COLUMN_MS, 499)));
    }
}
