//! The soak's report: a row a minute (printed as a table, written as CSV and JSON lines) and
//! the targets checked at the end.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::load::{Health, Minute};
use super::system::Proc;

/// One sample of the processes.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the start.
    pub t: f64,
    /// run first, then its descendants.
    pub procs: Vec<Proc>,
}

impl Sample {
    /// run's anonymous resident memory (MiB).
    pub fn run_anon(&self) -> f64 {
        self.procs
            .iter()
            .find(|p| p.name == "run")
            .map_or(0.0, |p| p.anon_kb as f64 / 1024.0)
    }

    /// run's resident memory (MiB) and descriptors.
    pub fn run(&self) -> (f64, u64) {
        self.procs
            .iter()
            .find(|p| p.name == "run")
            .map_or((0.0, 0), |p| (p.rss_kb as f64 / 1024.0, p.fds))
    }

    /// The children's count, resident memory (MiB) and descriptors, summed.
    pub fn children(&self) -> (usize, f64, u64) {
        let kids: Vec<&Proc> = self.procs.iter().filter(|p| p.name != "run").collect();
        (
            kids.len(),
            kids.iter().map(|p| p.rss_kb as f64 / 1024.0).sum(),
            kids.iter().map(|p| p.fds).sum(),
        )
    }
}

/// One minute's row.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// The minute (1 = the first).
    pub minute: usize,
    /// run's RSS at the minute's last sample, MiB, and the minute's highest.
    pub run_rss_mb: f64,
    /// The minute's highest RSS of run, MiB.
    pub run_rss_max_mb: f64,
    /// run's anonymous RSS (heap, stacks) at the minute's last sample, MiB.
    pub run_anon_mb: f64,
    /// run's descriptors: the median of the minute's samples.
    pub run_fds: u64,
    /// The children at the minute's last sample: count, RSS, descriptors.
    pub children: (usize, f64, u64),
    /// Every process at the minute's last sample.
    pub procs: Vec<Proc>,
    /// Submitted / done / dead / open, all kinds, cumulative at the minute's end.
    pub jobs: (u64, u64, u64, u64),
    /// High-priority chats answered this minute, their p50 and p99 (ms).
    pub high: (usize, f64, f64),
    /// Chats this minute: ok, limited (429), failed, crossed, all classes.
    pub chats: (u64, u64, u64, u64),
    /// The pool's loads that displaced a resident model, and every swap operation (loads,
    /// wakes, sleeps, stops), cumulative (from /metrics).
    pub swaps: (f64, f64),
    /// Deep health answers this minute: ready, not ready, absent, down.
    pub health: (u64, u64, u64, u64),
    /// The faults injected this minute.
    pub faults: Vec<String>,
}

/// The `q` quantile of `values` (nearest rank), 0 when empty.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// The minute's chat and health figures into `row`.
pub fn fill_from_minute(row: &mut Row, m: &Minute) {
    let lat = &m.chat[0].latencies_ms;
    row.high = (lat.len(), quantile(lat, 0.5), quantile(lat, 0.99));
    for c in &m.chat {
        row.chats.0 += c.ok;
        row.chats.1 += c.limited;
        row.chats.2 += c.failed;
        row.chats.3 += c.crossed;
    }
    for (_, h) in &m.health {
        match h {
            Health::Ready => row.health.0 += 1,
            Health::NotReady(_) => row.health.1 += 1,
            Health::Absent => row.health.2 += 1,
            Health::Down(_) => row.health.3 += 1,
        }
    }
}

/// The table's header.
pub const HEADER: &str = "min | run RSS MB (max) anon | run fds | kids n/RSS MB/fds | jobs sub/done/dead/open | \
high n p50/p99 ms | chat ok/429/fail/crossed | swaps displaced/ops | health ok/red/absent/down | faults";

