//! In-process wake-up: an enqueue signals waiting consumers of the same queue at once, so they do not
//! sleep a poll interval. Consumers in other processes are signalled here too: through the Unix
//! sockets of `wake` on SQLite, through the listening connection on PostgreSQL.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

#[derive(Default)]
pub(crate) struct Signals {
    by_queue: Mutex<HashMap<String, Arc<Signal>>>,
}

impl Signals {
    pub(crate) fn get(&self, queue: &str) -> Arc<Signal> {
        let mut map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = map.get(queue) {
            return s.clone();
        }
        let s = Arc::new(Signal::new());
        map.insert(queue.to_owned(), s.clone());
        s
    }

    /// Wakes the waiters of every queue (after a gap in cross-node notifications).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn notify_all(&self) {
        let signals: Vec<Arc<Signal>> = {
            let map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
            map.values().cloned().collect()
        };
        for s in signals {
            s.notify();
        }
    }

    pub(crate) fn notify(&self, queue: &str) {
        let signal = {
            let map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
            map.get(queue).cloned()
        };
        // Nobody ever waited on this queue: nothing to wake.
        if let Some(s) = signal {
            s.notify();
        }
    }
}

/// A generation counter: waiters note the generation before polling, then wait for it to change, so
/// an enqueue between the poll and the wait is never missed.
pub(crate) struct Signal {
    generation: Mutex<u64>,
    cond: Condvar,
    #[cfg(feature = "tokio")]
    watch: tokio::sync::watch::Sender<u64>,
}

impl Signal {
    fn new() -> Self {
        Signal {
            generation: Mutex::new(0),
            cond: Condvar::new(),
            #[cfg(feature = "tokio")]
            watch: tokio::sync::watch::Sender::new(0),
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn notify(&self) {
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *g = g.wrapping_add(1);
        let value = *g;
        drop(g);
        self.cond.notify_all();
        #[cfg(feature = "tokio")]
        self.watch.send_replace(value);
        #[cfg(not(feature = "tokio"))]
        let _ = value;
    }

    /// Blocks until the generation differs from `seen` or `until` passes.
    pub(crate) fn wait_past(&self, seen: u64, until: Instant) {
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *g == seen {
            let now = Instant::now();
            if now >= until {
                return;
            }
            g = match self.cond.wait_timeout(g, until - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    #[cfg(feature = "tokio")]
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch.subscribe()
    }
}
