//! One view of the GPUs, checked: the allocator's plan (which mode each GPU serves), the VRAM
//! ledger's leases and the GPUs' capacity must agree at every moment. [`audit`] is the check,
//! a pure function over a snapshot; [`Auditor`] runs it every few seconds in a running system,
//! counts the breaches that hold across two audits (a switch in progress books both modes for a
//! moment), logs each with both views, and renders them for `/metrics`.
//!
//! The invariants, for every GPU:
//! 1. each lease's owner holds that GPU in the plan, or the GPU is switching to or from it
//!    (`lane:Q` is lane `Q`'s, `pool:M` the model pool's; other owners, the leases other
//!    processes take through the admin API, are not the plan's and are not checked here);
//! 2. the leases' sum fits the GPU's capacity.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ledger::{LeaseRow, VramLedger};

/// The mode the pool's leases belong to (horos-modes' `POOL_MODE`).
pub const POOL_MODE: &str = "pool";

/// What one GPU serves in the allocator's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// The GPU.
    pub gpu: u32,
    /// The mode it serves (a lane's queue, or [`POOL_MODE`]).
    pub mode: String,
    /// The mode it is switching to, while a switch drains.
    pub switching_to: Option<String>,
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Breach {
    /// A lease on a GPU whose plan gives it to another mode.
    Misplaced {
        /// The GPU.
        gpu: u32,
        /// The lease's owner (`lane:Q`, `pool:M`).
        owner: String,
        /// What the plan says the GPU serves.
        mode: String,
    },
    /// More booked than the GPU holds.
    Overbooked {
        /// The GPU.
        gpu: u32,
        /// MB leased.
        booked_mb: u64,
        /// MB it holds.
        capacity_mb: u64,
    },
}

impl Breach {
    /// Its kind, the `kind` label of `horos_gpu_view_breaches_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            Breach::Misplaced { .. } => "misplaced",
            Breach::Overbooked { .. } => "overbooked",
        }
    }
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Breach::Misplaced { gpu, owner, mode } => write!(
                f,
                "GPU {gpu}: {owner} holds memory there, but the plan gives the GPU to {mode}"
            ),
            Breach::Overbooked {
                gpu,
                booked_mb,
                capacity_mb,
            } => write!(
                f,
                "GPU {gpu}: {booked_mb} MB leased, more than its {capacity_mb} MB"
            ),
        }
    }
}

/// The mode a lease's owner belongs to (`None`: an owner outside the plan).
fn mode_of(owner: &str) -> Option<&str> {
    if let Some(q) = owner.strip_prefix("lane:") {
        return Some(q);
    }
    owner.strip_prefix("pool:").map(|_| POOL_MODE)
}

/// The invariants over one snapshot: the plan, each GPU's capacity (MB), the live leases.
/// A GPU missing from the plan (not the allocator's) is checked for capacity only.
pub fn audit(
    plan: &[GpuPlan],
    capacity_mb: &BTreeMap<u32, u64>,
    leases: &[LeaseRow],
) -> Vec<Breach> {
    let mut out = BTreeSet::new();
    for l in leases {
        let (Some(mode), Some(p)) = (mode_of(&l.owner), plan.iter().find(|p| p.gpu == l.gpu))
        else {
            continue;
        };
        if p.mode != mode && p.switching_to.as_deref() != Some(mode) {
            out.insert(Breach::Misplaced {
                gpu: l.gpu,
                owner: l.owner.clone(),
                mode: p.mode.clone(),
            });
        }
    }
    let mut booked: BTreeMap<u32, u64> = BTreeMap::new();
    for l in leases {
        *booked.entry(l.gpu).or_default() += l.mb;
    }
    for (gpu, mb) in booked {
        if let Some(&cap) = capacity_mb.get(&gpu)
            && mb > cap
        {
            out.insert(Breach::Overbooked {
                gpu,
                booked_mb: mb,
                capacity_mb: cap,
            });
        }
    }
    out.into_iter().collect()
}

/// The allocator's plan as it is carried out, for the audit: whoever reports the modes (the
/// executor's reporter) sets each GPU's. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PlanBook(Arc<Mutex<BTreeMap<u32, GpuPlan>>>);

