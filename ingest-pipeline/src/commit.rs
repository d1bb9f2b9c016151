//! Group commit of the jobs' write transactions.
//!
//! Every job ends with one write transaction: record its result, ack it and enqueue the next
//! stage. Committed one by one, each paid a whole SQLite commit (the WAL frames of every page it
//! touched, written again by the next job that touched the same queue and store pages) and a
//! hop to the blocking pool. Here a job hands its transaction's body to the committer, which runs
//! every body waiting at that moment in one `Queue::transaction`, so a busy pipeline pays one
//! commit for many jobs, and an idle one pays what it did before (a group of one).
//!
//! A body may run more than once: if any body of a group fails, or the group's commit does, the
//! whole group is rolled back and every body runs again in a transaction of its own, so each job
//! gets its own outcome, never a neighbour's error. (Savepoints would keep the others, but the
//! queue's job-id block reserved inside a rolled-back savepoint would not be released; failures
//! are rare, a re-run is cheap.) A job is answered only once the commit holding its body succeeded.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use squeueha::{Queue, QueueTx};
use tokio::sync::oneshot;

use crate::pipeline::PipelineError;

/// Most bodies in one transaction (bounds how long the first of a group waits for its commit).
const MAX_GROUP: usize = 64;

/// A transaction body waiting for its commit, with the job's answer channel.
trait Body: Send {
    /// Runs the body against a state without its earlier runs.
    fn run(&mut self, tx: &mut QueueTx<'_>) -> Result<(), PipelineError>;
    /// Answers the job: its value once committed, or the error.
    fn finish(self: Box<Self>, outcome: Result<(), PipelineError>);
}

struct Pending<F, X> {
    f: F,
    value: Option<X>,
    reply: oneshot::Sender<Result<X, PipelineError>>,
}

impl<F, X> Body for Pending<F, X>
where
    F: FnMut(&mut QueueTx<'_>) -> Result<X, PipelineError> + Send,
    X: Send,
{
    fn run(&mut self, tx: &mut QueueTx<'_>) -> Result<(), PipelineError> {
        self.value = None;
        self.value = Some((self.f)(tx)?);
        Ok(())
    }

    fn finish(self: Box<Self>, outcome: Result<(), PipelineError>) {
        let Pending { value, reply, .. } = *self;
        let answer = outcome.and_then(|()| {
            value.ok_or_else(|| PipelineError::Task("transaction body left no value".into()))
        });
        // The job may have been cancelled meanwhile: its work is committed all the same.
        let _ = reply.send(answer);
    }
}

#[derive(Default)]
struct Waiting {
    bodies: Vec<Box<dyn Body>>,
    /// A drain task is running (it takes every body pushed before it sees the list empty).
    draining: bool,
}

struct Shared {
    queue: Queue,
    waiting: Mutex<Waiting>,
}

/// Runs transaction bodies in shared commits (see the module's documentation).
#[derive(Clone)]
pub(crate) struct Committer {
    shared: Arc<Shared>,
}

impl Committer {
    /// A committer on `queue`'s database.
    pub(crate) fn new(queue: Queue) -> Self {
        Self {
            shared: Arc::new(Shared {
                queue,
                waiting: Mutex::new(Waiting::default()),
            }),
        }
    }

    /// Runs `f` in a transaction, possibly shared with other jobs' bodies, and returns its value
    /// once that transaction committed. `f` may run more than once, always against a state without
    /// its earlier runs.
    pub(crate) async fn run<X: Send + 'static>(
        &self,
        f: impl FnMut(&mut QueueTx<'_>) -> Result<X, PipelineError> + Send + 'static,
    ) -> Result<X, PipelineError> {
        let (reply, answer) = oneshot::channel();
        let body = Box::new(Pending {
            f,
            value: None,
            reply,
        });
        let start = {
            let mut w = self.lock();
            w.bodies.push(body);
            !std::mem::replace(&mut w.draining, true)
        };
        if start {
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.drain());
        }
        answer.await.map_err(|_| {
            PipelineError::Task("the commit of this job's transaction failed".into())
        })?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.shared
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits groups until no body is waiting.
    fn drain(&self) {
        loop {
            let group: Vec<Box<dyn Body>> = {
                let mut w = self.lock();
                if w.bodies.is_empty() {
                    w.draining = false;
                    return;
                }
                let n = w.bodies.len().min(MAX_GROUP);
                w.bodies.drain(..n).collect()
            };
            // A panicking body drops its group's answer channels (those jobs see an error and
            // are retried); the drain goes on for the others.
            let _ = catch_unwind(AssertUnwindSafe(|| self.commit(group)));
        }
    }

    fn commit(&self, mut group: Vec<Box<dyn Body>>) {
        if group.len() > 1 {
            let together = self.shared.queue.transaction(
                |tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
                    for body in group.iter_mut() {
                        body.run(tx)?;
                    }
                    Ok(())
                },
            );
            if together.is_ok() {
                for body in group {
                    body.finish(Ok(()));
                }
                return;
            }
        }
        // Alone, or the group was lost: each body in its own transaction, with its own outcome.
        for mut body in group {
            let outcome = self
                .shared
                .queue
                .transaction(|tx: &mut QueueTx<'_>| body.run(tx));
            body.finish(outcome);
        }
    }
}
