//! [`AsyncQueue::transaction`](crate::AsyncQueue::transaction): transactions of async callers,
//! committed together.
//!
//! Each call hands its closure to a batch. One task on the blocking pool runs every closure
//! waiting at that moment in one [`Queue::transaction`], so a busy caller pays one commit and
//! one hop to the blocking pool for many transactions (where a transaction per blocking task
//! paid a hop each and woke the writer's waiters one by one), and an idle one pays what it did
//! before: a batch of one.
//!
//! A closure may run more than once: if any closure of a batch fails, or the batch's commit
//! does, the whole batch is rolled back and each closure runs again in a transaction of its own,
//! so every caller gets its own outcome, never a neighbour's error. A call returns only once the
//! commit holding its closure succeeded.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use crate::error::Error;
use crate::queue::Queue;
use crate::tx::QueueTx;

/// Most closures in one transaction (bounds how long the first of a batch waits for its commit).
const MAX_BATCH: usize = 64;

/// A closure waiting for its commit, with its caller's answer channel.
trait Body: Send {
    /// Runs the closure against a state without its earlier runs; `false` when it failed (its
    /// error is kept for its caller).
    fn run(&mut self, tx: &mut QueueTx<'_>) -> bool;
    /// Answers the caller: its value once committed, its own error, or the commit's.
    fn finish(self: Box<Self>, commit: Result<(), Error>);
}

struct Pending<F, T, E> {
    f: F,
    outcome: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<T, E>>,
}

impl<F, T, E> Body for Pending<F, T, E>
where
    F: FnMut(&mut QueueTx<'_>) -> Result<T, E> + Send,
    T: Send,
    E: From<Error> + Send,
{
    fn run(&mut self, tx: &mut QueueTx<'_>) -> bool {
        self.outcome = None;
        let outcome = (self.f)(tx);
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<(), Error>) {
        let Pending { outcome, reply, .. } = *self;
        let answer = match (commit, outcome) {
            (Ok(()), Some(outcome)) => outcome,
            (Err(_), Some(Err(own))) => Err(own),
            (Err(e), _) => Err(E::from(e)),
            (Ok(()), None) => Err(E::from(Error::TransactionAborted)),
        };
        // The caller may have gone meanwhile: its work is committed all the same.
        let _ = reply.send(answer);
    }
}

#[derive(Default)]
struct Waiting {
    bodies: Vec<Box<dyn Body>>,
    /// A drain task is running (it takes every body pushed before it sees the list empty).
    draining: bool,
}

/// The batch of one [`AsyncQueue`](crate::AsyncQueue) and its clones.
#[derive(Default)]
pub(crate) struct Batcher {
    waiting: Mutex<Waiting>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl Batcher {
    /// Runs `f` in a transaction of `queue`, possibly shared with other callers' closures, and
    /// returns its value once that transaction committed.
    pub(crate) async fn run<T, E>(
        self: &Arc<Self>,
        queue: &Queue,
        f: impl FnMut(&mut QueueTx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let body = Box::new(Pending {
            f,
            outcome: None,
            reply,
        });
        let start = {
            let mut w = self.lock();
            w.bodies.push(body);
            !std::mem::replace(&mut w.draining, true)
        };
        if start {
            let this = Arc::clone(self);
            let queue = queue.clone();
            tokio::task::spawn_blocking(move || this.drain(&queue));
        }
        answer.await.map_err(|_| {
            E::from(Error::Task(
                "the transaction's closure panicked or its drain task was cancelled".into(),
            ))
        })?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits batches until no closure is waiting.
    fn drain(&self, queue: &Queue) {
        loop {
            let batch: Vec<Box<dyn Body>> = {
                let mut w = self.lock();
                if w.bodies.is_empty() {
                    w.draining = false;
                    return;
                }
                let n = w.bodies.len().min(MAX_BATCH);
                w.bodies.drain(..n).collect()
            };
            // Closures' panics are caught one by one in `commit`; this guards the drain itself.
            let _ = catch_unwind(AssertUnwindSafe(|| commit(queue, batch)));
        }
    }
}

/// Runs one closure, a panic counting as its failure: in a shared transaction a panicking
/// closure must not take its neighbours down (they run again alone; it panics alone again, and
/// only its own caller hears of it).
fn run_caught(body: &mut Box<dyn Body>, tx: &mut QueueTx<'_>) -> bool {
    catch_unwind(AssertUnwindSafe(|| body.run(tx))).unwrap_or(false)
}

fn commit(queue: &Queue, mut batch: Vec<Box<dyn Body>>) {
    if batch.len() > 1 {
        let together = queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), Error> {
            for body in batch.iter_mut() {
                if !run_caught(body, tx) {
                    return Err(Error::TransactionAborted);
                }
            }
            Ok(())
        });
        if together.is_ok() {
            for body in batch {
                body.finish(Ok(()));
            }
            return;
        }
    }
    // Alone, each closure gets its own outcome; one that panics again is dropped unanswered
    // (its caller gets `Error::Task`), the others are still run.
    for mut body in batch {
        let mut panicked = false;
        let alone = queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), Error> {
            match catch_unwind(AssertUnwindSafe(|| body.run(tx))) {
                Ok(true) => Ok(()),
                Ok(false) => Err(Error::TransactionAborted),
                Err(_) => {
                    panicked = true;
                    Err(Error::TransactionAborted)
                }
            }
        });
        if !panicked {
            body.finish(alone);
        }
    }
}
