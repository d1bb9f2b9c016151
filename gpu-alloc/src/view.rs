//! One view of the GPUs, checked: the allocator's plan (which mode each GPU serves), the VRAM
//! ledger's leases, the GPUs' capacity and the memory their monitor reports used must agree at
//! every moment. [`audit`] is the check, a pure function over a [`Snapshot`]; [`Auditor`] runs
//! it every few seconds in a running system, counts the breaches that hold (across two audits:
//! a switch in progress books both modes for a moment; a lease not yet filled, for a load's
//! time), logs each with both views, and renders them for `/metrics` and the status page.
//!
//! The invariants, for every GPU:
//! 1. each lease's owner holds that GPU in the plan, or the GPU is switching to or from it
//!    (`lane:Q` is lane `Q`'s, `pool:M` the model pool's; other owners, the leases other
//!    processes take through the admin API, are not the plan's and are not checked here);
//! 2. the leases' sum fits the GPU's capacity;
//! 3. what the monitor reports used there, beyond what was used before this system ran (the
//!    driver's, other processes' at start: the baseline), matches the leases' sum within
//!    [`tolerance_mb`] (the larger of 256 MB and 5 % of the GPU): memory used that no lease
//!    accounts for is [`Breach::Unleased`] (a server that took more than it booked, or a
//!    process nobody booked for: the memory a lane's server counts on); a lease whose memory
//!    is not used is [`Breach::Unused`] once it lasts longer than a load
//!    ([`Auditor::UNUSED_GRACE`]: a server that died with its lease kept). With NVML, used is
//!    what the driver reports; on a simulated fleet, what was loaded there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use maud::{Render, html};

use crate::ledger::{LeaseRow, VramLedger};
use crate::monitor::GpuMonitor;

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

/// Everything one audit looks at, taken at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// The allocator's plan (a GPU missing from it is not the allocator's: checked for
    /// capacity and memory only).
    pub plan: &'a [GpuPlan],
    /// Each GPU's capacity, MB (the ledger's).
    pub capacity_mb: &'a BTreeMap<u32, u64>,
    /// The live leases.
    pub leases: &'a [LeaseRow],
    /// Per GPU, what the monitor reports used beyond the baseline, MB; `None` without a
    /// monitor (invariant 3 is then not checked).
    pub used_mb: Option<&'a BTreeMap<u32, u64>>,
    /// Whether the model pool is one of the plan's modes (`[allocator.pool]`): only then are its
    /// leases (`pool:M`) held to the GPUs the plan gives it. A pool outside the plan shares the
    /// lanes' GPUs through the ledger, by design.
    pub pool_in_plan: bool,
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
    /// More used than leased, beyond the tolerance.
    Unleased {
        /// The GPU.
        gpu: u32,
        /// MB used beyond the baseline.
        used_mb: u64,
        /// MB leased.
        leased_mb: u64,
    },
    /// More leased than used, beyond the tolerance.
    Unused {
        /// The GPU.
        gpu: u32,
        /// MB used beyond the baseline.
        used_mb: u64,
        /// MB leased.
        leased_mb: u64,
    },
}

impl Breach {
    /// Every kind, in the order `/metrics` lists them.
    pub const KINDS: [&'static str; 4] = ["misplaced", "overbooked", "unleased", "unused"];

    /// Its kind, the `kind` label of `horos_gpu_view_breaches_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            Breach::Misplaced { .. } => "misplaced",
            Breach::Overbooked { .. } => "overbooked",
            Breach::Unleased { .. } => "unleased",
            Breach::Unused { .. } => "unused",
        }
    }

    /// What identifies it while it lasts (its figures may move meanwhile): kind, GPU, owner.
    fn key(&self) -> (&'static str, u32, String) {
        match self {
            Breach::Misplaced { gpu, owner, .. } => (self.kind(), *gpu, owner.clone()),
            Breach::Overbooked { gpu, .. }
            | Breach::Unleased { gpu, .. }
            | Breach::Unused { gpu, .. } => (self.kind(), *gpu, String::new()),
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
            Breach::Unleased {
                gpu,
                used_mb,
                leased_mb,
            } => write!(
                f,
                "GPU {gpu}: {used_mb} MB used, but only {leased_mb} MB leased (a server took \
                 more than it booked, or a process nobody booked for holds memory)"
            ),
            Breach::Unused {
                gpu,
                used_mb,
                leased_mb,
            } => write!(
                f,
                "GPU {gpu}: {leased_mb} MB leased, but only {used_mb} MB used (a lease kept by \
                 a server that is gone)"
            ),
        }
    }
}