/// A row as a line of the table.
pub fn line(r: &Row) -> String {
    format!(
        "{:>3} | {:>7.1} ({:>7.1}) {:>6.1} | {:>4} | {:>2}/{:>7.1}/{:>4} | {}/{}/{}/{} | {} {:.0}/{:.0} | {}/{}/{}/{} | {:.0}/{:.0} | {}/{}/{}/{} | {}",
        r.minute,
        r.run_rss_mb,
        r.run_rss_max_mb,
        r.run_anon_mb,
        r.run_fds,
        r.children.0,
        r.children.1,
        r.children.2,
        r.jobs.0,
        r.jobs.1,
        r.jobs.2,
        r.jobs.3,
        r.high.0,
        r.high.1,
        r.high.2,
        r.chats.0,
        r.chats.1,
        r.chats.2,
        r.chats.3,
        r.swaps.0,
        r.swaps.1,
        r.health.0,
        r.health.1,
        r.health.2,
        r.health.3,
        r.faults.join("; ")
    )
}

/// The CSV header.
pub const CSV_HEADER: &str = "minute,run_rss_mb,run_rss_max_mb,run_anon_mb,run_fds,children,children_rss_mb,children_fds,\
submitted,done,dead,open,high_n,high_p50_ms,high_p99_ms,chat_ok,chat_429,chat_failed,chat_crossed,\
swaps_displaced,swap_ops,health_ready,health_red,health_absent,health_down,faults";

/// A row as a CSV line.
pub fn csv(r: &Row) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{},{:.1},{:.1},{:.1},{},{},{:.1},{},{},{},{},{},{},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},\"{}\"",
        r.minute,
        r.run_rss_mb,
        r.run_rss_max_mb,
        r.run_anon_mb,
        r.run_fds,
        r.children.0,
        r.children.1,
        r.children.2,
        r.jobs.0,
        r.jobs.1,
        r.jobs.2,
        r.jobs.3,
        r.high.0,
        r.high.1,
        r.high.2,
        r.chats.0,
        r.chats.1,
        r.chats.2,
        r.chats.3,
        r.swaps.0,
        r.swaps.1,
        r.health.0,
        r.health.1,
        r.health.2,
        r.health.3,
        r.faults.join("; ").replace('"', "'")
    );
    s
}

/// A row as JSON (every process included).
pub fn json_row(r: &Row) -> Value {
    json!({
        "minute": r.minute,
        "run": {"rss_mb": r.run_rss_mb, "rss_max_mb": r.run_rss_max_mb, "anon_mb": r.run_anon_mb,
                "fds": r.run_fds},
        "processes": r.procs.iter().map(|p| json!({"pid": p.pid, "name": p.name,
            "rss_mb": p.rss_kb as f64 / 1024.0, "anon_mb": p.anon_kb as f64 / 1024.0, "fds": p.fds})).collect::<Vec<_>>(),
        "jobs": {"submitted": r.jobs.0, "done": r.jobs.1, "dead": r.jobs.2, "open": r.jobs.3},
        "high_priority": {"answered": r.high.0, "p50_ms": r.high.1, "p99_ms": r.high.2},
        "chat": {"ok": r.chats.0, "limited": r.chats.1, "failed": r.chats.2, "crossed": r.chats.3},
        "swaps": {"displaced": r.swaps.0, "operations": r.swaps.1},
        "health": {"ready": r.health.0, "red": r.health.1, "absent": r.health.2, "down": r.health.3},
        "faults": r.faults,
    })
}

/// A target: what, whether it was met (`None`: not checkable in this run), the figures.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its name.
    pub name: &'static str,
    /// Met, missed, or not checked.
    pub met: Option<bool>,
    /// The figures behind it.
    pub detail: String,
}

impl Target {
    /// Its line in the summary.
    pub fn line(&self) -> String {
        let verdict = match self.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not checked",
        };
        format!("{verdict:>11}  {}: {}", self.name, self.detail)
    }
}
