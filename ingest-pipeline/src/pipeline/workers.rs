//! The workers: one supervisor per stage claims jobs for its free workers, runs each job's stage
//! and records failures (retry, dead letter, the document failed).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fanin::Completion;
use squeueha::{Job, Nacked, QueueTx};
use tokio::task::JoinSet;

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self};
use crate::vision::VisionReader;

use super::{
    JobError, PageJob, Pipeline, PipelineError, ReadJob, RenderJob, Running, Stage, blocking,
};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// Starts the workers on the current tokio runtime; they run until [`Running::shutdown`].
    pub fn start(&self) -> Running {
        self.inner.stop.store(false, Ordering::SeqCst);
        let mut set = JoinSet::new();
        for stage in Stage::ALL {
            let this = self.clone();
            set.spawn(async move { this.supervise(stage).await });
        }
        let this = self.clone();
        set.spawn(async move { this.sweep().await });
        if let Some(pool) = self.inner.pdf_workers.clone() {
            // The PDF workers' first word, at start rather than at the first document.
            tokio::spawn(async move {
                match pool.probe().await {
                    Ok(network) => tracing::info!(
                        workers = pool.config().count,
                        network = ?network,
                        "PDF workers ready"
                    ),
                    Err(e) => tracing::error!(
                        error = %e,
                        "PDF workers cannot start: documents wait, then fail with this reason"
                    ),
                }
            });
        }
        // The in-memory indexes built beside the workers, one after the other: text questions
        // asked meanwhile are answered by the full scan of the store; a visual question above
        // the scan size waits for its index.
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = this.build_text_index() {
                tracing::warn!(error = %e, "text-vector index not built (questions scan the store)");
            }
            match this.build_visual_index() {
                Ok(ready) => {
                    for p in ready.iter().filter(|p| p.centroids) {
                        tracing::info!(dim = p.dim, pages = p.pages, "visual index ready");
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "visual index not built at start (the first visual question builds it)"
                ),
            }
        });
        Running {
            stop: self.inner.clone(),
            set,
        }
    }

    /// Runs [`Pipeline::reconcile_dead_letters`] now and every `sweep_interval` until the
    /// workers stop; a failed sweep is logged and tried again at the next tick.
    async fn sweep(self) {
        let inner = &self.inner;
        loop {
            // Registered before the flag is read, so a stop in between is not missed.
            let stopping = inner.stopping.notified();
            tokio::pin!(stopping);
            stopping.as_mut().enable();
            if inner.stop.load(Ordering::SeqCst) {
                return;
            }
            if let Err(e) = self.reconcile_dead_letters().await {
                tracing::warn!(
                    "dead-letter sweep failed (tried again in {:?}): {e}",
                    inner.cfg.sweep_interval
                );
            }
            tokio::select! {
                () = &mut stopping => return,
                () = tokio::time::sleep(inner.cfg.sweep_interval) => {}
            }
        }
    }

    /// One claimer per stage: it claims as many jobs as the stage has free workers, in one
    /// transaction, and runs each on its own task; the number of workers is a semaphore whose
    /// size follows [`Pipeline::set_workers`].
    pub(super) async fn supervise(self, stage: Stage) {
        let inner = &self.inner;
        let mut rx = inner.targets[stage.index()].subscribe();
        let sem = Arc::new(tokio::sync::Semaphore::new(0));
        let total = &inner.active[stage.index()];
        // The count of a new semaphore: a pipeline started again after a shutdown starts from
        // no worker (its last count would leave it none).
        total.store(0, Ordering::SeqCst);
        let mut tasks = JoinSet::new();
        loop {
            while tasks.try_join_next().is_some() {}
            if inner.stop.load(Ordering::SeqCst) {
                break;
            }
            let target = *rx.borrow_and_update();
            let have = total.load(Ordering::SeqCst);
            if target > have {
                sem.add_permits(target - have);
                total.store(target, Ordering::SeqCst);
            } else if target < have {
                // Only idle permits can go now; busy ones go when their jobs finish.
                let gone = sem.forget_permits(have - target);
                total.store(have - gone, Ordering::SeqCst);
            }
            let mut free = sem.available_permits();
            let wait = Duration::from_millis(300);
            let all = total.load(Ordering::SeqCst);
            if free == 0 || target < all {
                let sem2 = sem.clone();
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { break },
                    permit = sem2.acquire_owned() => drop(permit),
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            let linger = inner.cfg.claim_linger;
            if free < all && !linger.is_zero() {
                // Other workers are still busy: give them up to `claim_linger` to finish, so that
                // a stage of short jobs claims a batch per transaction instead of one job each
                // time a worker frees (a claim costs about as much as a short job).
                let n = u32::try_from(all).unwrap_or(u32::MAX);
                if let Ok(Ok(permits)) =
                    tokio::time::timeout(linger, sem.clone().acquire_many_owned(n)).await
                {
                    drop(permits);
                }
                free = sem.available_permits();
            }
            let jobs = tokio::select! {
                jobs = inner.aq.poll_batch_wait(stage.queue(), free, inner.cfg.visibility, wait) => jobs,
                changed = rx.changed() => { if changed.is_err() { break } continue }
            };
            let jobs = match jobs {
                Ok(jobs) => jobs,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let fewer = !jobs.is_empty() && jobs.len() < free && !linger.is_zero();
            for job in jobs {
                let Ok(permit) = sem.clone().try_acquire_owned() else {
                    // Cannot happen (we claimed at most `free`); give the job back at once.
                    let _ = inner.aq.release(job.lease, Duration::ZERO).await;
                    continue;
                };
                let this = self.clone();
                tasks.spawn(async move {
                    this.run_job(stage, job).await;
                    drop(permit);
                });
            }
            if fewer {
                // Let more jobs arrive so that the next claim takes several in one transaction.
                tokio::time::sleep(linger).await;
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    pub(super) async fn run_job(&self, stage: Stage, job: Job) {
        let started = Instant::now();
        // Heartbeat: a long job (a long document's rendering) keeps its lease, extended every
        // third of it. A transient failure (a busy or briefly unwritable database) is logged and
        // tried again after a twelfth of the lease, so several tries fit in the two thirds the
        // lease still has; only a lost lease ends it.
        let aq = self.inner.aq.clone();
        let visibility = self.inner.cfg.visibility;
        let lease = job.lease;
        let job_id = job.id;
        let heartbeat = tokio::spawn(async move {
            let mut next = visibility / 3;
            loop {
                tokio::time::sleep(next).await;
                next = match aq.extend(lease, visibility).await {
                    Ok(_) => visibility / 3,
                    Err(e) if lease_lost(&e) => {
                        tracing::warn!(job = job_id, "heartbeat stopped, lease lost: {e}");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(job = job_id, "heartbeat failed, trying again: {e}");
                        visibility / 12
                    }
                };
            }
        });
        let result = self.dispatch(stage, &job, started).await;
        heartbeat.abort();
        let Err(err) = result else { return };
        self.fail_job(stage, &job, err).await;
    }

    pub(super) fn job_doc_id(job: &Job) -> Option<i64> {
        payload_doc_id(&job.payload)
    }

    /// Whether a job is a tile: a fragment of its page's fan-in.
    pub(super) fn is_tile_job(stage: Stage, job: &Job) -> bool {
        stage == Stage::ImageToOcr
            && serde_json::from_slice::<ReadJob>(&job.payload).is_ok_and(|r| r.tile.is_some())
    }

    pub(super) async fn drop_job(&self, job: &Job) -> Result<(), JobError> {
        let lease = job.lease;
        self.tx(move |tx| Ok(tx.ack(lease)?)).await?;
        Ok(())
    }

    pub(super) async fn dispatch(
        &self,
        stage: Stage,
        job: &Job,
        started: Instant,
    ) -> Result<(), JobError> {
        match stage {
            Stage::PdfToImages => self.render_job(job, started).await,
            Stage::ImageToOcr => self.read_job(job, started).await,
            Stage::OcrToDatabase => self.store_job(job, started).await,
            Stage::EmbedText => self.embed_text_job(job, started).await,
            Stage::EmbedVisual => self.embed_visual_job(job, started).await,
        }
    }

    pub(super) async fn fail_job(&self, stage: Stage, job: &Job, err: JobError) {
        let doc_id = Self::job_doc_id(job);
        let queue = self.inner.queue.clone();
        let delay = self.inner.cfg.retry_delay;
        let lease = job.lease;
        if Self::is_tile_job(stage, job) {
            let last = matches!(err, JobError::Permanent(_)) || job.is_last_attempt();
            if last {
                // The fragment fails for good: fan-in buries it and fails the page's parent
                // (fail fast), whose next stage then marks the document failed.
                let fan = self.inner.fan.clone();
                let job = job.clone();
                let reason = match &err {
                    JobError::Permanent(r) | JobError::Retry(r) => r.clone(),
                };
                let _ = blocking(move || {
                    fan.fail(&job, &reason)?;
                    if let Some(doc_id) = doc_id {
                        queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
                            let msg = format!("{}: {reason}", stage.queue());
                            store::fail_document(tx, doc_id, &msg)?;
                            Ok(())
                        })?;
                    }
                    Ok(())
                })
                .await;
                self.inner.finished.notify_waiters();
                return;
            }
        }
        // A failure to record the failure leaves the job to its lease expiry: it comes back.
        let _ = blocking(move || {
            queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
                let (reason, dead) = match &err {
                    JobError::Permanent(reason) => {
                        tx.bury(lease, reason)?;
                        (reason.clone(), true)
                    }
                    JobError::Retry(reason) => (
                        reason.clone(),
                        tx.nack(lease, reason, Some(delay))? == Nacked::Dead,
                    ),
                };
                if dead && let Some(doc_id) = doc_id {
                    let msg = format!("{}: {reason}", stage.queue());
                    store::fail_document(tx, doc_id, &msg)?;
                }
                Ok(())
            })
        })
        .await;
        self.inner.finished.notify_waiters();
    }

    /// In a pipeline that does not embed ([`PipelineConfig::embed`](super::PipelineConfig)
    /// false), removes done document `doc_id`'s page images: nothing reads them again (their
    /// text is stored), and a conversion of many PDFs would keep gigabytes of them.
    pub(super) async fn drop_images_once_read(&self, doc_id: i64) {
        if self.inner.cfg.embed {
            return;
        }
        let dir = super::doc_dir(&self.inner.cfg.work_dir, doc_id);
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await;
        if let Ok(Err(e)) = removed {
            tracing::warn!(doc_id, error = %e, "the page images of a read document stay");
        }
    }

    /// Wakes [`Pipeline::wait_for`] when a job's commit ended its document.
    pub(super) fn finished(&self, ended: bool) {
        if ended {
            self.inner.finished.notify_waiters();
        }
    }
}