/// How far used and leased memory may differ on a GPU of `capacity_mb` before it is a breach:
/// the larger of 256 MB and 5 % of the GPU (a server's estimate against what it allocates, a
/// runtime's own buffers).
pub fn tolerance_mb(capacity_mb: u64) -> u64 {
    (capacity_mb / 20).max(256)
}

/// The mode a lease's owner belongs to (`None`: an owner outside the plan).
fn mode_of(owner: &str) -> Option<&str> {
    if let Some(q) = owner.strip_prefix("lane:") {
        return Some(q);
    }
    owner.strip_prefix("pool:").map(|_| POOL_MODE)
}

/// The invariants over one snapshot.
pub fn audit(s: &Snapshot<'_>) -> Vec<Breach> {
    let mut out = BTreeSet::new();
    for l in s.leases {
        let (Some(mode), Some(p)) = (mode_of(&l.owner), s.plan.iter().find(|p| p.gpu == l.gpu))
        else {
            continue;
        };
        if mode == POOL_MODE && !s.pool_in_plan {
            continue;
        }
        if p.mode != mode && p.switching_to.as_deref() != Some(mode) {
            out.insert(Breach::Misplaced {
                gpu: l.gpu,
                owner: l.owner.clone(),
                mode: p.mode.clone(),
            });
        }
    }
    let mut booked: BTreeMap<u32, u64> = s.capacity_mb.keys().map(|&g| (g, 0)).collect();
    for l in s.leases {
        *booked.entry(l.gpu).or_default() += l.mb;
    }
    for (&gpu, &mb) in &booked {
        let Some(&cap) = s.capacity_mb.get(&gpu) else {
            continue;
        };
        if mb > cap {
            out.insert(Breach::Overbooked {
                gpu,
                booked_mb: mb,
                capacity_mb: cap,
            });
        }
        let Some(&used) = s.used_mb.and_then(|u| u.get(&gpu)) else {
            continue;
        };
        let tol = tolerance_mb(cap);
        if used > mb + tol {
            out.insert(Breach::Unleased {
                gpu,
                used_mb: used,
                leased_mb: mb,
            });
        } else if mb > used + tol {
            out.insert(Breach::Unused {
                gpu,
                used_mb: used,
                leased_mb: mb,
            });
        }
    }
    out.into_iter().collect()
}

/// The allocator's plan as it is carried out, for the audit: whoever reports the modes (the
/// executor's reporter) sets each GPU's. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PlanBook(
    Arc<Mutex<BTreeMap<u32, GpuPlan>>>,
    Arc<std::sync::atomic::AtomicBool>,
);

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

    /// The model pool is one of the plan's modes (`[allocator.pool]`): its leases are held to
    /// the GPUs given to it ([`Snapshot::pool_in_plan`]).
    pub fn set_pool_in_plan(&self) {
        self.1.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`PlanBook::set_pool_in_plan`] was called.
    pub fn pool_in_plan(&self) -> bool {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every GPU's entry.
    pub fn read(&self) -> Vec<GpuPlan> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.values().cloned().collect()
    }
}

/// Runs [`audit`] on snapshots and keeps the count of breaches that hold: seen in two audits in
/// a row (one seen once is a switch caught half-way, and is not counted), and for
/// [`Breach::Unused`], seen for longer than [`Auditor::UNUSED_GRACE`] (a server loading fills
/// its lease meanwhile).
#[derive(Debug)]
pub struct Auditor {
    state: Mutex<AuditState>,
    unused_grace: Duration,
}

impl Default for Auditor {
    fn default() -> Self {
        Self::new()
    }
}

