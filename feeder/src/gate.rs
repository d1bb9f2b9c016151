//! A lane's gate: whether the feeder may start batches of it, and whether one is running. The
//! executor of an allocation plan closes the gate of the mode a GPU leaves, waits for its batch in
//! progress to end (never a switch mid-batch), swaps the servers, then opens the new mode's gate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Open or closed, busy or idle. Shared (`Arc`) between a [`Lane`](crate::Lane) and whoever
/// decides what the GPU serves.
#[derive(Debug)]
pub struct LaneGate {
    open: AtomicBool,
    busy: AtomicBool,
}

impl LaneGate {
    /// A gate, open or closed.
    pub fn new(open: bool) -> Self {
        LaneGate {
            open: AtomicBool::new(open),
            busy: AtomicBool::new(false),
        }
    }

    /// Lets the feeder start batches again (and health-check the lane's server).
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// Stops new batches; a batch in progress finishes (see [`LaneGate::wait_idle`]). A closed
    /// lane's server is neither health-checked nor restarted: it may be stopped on purpose.
    pub fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
    }

    /// Whether batches may start.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Whether a batch of the lane is running.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    /// Waits until no batch of the lane runs (call after [`LaneGate::close`]: then none starts).
    pub async fn wait_idle(&self) {
        while self.is_busy() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Marks a batch (or a server recovery) as starting; `None` (and nothing marked) when the
    /// gate is closed. The busy flag is set before the gate is read, so a `close` that sees the
    /// lane idle is never followed by a batch start. It is cleared when the returned guard drops,
    /// also when the work's future is cancelled or panics, so [`LaneGate::wait_idle`] cannot wait
    /// forever. One batch per lane at a time (the feeder runs them in turn).
    pub(crate) fn enter(&self) -> Option<Busy<'_>> {
        self.busy.store(true, Ordering::SeqCst);
        if self.is_open() {
            Some(Busy(self))
        } else {
            self.busy.store(false, Ordering::SeqCst);
            None
        }
    }
}

/// A lane's busy flag, held: cleared on drop.
#[derive(Debug)]
pub(crate) struct Busy<'a>(&'a LaneGate);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl horos_server_control::Gate for LaneGate {
    fn open(&self) {
        LaneGate::open(self)
    }
    fn close(&self) {
        LaneGate::close(self)
    }
    fn is_open(&self) -> bool {
        LaneGate::is_open(self)
    }
    fn is_busy(&self) -> bool {
        LaneGate::is_busy(self)
    }
    async fn wait_idle(&self) {
        LaneGate::wait_idle(self).await
    }
}

impl Default for LaneGate {
    /// Open.
    fn default() -> Self {
        LaneGate::new(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_gate_admits_no_batch_and_wait_idle_waits_for_the_running_one() {
        let g = std::sync::Arc::new(LaneGate::default());
        let busy = g.enter().unwrap();
        g.close();
        assert!(g.is_busy(), "closing does not end the running batch");
        let waiter = {
            let g = std::sync::Arc::clone(&g);
            tokio::spawn(async move { g.wait_idle().await })
        };
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!waiter.is_finished(), "returned while a batch still ran");
        drop(busy);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(g.enter().is_none(), "a closed gate admitted a batch");
        assert!(!g.is_busy());
        g.open();
        assert!(g.enter().is_some());
    }

    #[tokio::test]
    async fn a_cancelled_batch_leaves_the_gate_idle() {
        let g = std::sync::Arc::new(LaneGate::default());
        let work = {
            let g = std::sync::Arc::clone(&g);
            tokio::spawn(async move {
                let _busy = g.enter();
                std::future::pending::<()>().await;
            })
        };
        tokio::time::timeout(Duration::from_secs(2), async {
            while !g.is_busy() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        work.abort();
        g.close();
        tokio::time::timeout(Duration::from_secs(2), g.wait_idle())
            .await
            .expect("wait_idle still waiting for a batch whose future was dropped");
    }
}