/// The document a job's payload is about (any stage's job, a fan-in completion included).
pub(super) fn payload_doc_id(payload: &[u8]) -> Option<i64> {
    if let Ok(c) = serde_json::from_slice::<Completion>(payload) {
        return serde_json::from_value::<PageJob>(c.data)
            .ok()
            .map(|p| p.doc_id);
    }
    serde_json::from_slice::<PageJob>(payload)
        .map(|p| p.doc_id)
        .or_else(|_| serde_json::from_slice::<RenderJob>(payload).map(|r| r.doc_id))
        .ok()
}

/// Whether a heartbeat's error means the job is no longer this worker's (another worker may
/// hold it, or it is finished): extending again can never succeed.
pub(super) fn lease_lost(e: &squeueha::Error) -> bool {
    matches!(
        e,
        squeueha::Error::StaleLease { .. } | squeueha::Error::NotFound(_)
    )
}

#[cfg(test)]
mod tests {
    use super::lease_lost;

    #[test]
    fn only_a_lost_lease_stops_the_heartbeat() {
        assert!(lease_lost(&squeueha::Error::StaleLease { job_id: 1 }));
        assert!(lease_lost(&squeueha::Error::NotFound("job 1".into())));
        for transient in [
            squeueha::Error::Busy { attempts: 5 },
            squeueha::Error::DiskFull("no space".into()),
            squeueha::Error::TransactionAborted,
            squeueha::Error::Pool("timed out".into()),
        ] {
            assert!(!lease_lost(&transient), "{transient}");
        }
    }
}