type Key = (&'static str, u32, String);

#[derive(Debug, Default)]
struct AuditState {
    /// Breaches seen in the last audit, with when each was first seen (in a row).
    seen: BTreeMap<Key, Instant>,
    /// Breaches counted (each once while it lasts).
    counted: BTreeSet<Key>,
    /// Counted breaches by kind, since start.
    totals: BTreeMap<&'static str, u64>,
    /// The breaches held now.
    current: Vec<Breach>,
    /// Per GPU, what was used before: the first reading, less the leases then.
    baseline: Option<BTreeMap<u32, u64>>,
}

impl Auditor {
    /// How long a lease may stay unused before it is a breach: longer than a large model's
    /// load takes.
    pub const UNUSED_GRACE: Duration = Duration::from_secs(300);

    /// An auditor with nothing counted.
    pub fn new() -> Self {
        Self {
            state: Mutex::default(),
            unused_grace: Self::UNUSED_GRACE,
        }
    }

    /// The same, with another grace for unused leases (tests, slow loads).
    pub fn with_unused_grace(mut self, grace: Duration) -> Self {
        self.unused_grace = grace;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AuditState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Audits one snapshot, taken at `now`; returns the breaches newly counted. Its `used_mb`
    /// is what the monitor reports: the first one the auditor sees, less the leases then, is
    /// the baseline (the driver's memory, other processes'), taken off every later reading.
    pub fn observe(&self, snapshot: &Snapshot<'_>, now: Instant) -> Vec<Breach> {
        let mut st = self.lock();
        let beyond: Option<BTreeMap<u32, u64>> = snapshot.used_mb.map(|used| {
            let base = st.baseline.get_or_insert_with(|| {
                used.iter()
                    .map(|(&gpu, &mb)| {
                        let leased: u64 = snapshot
                            .leases
                            .iter()
                            .filter(|l| l.gpu == gpu)
                            .map(|l| l.mb)
                            .sum();
                        (gpu, mb.saturating_sub(leased))
                    })
                    .collect()
            });
            used.iter()
                .map(|(&gpu, &mb)| (gpu, mb.saturating_sub(base.get(&gpu).copied().unwrap_or(0))))
                .collect()
        });
        let found = audit(&Snapshot {
            used_mb: beyond.as_ref(),
            ..*snapshot
        });
        let mut seen = BTreeMap::new();
        let mut held = Vec::new();
        for b in found {
            let key = b.key();
            let since = st.seen.get(&key).copied();
            seen.insert(key, since.unwrap_or(now));
            let holds = match (&b, since) {
                (_, None) => false,
                (Breach::Unused { .. }, Some(t)) => now.duration_since(t) >= self.unused_grace,
                (_, Some(_)) => true,
            };
            if holds {
                held.push(b);
            }
        }
        let mut new = Vec::new();
        for b in &held {
            if st.counted.insert(b.key()) {
                *st.totals.entry(b.kind()).or_default() += 1;
                new.push(b.clone());
            }
        }
        // A breach that ended may be counted again if it comes back.
        let held_keys: BTreeSet<Key> = held.iter().map(Breach::key).collect();
        st.counted.retain(|k| held_keys.contains(k));
        st.current = held;
        st.seen = seen;
        new
    }

    /// Audits `plan` against `ledger` (and what `monitor` reports used, where there is one)
    /// every `every`, until the task is aborted; each breach newly counted is logged with
    /// both views (the plan, the leases, the memory used).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn spawn(
        self: Arc<Self>,
        ledger: Arc<VramLedger>,
        monitor: Option<Arc<dyn GpuMonitor>>,
        plan: PlanBook,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let (l, m) = (Arc::clone(&ledger), monitor.clone());
                let read = tokio::task::spawn_blocking(move || {
                    let (leases, capacity) = (l.leases()?, l.capacities()?);
                    // A monitor that does not answer leaves invariant 3 unchecked this time.
                    let used = m.and_then(|m| m.sample().ok()).map(|samples| {
                        samples
                            .iter()
                            .map(|s| (s.index, s.memory_used_mb))
                            .collect::<BTreeMap<u32, u64>>()
                    });
                    Ok::<_, crate::ledger::LedgerError>((leases, capacity, used))
                })
                .await;
                let (leases, capacity, used) = match read {
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
                let snapshot = Snapshot {
                    plan: &p,
                    capacity_mb: &capacity,
                    leases: &leases,
                    used_mb: used.as_ref(),
                    pool_in_plan: plan.pool_in_plan(),
                };
                for b in self.observe(&snapshot, Instant::now()) {
                    tracing::warn!(breach = %b, kind = b.kind(), plan = ?p, leases = ?leases, used_mb = ?used, "the GPU view's invariants are broken");
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
             the leases, the capacity and the memory used disagree) that held.\n\
             # TYPE horos_gpu_view_breaches_total counter\n",
        );
        for kind in Breach::KINDS {
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
        html! {
            h2 { "GPU view" }
            @if current.is_empty() {
                p {
                    "The allocator's plan, the VRAM leases, the GPUs' capacity and the memory \
                     used agree (" (total) " breaches since start)."
                }
            } @else {
                p {
                    strong { (current.len()) " breach(es) held now" }
                    " (" (total) " since start):"
                }
                ul {
                    @for b in &current { li { (b.to_string()) } }
                }
            }
        }
        .render_to(out);
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

/// The GPU view as a part of the deep health check (`/health/ready`): unhealthy while a breach
/// holds (the plan, the leases, the capacity or the memory used disagree), each named.
#[async_trait::async_trait]
impl horos_server_control::HealthCheck for Auditor {
    fn part(&self) -> String {
        "gpu_view".to_owned()
    }

    async fn check(&self) -> Result<(), horos_server_control::Unhealthy> {
        let held = self.current();
        if held.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = held.iter().map(ToString::to_string).collect();
        Err(horos_server_control::Unhealthy(named.join("; ")))
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

    fn snap<'a>(
        p: &'a [GpuPlan],
        cap: &'a BTreeMap<u32, u64>,
        leases: &'a [LeaseRow],
        used: Option<&'a BTreeMap<u32, u64>>,
    ) -> Snapshot<'a> {
        Snapshot {
            plan: p,
            capacity_mb: cap,
            leases,
            used_mb: used,
            pool_in_plan: true,
        }
    }

    #[test]
    fn a_pooled_model_on_the_lanes_gpu_is_a_breach_and_on_the_pools_it_is_not() {
        let cap = BTreeMap::from([(0, 4096), (1, 4096)]);
        let p = [plan(0, "chat", None), plan(1, "pool", None)];
        // Today's demo before the fix: minilm beside the chat lane.
        let bad = [lease("lane:chat", 0, 192), lease("pool:minilm", 0, 300)];
        assert_eq!(
            audit(&snap(&p, &cap, &bad, None)),
            [Breach::Misplaced {
                gpu: 0,
                owner: "pool:minilm".into(),
                mode: "chat".into()
            }]
        );
        let good = [lease("lane:chat", 0, 192), lease("pool:minilm", 1, 300)];
        assert!(audit(&snap(&p, &cap, &good, None)).is_empty());
        // A pool outside the plan shares the lanes' GPUs through the ledger.
        let outside = Snapshot {
            pool_in_plan: false,
            ..snap(&p, &cap, &bad, None)
        };
        assert!(audit(&outside).is_empty());
        // Another process's lease is not the plan's.
        assert!(audit(&snap(&p, &cap, &[lease("train", 0, 1000)], None)).is_empty());
        // A switch in progress books both modes.
        let switching = [plan(0, "chat", Some("pool")), plan(1, "pool", None)];
        assert!(audit(&snap(&switching, &cap, &bad, None)).is_empty());
        // Over the capacity.
        let over = [lease("lane:chat", 0, 4000), lease("train", 0, 200)];
        assert_eq!(audit(&snap(&p, &cap, &over, None))[0].kind(), "overbooked");
    }

    #[test]
    fn memory_used_must_match_the_leases_within_the_tolerance() {
        let cap = BTreeMap::from([(0, 24_000), (1, 24_000)]);
        let p = [plan(0, "chat", None), plan(1, "pool", None)];
        let leases = [lease("lane:chat", 0, 8000), lease("pool:minilm", 1, 300)];
        assert_eq!(tolerance_mb(24_000), 1200);
        assert_eq!(tolerance_mb(4096), 256);
        // Within the tolerance either way: no breach.
        let near = BTreeMap::from([(0, 8900), (1, 0)]);
        assert!(audit(&snap(&p, &cap, &leases, Some(&near))).is_empty());
        // A server that took 90 % of GPU 0 against an 8 GB lease; minilm's lease on GPU 1
        // with nothing loaded there.
        let off = BTreeMap::from([(0, 21_600), (1, 0)]);
        assert_eq!(
            audit(&snap(&p, &cap, &leases, Some(&off))),
            [Breach::Unleased {
                gpu: 0,
                used_mb: 21_600,
                leased_mb: 8000
            }],
            "300 MB is within GPU 1's 1,200 MB tolerance"
        );
        let small = BTreeMap::from([(0, 4096)]);
        let gone = [lease("lane:chat", 0, 2000)];
        let nothing = BTreeMap::from([(0, 0)]);
        assert_eq!(
            audit(&snap(&p, &small, &gone, Some(&nothing)))[0].kind(),
            "unused"
        );
    }

    #[test]
    fn the_auditor_takes_the_first_reading_as_the_baseline_and_waits_out_loads() {
        let a = Auditor::new().with_unused_grace(Duration::from_secs(60));
        let cap = BTreeMap::from([(0, 4096)]);
        let p = [plan(0, "pool", None)];
        let t0 = Instant::now();
        // The driver's 300 MB before anything ran.
        let start = BTreeMap::from([(0, 300)]);
        assert!(a.observe(&snap(&p, &cap, &[], Some(&start)), t0).is_empty());
        // A model books 2 GB and loads for a while: not a breach before the grace.
        let booked = [lease("pool:big", 0, 2000)];
        for s in [1, 2, 30] {
            let at = t0 + Duration::from_secs(s);
            assert!(
                a.observe(&snap(&p, &cap, &booked, Some(&start)), at)
                    .is_empty()
            );
        }
        // Loaded: used follows the lease, above the baseline.
        let loaded = BTreeMap::from([(0, 2300)]);
        let at = t0 + Duration::from_secs(40);
        assert!(
            a.observe(&snap(&p, &cap, &booked, Some(&loaded)), at)
                .is_empty()
        );
        // Its server dies, the lease stays: counted once the grace has passed since first seen.
        for s in [41, 60, 100] {
            let at = t0 + Duration::from_secs(s);
            assert!(
                a.observe(&snap(&p, &cap, &booked, Some(&start)), at)
                    .is_empty()
            );
        }
        let at = t0 + Duration::from_secs(102);
        let counted = a.observe(&snap(&p, &cap, &booked, Some(&start)), at);
        assert_eq!(counted.len(), 1, "{counted:?}");
        assert_eq!(counted[0].kind(), "unused");
        // A process nobody booked for: counted at its second sighting.
        let foreign = BTreeMap::from([(0, 300 + 2000 + 900)]);
        let at = t0 + Duration::from_secs(103);
        assert!(
            a.observe(&snap(&p, &cap, &booked, Some(&foreign)), at)
                .is_empty()
        );
        let at = t0 + Duration::from_secs(104);
        let counted = a.observe(&snap(&p, &cap, &booked, Some(&foreign)), at);
        assert_eq!(counted.len(), 1, "{counted:?}");
        assert_eq!(counted[0].kind(), "unleased");
        let mut m = String::new();
        a.render(&mut m);
        assert!(
            m.contains("horos_gpu_view_breaches_total{kind=\"unused\"} 1"),
            "{m}"
        );
        assert!(
            m.contains("horos_gpu_view_breaches_total{kind=\"unleased\"} 1"),
            "{m}"
        );
    }

    #[test]
    fn a_breach_is_counted_once_it_holds_across_two_audits() {
        let a = Auditor::new();
        let cap = BTreeMap::from([(0, 4096)]);
        let p = [plan(0, "chat", None)];
        let bad = [lease("pool:minilm", 0, 300)];
        let t = Instant::now();
        let see = |l: &[LeaseRow]| a.observe(&snap(&p, &cap, l, None), t);
        assert!(see(&bad).is_empty(), "seen once: not yet");
        assert_eq!(see(&bad).len(), 1);
        assert!(see(&bad).is_empty(), "counted once while it lasts");
        assert_eq!(a.total(), 1);
        assert_eq!(a.current().len(), 1);
        assert!(see(&[]).is_empty());
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

    #[tokio::test]
    async fn a_breach_held_makes_the_deep_health_check_fail() {
        use horos_server_control::HealthCheck;
        let a = Auditor::new();
        let cap = BTreeMap::from([(0, 4096)]);
        let p = [plan(0, "chat", None)];
        let bad = [lease("pool:minilm", 0, 300)];
        let t = Instant::now();
        assert!(a.check().await.is_ok());
        a.observe(&snap(&p, &cap, &bad, None), t);
        assert!(a.check().await.is_ok(), "seen once: not held yet");
        a.observe(&snap(&p, &cap, &bad, None), t);
        let why = a.check().await.unwrap_err().0;
        assert!(why.contains("pool:minilm holds memory there"), "{why}");
        a.observe(&snap(&p, &cap, &[], None), t);
        assert!(a.check().await.is_ok());
    }
}