impl PlanBook {
    /// An empty plan (no GPU is the allocator's yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// GPU `gpu` serves `mode` (switching to `switching_to`, while a switch drains).
    pub fn set(&self, gpu: u32, mode: &str, switching_to: Option<&str>) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(
            gpu,
            GpuPlan {
                gpu,
                mode: mode.to_owned(),
                switching_to: switching_to.map(str::to_owned),
            },
        );
    }

    /// Every GPU's entry.
    pub fn read(&self) -> Vec<GpuPlan> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.values().cloned().collect()
    }
}

/// Runs [`audit`] on snapshots and keeps the count of breaches that held across two audits in
/// a row (one seen once is a switch caught half-way, and is not counted).
#[derive(Debug, Default)]
pub struct Auditor {
    state: Mutex<AuditState>,
}

#[derive(Debug, Default)]
struct AuditState {
    /// Breaches seen in the last audit.
    last: BTreeSet<Breach>,
    /// Breaches counted (each once while it lasts).
    counted: BTreeSet<Breach>,
    /// Counted breaches by kind, since start.
    totals: BTreeMap<&'static str, u64>,
    /// The breaches held now.
    current: Vec<Breach>,
}

impl Auditor {
    /// An auditor with nothing counted.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AuditState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Audits one snapshot; returns the breaches newly counted (held since the last audit).
    pub fn observe(
        &self,
        plan: &[GpuPlan],
        capacity_mb: &BTreeMap<u32, u64>,
        leases: &[LeaseRow],
    ) -> Vec<Breach> {
        let now: BTreeSet<Breach> = audit(plan, capacity_mb, leases).into_iter().collect();
        let mut st = self.lock();
        let held: Vec<Breach> = now.intersection(&st.last).cloned().collect();
        let mut new = Vec::new();
        for b in &held {
            if st.counted.insert(b.clone()) {
                *st.totals.entry(b.kind()).or_default() += 1;
                new.push(b.clone());
            }
        }
        // A breach that ended may be counted again if it comes back.
        let held_set: BTreeSet<Breach> = held.iter().cloned().collect();
        st.counted.retain(|b| held_set.contains(b));
        st.current = held;
        st.last = now;
        new
    }

    /// Audits `plan` against `ledger` every `every`, until the task is aborted; each breach
    /// newly counted is logged with both views (the plan, the leases).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn spawn(
        self: Arc<Self>,
        ledger: Arc<VramLedger>,
        plan: PlanBook,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let l = Arc::clone(&ledger);
                let read = tokio::task::spawn_blocking(move || {
                    Ok::<_, crate::ledger::LedgerError>((l.leases()?, l.capacities()?))
                })
                .await;
                let (leases, capacity) = match read {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "GPU view audit: the ledger was not read");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "GPU view audit failed");
                        continue;
                    }
                };
                let p = plan.read();
                for b in self.observe(&p, &capacity, &leases) {
                    tracing::warn!(breach = %b, kind = b.kind(), plan = ?p, leases = ?leases, "the GPU view's invariants are broken");
                }
            }
        })
    }

    /// The breaches that hold now.
    pub fn current(&self) -> Vec<Breach> {
        self.lock().current.clone()
    }

    /// Breaches counted since start, all kinds.
    pub fn total(&self) -> u64 {
        self.lock().totals.values().sum()
    }

    /// `horos_gpu_view_breaches_total{kind}` (every kind, zeros included) and
    /// `horos_gpu_view_breaches` (held now), in Prometheus' text format.
    pub fn render(&self, out: &mut String) {
        let st = self.lock();
        out.push_str(
            "# HELP horos_gpu_view_breaches_total Breaches of the GPU view's invariants (the plan, \
             the leases and the capacity disagree) that held across two audits.\n\
             # TYPE horos_gpu_view_breaches_total counter\n",
        );
        for kind in ["misplaced", "overbooked"] {
            let n = st.totals.get(kind).copied().unwrap_or(0);
            let _ = writeln!(out, "horos_gpu_view_breaches_total{{kind=\"{kind}\"}} {n}");
        }
        out.push_str(
            "# HELP horos_gpu_view_breaches Breaches of the GPU view's invariants held now.\n\
             # TYPE horos_gpu_view_breaches gauge\n",
        );
        let _ = writeln!(out, "horos_gpu_view_breaches {}", st.current.len());
    }
}

