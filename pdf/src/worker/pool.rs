//! A fixed pool of workers: at most `count` processes at a time, each serving one document
//! (or one image) and then ending, so that a document's CPU limit is its own and nothing one
//! document left in a worker's memory meets the next. A broken worker is reaped where it
//! broke; the next [`WorkerPool::get`] starts a fresh one in its place.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::client::{Worker, WorkerCommand, WorkerError, WorkerLimits};

/// A pool's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// The most workers alive at once (at least 1).
    pub count: usize,
    /// What each worker runs.
    pub command: WorkerCommand,
    /// The limits each runs under.
    pub limits: WorkerLimits,
}

/// What a pool did, counted since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Workers started.
    pub started: u64,
    /// Workers that broke (died, were killed, passed a limit).
    pub broken: u64,
}

/// A fixed pool of PDF workers.
#[derive(Debug)]
pub struct WorkerPool {
    config: PoolConfig,
    slots: Arc<Semaphore>,
    started: AtomicU64,
    broken: Arc<AtomicU64>,
    warned_network: std::sync::Once,
}

impl WorkerPool {
    /// A pool of `config.count` workers (none started until one is needed).
    pub fn new(config: PoolConfig) -> Self {
        let count = config.count.max(1);
        Self {
            config,
            slots: Arc::new(Semaphore::new(count)),
            started: AtomicU64::new(0),
            broken: Arc::new(AtomicU64::new(0)),
            warned_network: std::sync::Once::new(),
        }
    }

    /// The pool's settings.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// What it did so far.
    pub fn counts(&self) -> PoolCounts {
        PoolCounts {
            started: self.started.load(Ordering::Relaxed),
            broken: self.broken.load(Ordering::Relaxed),
        }
    }

    /// Starts a worker, reads its hello and ends it: whether this pool can read documents now,
    /// and whether its workers see a network (`Some(false)`: none, as asked). A deep health
    /// check's question, and `run`'s first word about its workers. Waits for a free place.
    pub async fn probe(&self) -> Result<Option<bool>, WorkerError> {
        let worker = self.get().await?;
        let network = worker.network();
        worker.finish().await;
        Ok(network)
    }

    /// Whether the pool has a live worker or can start one, without waiting: `Ok` when every
    /// place holds a worker (each bound by its time per request), else the probe of a fresh
    /// worker in a free place ([`WorkerPool::probe`]). A deep health check's question ("does
    /// this pool have no live worker?").
    pub async fn health(&self) -> Result<(), WorkerError> {
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            return Ok(());
        };
        self.start(permit).await?.finish().await;
        Ok(())
    }

    /// A fresh worker, once one of the pool's places is free (waits otherwise). It holds its
    /// place until dropped; dropping it ends its process.
    pub async fn get(&self) -> Result<PooledWorker, WorkerError> {
        let permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| WorkerError::Spawn {
                program: self.config.command.program.display().to_string(),
                source: std::io::Error::other("the pool is closed"),
            })?;
        self.start(permit).await
    }

    /// A worker started in the place `permit` holds.
    async fn start(&self, permit: OwnedSemaphorePermit) -> Result<PooledWorker, WorkerError> {
        self.started.fetch_add(1, Ordering::Relaxed);
        let worker = match Worker::spawn(&self.config.command, self.config.limits).await {
            Ok(worker) => worker,
            Err(e) => {
                if e.reason().is_some() {
                    self.broken.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        };
        if self.config.limits.no_network && worker.network() != Some(false) {
            self.warned_network.call_once(|| {
                tracing::warn!(
                    network = ?worker.network(),
                    "PDF workers run with the network: this kernel refuses an unprivileged user \
                     and network namespace (their memory, CPU and time limits hold)"
                );
            });
        }
        Ok(PooledWorker {
            worker,
            broken: self.broken.clone(),
            counted: false,
            _permit: permit,
        })
    }
}

/// A worker taken from a [`WorkerPool`]: it holds one of the pool's places until dropped, and
/// its process ends then.
#[derive(Debug)]
pub struct PooledWorker {
    worker: Worker,
    broken: Arc<AtomicU64>,
    /// Whether its end was accounted for already.
    counted: bool,
    _permit: OwnedSemaphorePermit,
}

impl PooledWorker {
    /// Ends the worker, reaps it and gives its place back.
    pub async fn finish(mut self) {
        let broken = self.worker.is_broken();
        self.worker.end().await;
        if !broken {
            // Ended on purpose: not counted as broken when dropped.
            self.counted = true;
        }
    }
}

impl std::ops::Deref for PooledWorker {
    type Target = Worker;
    fn deref(&self) -> &Worker {
        &self.worker
    }
}

impl std::ops::DerefMut for PooledWorker {
    fn deref_mut(&mut self) -> &mut Worker {
        &mut self.worker
    }
}

impl Drop for PooledWorker {
    fn drop(&mut self) {
        if self.worker.is_broken() && !self.counted {
            self.broken.fetch_add(1, Ordering::Relaxed);
        }
    }
}
