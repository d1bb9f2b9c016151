//! The wait for GPU room: requests whose model cannot be loaded now (every resident model busy
//! or more important) wait here, and room freed later is offered to them in priority order
//! (then arrival order), one waiter at a time.
//!
//! An offer goes to the most important waiter; if its try finds no room it passes the offer
//! to the next, so a smaller model further down can still use room the first cannot. Waiters
//! also look on their own every `step` (room freed by other processes, timers), except while a
//! more important waiter holds an offer, so the timer never lets a waiter jump the queue.
//!
//! Invariant: a waiter is in `waiting` only while it waits, never while it tries (a try may be
//! a load of minutes; an offer made meanwhile goes to the next waiter instead). Room freed
//! during a try is not lost: the waiter sees the `freed` count move and tries again at once.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// Order of a waiter: smaller first (priority, then arrival).
type Key = (i32, u64);

#[derive(Default)]
struct State {
    /// Times room was freed: lets a waiter see a release that happened during its try.
    freed: u64,
    seq: u64,
    waiting: BTreeMap<Key, Arc<Notify>>,
    /// The waiter the last offer went to, until it passes it on (`None`: nobody holds one).
    offered_to: Option<Key>,
    /// Waiters that found no room at least once, with when: the demand for GPU room, trying
    /// or waiting, until they leave.
    blocked: BTreeMap<Key, std::time::Instant>,
}

impl State {
    /// Offers the room to the first waiter after `key` (the first of all when `None`).
    fn offer_after(&mut self, key: Option<Key>) {
        let next = match key {
            Some(k) => self
                .waiting
                .range((Bound::Excluded(k), Bound::Unbounded))
                .next(),
            None => self.waiting.iter().next(),
        };
        self.offered_to = next.map(|(k, n)| {
            n.notify_one();
            *k
        });
    }

    /// If `key` holds the offer, passes it on.
    fn pass_on(&mut self, key: Key) {
        if self.offered_to == Some(key) {
            self.offer_after(Some(key));
        }
    }
}

/// Requests waiting for GPU room.
#[derive(Default)]
pub(crate) struct RoomQueue {
    state: Mutex<State>,
}

impl RoomQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room may have been freed (a request ended, a model was unloaded, a load failed): offer
    /// it to the most important waiter.
    pub fn freed(&self) {
        let mut st = self.lock();
        st.freed = st.freed.wrapping_add(1);
        st.offer_after(None);
    }

    /// A place in the queue for a request of `priority` (smaller is more important); it only
    /// waits in [`RoomWaiter::wait`].
    pub fn waiter(&self, priority: i32) -> RoomWaiter<'_> {
        let mut st = self.lock();
        st.seq += 1;
        RoomWaiter {
            queue: self,
            key: (priority, st.seq),
            notify: Arc::new(Notify::new()),
            seen: st.freed,
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Requests that found no room and have not been served or left yet, and how long the
    /// oldest has been waiting, seconds.
    pub(crate) fn blocked(&self) -> (usize, f64) {
        let st = self.lock();
        let oldest = st
            .blocked
            .values()
            .min()
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        (st.blocked.len(), oldest)
    }
}

/// The requests waiting for GPU room for a model loaded on demand (every resident model busy or
/// more important than they are): the demand an allocator can weigh to give the model pool a
/// GPU of its own. Cheap to clone.
#[derive(Clone)]
pub struct RoomDemand(pub(crate) Arc<RoomQueue>);

impl RoomDemand {
    /// How many requests found no room and still wait (or try again), and how long the oldest
    /// has waited, seconds.
    pub fn waiting(&self) -> (usize, f64) {
        self.0.blocked()
    }
}

impl horos_server_control::Demand for RoomDemand {
    fn waiting(&self) -> (usize, f64) {
        RoomDemand::waiting(self)
    }
}

impl std::fmt::Debug for RoomDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RoomDemand").field(&self.waiting()).finish()
    }
}

/// One request's place in the [`RoomQueue`]. Dropping it passes on an offer it holds.
pub(crate) struct RoomWaiter<'a> {
    queue: &'a RoomQueue,
    key: Key,
    notify: Arc<Notify>,
    /// The queue's `freed` count when the last try began.
    seen: u64,
}