/// The GPU view on the status page: "the plan and the leases agree", or each breach held now,
/// with the count since start (and the same under `sections.gpu_view` of `/api/v1/status`).
impl horos_server_control::StatusSection for Auditor {
    fn render_html(&self, out: &mut String) {
        let (current, total) = (self.current(), self.total());
        out.push_str("<h2>GPU view</h2>");
        if current.is_empty() {
            let _ = write!(
                out,
                "<p>The allocator's plan, the VRAM leases and the GPUs' capacity agree \
                 ({total} breaches since start).</p>"
            );
            return;
        }
        let _ = write!(
            out,
            "<p><strong>{} breach(es) held now</strong> ({total} since start):</p><ul>",
            current.len()
        );
        for b in &current {
            let _ = write!(
                out,
                "<li>{}</li>",
                horos_server_control::html_escape(&b.to_string())
            );
        }
        out.push_str("</ul>");
    }

    fn to_json(&self) -> Option<(String, serde_json::Value)> {
        let current: Vec<serde_json::Value> = self
            .current()
            .iter()
            .map(|b| serde_json::json!({"kind": b.kind(), "breach": b.to_string()}))
            .collect();
        Some((
            "gpu_view".to_owned(),
            serde_json::json!({"breaches_total": self.total(), "current": current}),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn lease(owner: &str, gpu: u32, mb: u64) -> LeaseRow {
        LeaseRow {
            id: format!("{owner}-{gpu}"),
            owner: owner.to_owned(),
            pid: None,
            gpu,
            mb,
            expires_at_ms: i64::MAX,
        }
    }

    fn plan(gpu: u32, mode: &str, to: Option<&str>) -> GpuPlan {
        GpuPlan {
            gpu,
            mode: mode.to_owned(),
            switching_to: to.map(str::to_owned),
        }
    }

    #[test]
    fn a_pooled_model_on_the_lanes_gpu_is_a_breach_and_on_the_pools_it_is_not() {
        let cap = BTreeMap::from([(0, 4096), (1, 4096)]);
        let p = [plan(0, "chat", None), plan(1, "pool", None)];
        // Today's demo before the fix: minilm beside the chat lane.
        let bad = [lease("lane:chat", 0, 192), lease("pool:minilm", 0, 300)];
        assert_eq!(
            audit(&p, &cap, &bad),
            [Breach::Misplaced {
                gpu: 0,
                owner: "pool:minilm".into(),
                mode: "chat".into()
            }]
        );
        let good = [lease("lane:chat", 0, 192), lease("pool:minilm", 1, 300)];
        assert!(audit(&p, &cap, &good).is_empty());
        // Another process's lease is not the plan's.
        assert!(audit(&p, &cap, &[lease("train", 0, 1000)]).is_empty());
        // A switch in progress books both modes.
        let switching = [plan(0, "chat", Some("pool")), plan(1, "pool", None)];
        assert!(audit(&switching, &cap, &bad).is_empty());
        // Over the capacity.
        let over = [lease("lane:chat", 0, 4000), lease("train", 0, 200)];
        assert_eq!(audit(&p, &cap, &over)[0].kind(), "overbooked");
    }

    #[test]
    fn a_breach_is_counted_once_it_holds_across_two_audits() {
        let a = Auditor::new();
        let cap = BTreeMap::from([(0, 4096)]);
        let p = [plan(0, "chat", None)];
        let bad = [lease("pool:minilm", 0, 300)];
        assert!(a.observe(&p, &cap, &bad).is_empty(), "seen once: not yet");
        assert_eq!(a.observe(&p, &cap, &bad).len(), 1);
        assert!(
            a.observe(&p, &cap, &bad).is_empty(),
            "counted once while it lasts"
        );
        assert_eq!(a.total(), 1);
        assert_eq!(a.current().len(), 1);
        assert!(a.observe(&p, &cap, &[]).is_empty());
        assert!(a.current().is_empty());
        let mut page = String::new();
        horos_server_control::StatusSection::render_html(&a, &mut page);
        assert!(page.contains("agree (1 breaches since start)"), "{page}");
        let mut m = String::new();
        a.render(&mut m);
        assert!(
            m.contains("horos_gpu_view_breaches_total{kind=\"misplaced\"} 1"),
            "{m}"
        );
        assert!(m.contains("horos_gpu_view_breaches 0"), "{m}");
    }
}
