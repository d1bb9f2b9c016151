//! Admission: the priority queue of waiting requests, ordered by (priority, warm-model bump,
//! submit order), under a global and a per-model concurrency limit.
//!
//! Invariant: after every change, every waiter that fits is granted. So a newcomer that
//! fits goes at once (no waiter that fits is ahead of it), and a freed place goes to the best
//! waiter whose model has room.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Order of a waiter: smaller first.
type Key = (i32, u8, u64);

struct Waiter {
    model: String,
    tx: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    running_total: usize,
    running: HashMap<String, usize>,
    waiting: BTreeMap<Key, Waiter>,
    waiting_per_model: HashMap<String, usize>,
    seq: u64,
}

/// Something told of queue changes (metrics gauges).
pub trait QueueObserver: Send + Sync {
    /// `model` now has `waiting` requests queued and `running` admitted.
    fn changed(&self, model: &str, waiting: usize, running: usize);
}

/// The admission queue (data plane only).
pub struct Scheduler {
    max_total: usize,
    limit: Box<dyn Fn(&str) -> usize + Send + Sync>,
    observer: Option<Arc<dyn QueueObserver>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("max_total", &self.max_total)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A queue admitting at most `max_total` requests, and `limit(model)` per model.
    pub fn new(
        max_total: usize,
        limit: impl Fn(&str) -> usize + Send + Sync + 'static,
        observer: Option<Arc<dyn QueueObserver>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            max_total: max_total.max(1),
            limit: Box::new(limit),
            observer,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fits(&self, st: &State, model: &str) -> bool {
        st.running_total < self.max_total
            && st.running.get(model).copied().unwrap_or(0) < (self.limit)(model).max(1)
    }

    fn observe(&self, st: &State, model: &str) {
        if let Some(o) = &self.observer {
            o.changed(
                model,
                st.waiting_per_model.get(model).copied().unwrap_or(0),
                st.running.get(model).copied().unwrap_or(0),
            );
        }
    }

    /// Waits for a place for a request on `model`. `warm`: the model is loaded (such requests
    /// go before cold ones of the same priority). Cancel-safe.
    pub async fn admit(self: &Arc<Self>, model: &str, priority: i32, warm: bool) -> Permit {
        let (key, rx) = {
            let mut st = self.lock();
            if self.fits(&st, model) {
                st.running_total += 1;
                *st.running.entry(model.to_owned()).or_default() += 1;
                self.observe(&st, model);
                return Permit {
                    sched: Arc::clone(self),
                    model: model.to_owned(),
                };
            }
            st.seq += 1;
            let key = (priority, u8::from(!warm), st.seq);
            let (tx, rx) = oneshot::channel();
            st.waiting.insert(
                key,
                Waiter {
                    model: model.to_owned(),
                    tx,
                },
            );
            *st.waiting_per_model.entry(model.to_owned()).or_default() += 1;
            self.observe(&st, model);
            (key, rx)
        };
        let mut pending = Pending {
            sched: Arc::clone(self),
            key,
            model: model.to_owned(),
            done: false,
        };
        // The sender is only dropped after a grant or by `Pending` itself.
        let _ = rx.await;
        pending.done = true;
        Permit {
            sched: Arc::clone(self),
            model: model.to_owned(),
        }
    }

    /// Grants every waiter that fits, best first.
    fn dispatch(&self, st: &mut State) {
        if st.waiting.is_empty() {
            return;
        }
        let grantable: Vec<Key> = {
            let mut out = Vec::new();
            let mut extra_total = 0;
            let mut extra: HashMap<&str, usize> = HashMap::new();
            for (k, w) in &st.waiting {
                if st.running_total + extra_total >= self.max_total {
                    break;
                }
                let e = extra.entry(w.model.as_str()).or_default();
                let running = st.running.get(&w.model).copied().unwrap_or(0) + *e;
                if running < (self.limit)(&w.model).max(1) {
                    *e += 1;
                    extra_total += 1;
                    out.push(*k);
                }
            }
            out
        };
        for k in grantable {
            let Some(w) = st.waiting.remove(&k) else {
                continue;
            };
            if let Some(n) = st.waiting_per_model.get_mut(&w.model) {
                *n = n.saturating_sub(1);
            }
            st.running_total += 1;
            *st.running.entry(w.model.clone()).or_default() += 1;
            self.observe(st, &w.model);
            // A dropped receiver is handled by its `Pending` guard, which sees the key gone
            // and releases the place.
            let _ = w.tx.send(());
        }
    }

    fn release(&self, model: &str) {
        let mut st = self.lock();
        st.running_total = st.running_total.saturating_sub(1);
        if let Some(n) = st.running.get_mut(model) {
            *n = n.saturating_sub(1);
        }
        self.observe(&st, model);
        self.dispatch(&mut st);
    }

    /// Why the queue does not move, if it does not: requests waiting while a place they fit is
    /// free (a grant lost: nothing would ever wake them), or the queue's lock held for longer
    /// than `patience` (a deadlock). Never blocks for longer than `patience`.
    pub(crate) async fn wedged(&self, patience: std::time::Duration) -> Option<String> {
        let until = std::time::Instant::now() + patience;
        loop {
            if let Some(answer) = self.wedged_now() {
                return answer;
            }
            if std::time::Instant::now() >= until {
                return Some(format!(
                    "its lock has been held for more than {} ms",
                    patience.as_millis()
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// [`Scheduler::wedged`] once: `None` when the lock is taken.
    fn wedged_now(&self) -> Option<Option<String>> {
        let st = match self.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let stuck = st
            .waiting
            .values()
            .filter(|w| self.fits(&st, &w.model))
            .count();
        Some((stuck > 0).then(|| {
            format!(
                "{stuck} request(s) wait although a place is free ({} of {} running)",
                st.running_total, self.max_total
            )
        }))
    }

    /// Requests waiting, all models together.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// Removes a cancelled waiter, or gives back a place granted to a waiter that left.
struct Pending {
    sched: Arc<Scheduler>,
    key: Key,
    model: String,
    done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = self.sched.lock();
        if st.waiting.remove(&self.key).is_some() {
            if let Some(n) = st.waiting_per_model.get_mut(&self.model) {
                *n = n.saturating_sub(1);
            }
            self.sched.observe(&st, &self.model);
        } else {
            drop(st);
            self.sched.release(&self.model);
        }
    }
}

/// A place in the upstream concurrency limits; dropping it admits the next waiter.
pub struct Permit {
    sched: Arc<Scheduler>,
    model: String,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("model", &self.model)
            .finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.sched.release(&self.model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_lost_grant_or_a_held_lock_is_reported_as_wedged() {
        let s = Scheduler::new(1, |_| 4, None);
        let patience = Duration::from_millis(100);
        assert_eq!(s.wedged(patience).await, None, "idle");
        let held = s.admit("m", 5, true).await;
        let waiter = {
            let s = Arc::clone(&s);
            tokio::spawn(async move { drop(s.admit("m", 5, true).await) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(s.wedged(patience).await, None, "full: waiting is right");
        // Wedged on purpose: the place freed without the grant that should follow.
        s.lock().running_total = 0;
        let why = s.wedged(patience).await.unwrap();
        assert!(
            why.contains("1 request(s) wait although a place is free"),
            "{why}"
        );
        s.lock().running_total = 1;
        drop(held);
        waiter.await.unwrap();
        assert_eq!(s.wedged(patience).await, None);
        // Wedged on purpose: its lock held (a deadlock).
        let (tx, rx) = std::sync::mpsc::channel();
        let locker = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let _g = s.lock();
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(500));
            })
        };
        rx.recv().unwrap();
        let why = s.wedged(patience).await.unwrap();
        assert!(why.contains("lock has been held"), "{why}");
        locker.join().unwrap();
        assert_eq!(s.wedged(patience).await, None);
    }

    #[tokio::test]
    async fn priority_then_warm_then_fifo() {
        let s = Scheduler::new(10, |_| 1, None);
        let first = s.admit("m", 5, true).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, prio, warm) in [("low", 9, true), ("cold", 1, false), ("high", 1, true)] {
            let s = Arc::clone(&s);
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let p = s.admit("m", prio, warm).await;
                order.lock().unwrap().push(name);
                drop(p);
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(s.waiting(), 3);
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec!["high", "cold", "low"]);
    }

    #[tokio::test]
    async fn cancelled_waiter_leaves_no_trace() {
        let s = Scheduler::new(1, |_| 4, None);
        let p = s.admit("a", 0, true).await;
        let waiting = tokio::time::timeout(Duration::from_millis(20), s.admit("b", 0, true)).await;
        assert!(waiting.is_err());
        assert_eq!(s.waiting(), 0);
        drop(p);
        let _q = s.admit("b", 0, true).await; // would hang if the place had leaked
    }
}