impl RoomWaiter<'_> {
    /// Call before each try: room freed from now on ends the next [`wait`](Self::wait) at once.
    pub fn before_try(&mut self) {
        self.seen = self.queue.lock().freed;
    }

    /// After a try that found no room: passes on the offer it held (the room did not fit it;
    /// it may fit the next), then waits for an offer, at most `step`. `true`: try again now
    /// (an offer came, room was freed during the try, or the timer ran out with no more
    /// important waiter holding an offer); `false`: keep waiting (check the deadline first).
    pub async fn wait(&mut self, step: Duration) -> bool {
        {
            let mut st = self.queue.lock();
            st.blocked
                .entry(self.key)
                .or_insert_with(std::time::Instant::now);
            st.pass_on(self.key);
            if st.freed != self.seen {
                return true;
            }
            st.waiting.insert(self.key, Arc::clone(&self.notify));
        }
        // A permit left by an offer that came after an earlier wait ended is harmless: the
        // state, not the wake-up, says whether this waiter holds an offer.
        let _ = tokio::time::timeout(step, self.notify.notified()).await;
        let mut st = self.queue.lock();
        st.waiting.remove(&self.key);
        st.offered_to.is_none_or(|holder| holder >= self.key)
    }
}

impl Drop for RoomWaiter<'_> {
    fn drop(&mut self) {
        // Served (what room is left may fit the next), gone (client left, budget spent) or
        // cancelled mid-wait: an offer this waiter holds goes on.
        let mut st = self.queue.lock();
        st.waiting.remove(&self.key);
        st.blocked.remove(&self.key);
        st.pass_on(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    /// Waits until `n` waiters are in the queue.
    async fn until_waiting(q: &RoomQueue, n: usize) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while q.waiting() != n {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("waiters in the queue");
    }

    #[tokio::test]
    async fn freed_room_is_offered_most_important_first_then_passed_on() {
        let q = Arc::new(RoomQueue::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Arrival order 9, 1, 5: offers must go 1, 5, 9.
        for (i, prio) in [9, 1, 5].into_iter().enumerate() {
            let (queue, order) = (Arc::clone(&q), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let mut w = queue.waiter(prio);
                w.before_try();
                assert!(w.wait(LONG).await);
                order.lock().unwrap().push(prio);
                // No room for this one either: `wait` passes the offer on, then waits again.
                w.before_try();
                w.wait(Duration::ZERO).await;
            }));
            until_waiting(&q, i + 1).await;
        }
        q.freed();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("each offer reaches the next waiter")
                .unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [1, 5, 9]);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn the_timer_lets_no_waiter_jump_one_that_holds_an_offer() {
        let q = Arc::new(RoomQueue::default());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let mut w = q.waiter(1);
                w.before_try();
                assert!(w.wait(LONG).await);
                // Trying (a load, say) with the offer in hand until told to finish.
                let _ = done_rx.await;
            })
        };
        until_waiting(&q, 1).await;
        q.freed();
        until_waiting(&q, 0).await;
        let mut later = q.waiter(5);
        later.before_try();
        assert!(
            !later.wait(Duration::from_millis(10)).await,
            "a less important waiter's timer must not try while the offer is held"
        );
        done_tx.send(()).unwrap();
        first.await.unwrap();
        assert!(later.wait(Duration::from_millis(10)).await);
    }

    #[tokio::test]
    async fn room_freed_during_a_try_is_not_missed() {
        let q = RoomQueue::default();
        let mut w = q.waiter(5);
        w.before_try();
        q.freed(); // while "trying": nobody waits yet
        let again = tokio::time::timeout(Duration::from_secs(5), w.wait(LONG))
            .await
            .expect("the release during the try ends the wait at once");
        assert!(again);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_passes_its_offer_on() {
        let q = Arc::new(RoomQueue::default());
        let first = {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let mut w = q.waiter(1);
                w.before_try();
                w.wait(LONG).await;
                // Offered the room, then gone without another try (its client left).
            })
        };
        until_waiting(&q, 1).await;
        let second = {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let mut w = q.waiter(2);
                w.before_try();
                w.wait(LONG).await;
            })
        };
        until_waiting(&q, 2).await;
        q.freed();
        for t in [first, second] {
            tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("the offer went on to the second waiter")
                .unwrap();
        }
    }
}
