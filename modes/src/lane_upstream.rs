//! The lanes a mode executor switches, as one of a gateway's upstreams (the seam's
//! [`UpstreamPool`]): a lane's model is
//! ready while its lane is served; a request for it while the lane is parked waits, and counts
//! as the lane's demand (the allocator weighs it with the lane's queue) until the lane is
//! served or the wait is over. After each request the lane stays warm (its last GPU is not
//! switched away) for its `stay_warm_s`, or a request's own `keep_alive`. A GPU leaving a lane
//! waits for the coordinator's requests running on that lane's server, as for its feeder batch
//! ([`RequestGate`]): a switch never cuts a request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use horos_server_control::{
    Demand, Gate, KeepWarm, Readiness, SlotState, SlotView, UpstreamError, UpstreamLease,
    UpstreamPool,
};

/// Requests waiting for a lane outside its queue.
#[derive(Default)]
pub struct Waiting {
    since: Mutex<BTreeMap<u64, Instant>>,
    next: AtomicU64,
}

impl Waiting {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Instant>> {
        self.since.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Demand for Waiting {
    fn waiting(&self) -> (usize, f64) {
        let w = self.lock();
        let oldest = w.values().min().map_or(0.0, |t| t.elapsed().as_secs_f64());
        (w.len(), oldest)
    }
}

/// How long a lane stays served after its requests.
pub struct Warmth {
    until: Mutex<Option<Instant>>,
    stay_warm: Duration,
}

impl Warmth {
    fn until(&self) -> MutexGuard<'_, Option<Instant>> {
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request ended: warm for `stay_warm` from now, unless already warm longer.
    fn touch(&self) {
        if self.stay_warm.is_zero() {
            return;
        }
        let until = Instant::now() + self.stay_warm;
        let mut u = self.until();
        *u = Some(u.map_or(until, |t| t.max(until)));
    }
}

impl KeepWarm for Warmth {
    fn warm_for_s(&self) -> f64 {
        self.until().map_or(0.0, |t| {
            t.saturating_duration_since(Instant::now()).as_secs_f64()
        })
    }
}

/// Touches the lane's warmth when the request's lease is dropped (the request ended).
struct WarmAfter(Arc<Warmth>);

impl Drop for WarmAfter {
    fn drop(&mut self) {
        self.0.touch();
    }
}

/// One request counted as waiting until dropped (a caller that leaves stops counting).
struct Waiter(Arc<Waiting>, u64);

impl Waiter {
    fn new(w: &Arc<Waiting>) -> Self {
        let id = w.next.fetch_add(1, Ordering::Relaxed);
        w.lock().insert(id, Instant::now());
        Self(Arc::clone(w), id)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

/// A lane instance's gate as the executor sees it: the feeder's gate, plus the coordinator's
/// requests running on the instance's server. Busy while either runs, so a switch closes the
/// gate, waits for both, and only then stops the server.
pub struct RequestGate {
    lane: Arc<dyn Gate>,
    requests: AtomicUsize,
}

impl RequestGate {
    /// Wraps the lane's gate.
    pub fn new(lane: Arc<dyn Gate>) -> Self {
        Self {
            lane,
            requests: AtomicUsize::new(0),
        }
    }

    /// Counts a request on the instance if its gate is open. The count is raised before the gate
    /// is read (as the feeder marks a batch): an executor that closed the gate and then saw no
    /// request is never followed by one starting.
    fn enter(self: &Arc<Self>) -> Option<InFlight> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(Arc::clone(self));
        self.lane.is_open().then_some(guard)
    }
}

/// A coordinator request running on an instance: uncounted when dropped.
struct InFlight(Arc<RequestGate>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Gate for RequestGate {
    fn open(&self) {
        self.lane.open();
    }
    fn close(&self) {
        self.lane.close();
    }
    fn is_open(&self) -> bool {
        self.lane.is_open()
    }
    fn is_busy(&self) -> bool {
        self.lane.is_busy() || self.requests.load(Ordering::SeqCst) > 0
    }
    async fn wait_idle(&self) {
        self.lane.wait_idle().await;
        while self.requests.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    fn batch_remaining_s(&self) -> Option<f64> {
        self.lane.batch_remaining_s()
    }
}

/// One lane's model: the lane's server instances (one per GPU that may serve it), each open
/// while its GPU serves the lane.
struct LaneModel {
    instances: Vec<(String, Arc<RequestGate>)>,
    queue: String,
    waiting: Arc<Waiting>,
    warmth: Arc<Warmth>,
    /// Spreads requests over the open instances.
    next: AtomicU64,
}

impl LaneModel {
    /// An instance being served (in turn when several are), with the request counted on it.
    fn open(&self) -> Option<(&str, InFlight)> {
        let open: Vec<&(String, Arc<RequestGate>)> =
            self.instances.iter().filter(|(_, g)| g.is_open()).collect();
        if open.is_empty() {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        // Its gate may close between the look and the count: then try the others.
        (0..open.len()).find_map(|i| {
            let (url, gate) = open[(turn + i) % open.len()];
            gate.enter().map(|held| (url.as_str(), held))
        })
    }

    fn is_open(&self) -> bool {
        self.instances.iter().any(|(_, g)| g.is_open())
    }
}

/// The switched lanes' models.
pub struct LaneUpstream {
    models: BTreeMap<String, LaneModel>,
    max_wait: Duration,
}

impl LaneUpstream {
    /// No lane yet; a request waits at most `max_wait` for its lane to be served.
    pub fn new(max_wait: Duration) -> Self {
        Self {
            models: BTreeMap::new(),
            max_wait,
        }
    }

    /// Adds the lane `queue` serving `model` on its `instances` (URL, and the gate that is open
    /// while a GPU serves that instance), kept warm `stay_warm` after each request; returns
    /// the counter of its waiting requests and its warmth, for the allocator.
    pub fn lane(
        &mut self,
        model: &str,
        queue: &str,
        instances: Vec<(String, Arc<RequestGate>)>,
        stay_warm: Duration,
    ) -> (Arc<Waiting>, Arc<Warmth>) {
        let waiting = Arc::new(Waiting::default());
        let warmth = Arc::new(Warmth {
            until: Mutex::new(None),
            stay_warm,
        });
        let instances = instances
            .into_iter()
            .map(|(url, gate)| (url.trim_end_matches('/').to_owned(), gate))
            .collect();
        self.models.insert(
            model.to_owned(),
            LaneModel {
                instances,
                queue: queue.to_owned(),
                waiting: Arc::clone(&waiting),
                warmth: Arc::clone(&warmth),
                next: AtomicU64::new(0),
            },
        );
        (waiting, warmth)
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

#[async_trait]
impl UpstreamPool for LaneUpstream {
    fn models(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    fn readiness(&self, model: &str) -> Readiness {
        match self.models.get(model) {
            Some(m) if m.is_open() => Readiness::Ready,
            Some(_) => Readiness::Cold,
            None => Readiness::Unknown,
        }
    }

    async fn acquire(&self, model: &str, _priority: i32) -> Result<UpstreamLease, UpstreamError> {
        let m = self
            .models
            .get(model)
            .ok_or_else(|| UpstreamError::UnknownModel(model.to_owned()))?;
        // Held by the request until it ends: the lane warm after it, the instance busy during it.
        let lease = |(url, running): (&str, InFlight)| {
            let held: Box<dyn Send + Sync> = Box::new((running, WarmAfter(Arc::clone(&m.warmth))));
            UpstreamLease::new(url.to_owned(), Some(held))
        };
        if let Some(open) = m.open() {
            return Ok(lease(open));
        }
        let _counted = Waiter::new(&m.waiting);
        let start = Instant::now();
        while start.elapsed() < self.max_wait {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(open) = m.open() {
                return Ok(lease(open));
            }
        }
        Err(UpstreamError::Failed(format!(
            "lane `{}` was not switched to within {:.0} s",
            m.queue,
            self.max_wait.as_secs_f64()
        )))
    }

    fn keep_alive(&self, model: &str, keep_alive: Duration) {
        if let Some(m) = self.models.get(model) {
            *m.warmth.until() = Some(Instant::now() + keep_alive);
        }
    }

    fn slots(&self) -> Vec<SlotView> {
        self.models
            .iter()
            .map(|(name, m)| SlotView {
                model: name.clone(),
                state: if m.is_open() {
                    SlotState::Ready
                } else {
                    SlotState::Idle
                },
                // A lane asleep shows on the status page's Lanes section (`asleep l1`).
                sleep_level: None,
                port: None,
                active: 0,
                pinned: false,
                idle_s: 0.0,
                gpus: Vec::new(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horos_server_control::Demand;

    fn wrap(gate: &Arc<horos_feeder::LaneGate>) -> Arc<RequestGate> {
        let lane: Arc<dyn Gate> = gate.clone();
        Arc::new(RequestGate::new(lane))
    }

    #[tokio::test]
    async fn a_switch_waits_for_the_requests_running_on_the_lanes_server() {
        let lane = Arc::new(horos_feeder::LaneGate::new(true));
        let gate = wrap(&lane);
        let mut up = LaneUpstream::new(Duration::from_millis(100));
        up.lane(
            "m",
            "q",
            vec![("http://127.0.0.1:9".into(), Arc::clone(&gate))],
            Duration::ZERO,
        );
        let running = up.acquire("m", 0).await.unwrap();
        assert!(gate.is_busy(), "a request runs on the instance");
        assert!(!lane.is_busy(), "the feeder runs nothing");
        // The executor leaves the lane: closes, then waits for what runs.
        gate.close();
        let g = Arc::clone(&gate);
        let switch = tokio::spawn(async move { g.wait_idle().await });
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(
            !switch.is_finished(),
            "the server was stopped under a request"
        );
        // No new request starts on the closing instance (it waits, then gives up).
        assert!(up.acquire("m", 0).await.is_err());
        drop(running);
        tokio::time::timeout(Duration::from_secs(5), switch)
            .await
            .unwrap()
            .unwrap();
        assert!(!gate.is_busy());
    }

    #[tokio::test]
    async fn a_parked_lane_counts_its_waiting_requests_until_it_is_served() {
        let gate = Arc::new(horos_feeder::LaneGate::new(false));
        let mut up = LaneUpstream::new(Duration::from_secs(10));
        let (waiting, _) = up.lane(
            "vision-model",
            "vision",
            vec![("http://127.0.0.1:9/".into(), wrap(&gate))],
            Duration::ZERO,
        );
        let up = Arc::new(up);
        assert_eq!(up.readiness("vision-model"), Readiness::Cold);
        let u = Arc::clone(&up);
        let call = tokio::spawn(async move { u.acquire("vision-model", 0).await });
        tokio::time::sleep(Duration::from_millis(120)).await;
        let (n, oldest) = waiting.waiting();
        assert_eq!(n, 1);
        assert!(oldest > 0.05, "{oldest}");
        gate.open();
        let lease = call.await.unwrap().unwrap();
        assert_eq!(lease.endpoint(), "http://127.0.0.1:9");
        assert_eq!(waiting.waiting().0, 0);
        assert_eq!(up.readiness("vision-model"), Readiness::Ready);

        // A caller that leaves stops counting; one that waits too long fails.
        gate.close();
        let u = Arc::clone(&up);
        let call = tokio::spawn(async move { u.acquire("vision-model", 0).await });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(waiting.waiting().0, 1);
        call.abort();
        let _ = call.await;
        assert_eq!(waiting.waiting().0, 0);
        let mut short = LaneUpstream::new(Duration::from_millis(100));
        short.lane(
            "m",
            "q",
            vec![("http://127.0.0.1:9".into(), wrap(&gate))],
            Duration::ZERO,
        );
        assert!(matches!(
            short.acquire("m", 0).await,
            Err(UpstreamError::Failed(_))
        ));
    }

    #[tokio::test]
    async fn a_lane_stays_warm_after_its_requests_and_for_a_requests_keep_alive() {
        use horos_server_control::KeepWarm;
        let gates: Vec<Arc<horos_feeder::LaneGate>> = (0..2)
            .map(|k| Arc::new(horos_feeder::LaneGate::new(k == 1)))
            .collect();
        let mut up = LaneUpstream::new(Duration::from_secs(10));
        let (_, warmth) = up.lane(
            "m",
            "q",
            vec![
                ("http://127.0.0.1:1".into(), wrap(&gates[0])),
                ("http://127.0.0.1:2".into(), wrap(&gates[1])),
            ],
            Duration::from_secs(30),
        );
        assert_eq!(warmth.warm_for_s(), 0.0, "warm before any request");
        // Only the open instance answers, and the lane stays warm once the request ends.
        let lease = up.acquire("m", 0).await.unwrap();
        assert_eq!(lease.endpoint(), "http://127.0.0.1:2");
        assert_eq!(
            warmth.warm_for_s(),
            0.0,
            "warm while the request runs, not after"
        );
        drop(lease);
        assert!((29.0..=30.0).contains(&warmth.warm_for_s()));
        // Both open: requests take turns.
        gates[0].open();
        let a = up.acquire("m", 0).await.unwrap().endpoint().to_owned();
        let b = up.acquire("m", 0).await.unwrap().endpoint().to_owned();
        assert_ne!(a, b);
        // A request's own keep_alive replaces it.
        up.keep_alive("m", Duration::from_secs(2));
        assert!(warmth.warm_for_s() <= 2.0);
    }
}
