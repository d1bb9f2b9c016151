//! The pipeline's waiting work as a server's demand: [`StageBacklog`], the seam's
//! [`Demand`] over one stage's queue, so that an allocator that parks a model's server counts
//! the pages waiting to be read (or the chunks waiting to be embedded) as requests for it.
//! Which stages a model's server does is
//! [`PipelineSettings::stages_served_by`](crate::configured::PipelineSettings::stages_served_by).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use horos_server_control::Demand;

use crate::pipeline::Stage;

/// The jobs of one stage not done yet (waiting, in flight or waiting for a retry), and the age of
/// the oldest ready one, read every second on a blocking thread: a [`Demand::waiting`] call
/// never touches the pipeline's database. The reading stops once the last handle is dropped.
pub struct StageBacklog {
    last: Mutex<(usize, f64)>,
}

/// How often a stage's backlog is read.
const REFRESH: Duration = Duration::from_secs(1);

impl StageBacklog {
    /// Watches `stage` of the pipeline whose queue is `queue`
    /// ([`Pipeline::queue`](crate::pipeline::Pipeline::queue)). Needs a Tokio runtime.
    pub fn watch(queue: squeueha::Queue, stage: Stage) -> Arc<StageBacklog> {
        let backlog = Arc::new(StageBacklog {
            last: Mutex::new((0, 0.0)),
        });
        let weak: Weak<StageBacklog> = Arc::downgrade(&backlog);
        let name = stage.queue();
        tokio::spawn(async move {
            loop {
                let q = queue.clone();
                let read = tokio::task::spawn_blocking(move || q.stats(name)).await;
                let Some(me) = weak.upgrade() else { break };
                match read {
                    Ok(Ok(s)) => {
                        let oldest = s.oldest_ready_age_ms.unwrap_or(0).max(0) as f64 / 1000.0;
                        let pending = usize::try_from(s.pending()).unwrap_or(usize::MAX);
                        *me.last.lock().unwrap_or_else(|e| e.into_inner()) = (pending, oldest);
                    }
                    // Unreadable for now (busy): the last reading stands until the next one.
                    Ok(Err(e)) => {
                        tracing::debug!(stage = name, error = %e, "ingest backlog not read")
                    }
                    Err(e) => tracing::debug!(stage = name, error = %e, "ingest backlog not read"),
                }
                drop(me);
                tokio::time::sleep(REFRESH).await;
            }
        });
        backlog
    }
}

impl Demand for StageBacklog {
    fn waiting(&self) -> (usize, f64) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_stage_backlog_counts_its_own_stages_jobs_only() {
        let dir = tempfile::tempdir().unwrap();
        let queue = squeueha::Queue::open(dir.path().join("ingest.db")).unwrap();
        let backlog = StageBacklog::watch(queue.clone(), Stage::ImageToOcr);
        for i in 0..3 {
            queue
                .enqueue(
                    Stage::ImageToOcr.queue(),
                    squeueha::NewJob::new(format!("page {i}")),
                )
                .unwrap();
        }
        queue
            .enqueue(Stage::EmbedText.queue(), squeueha::NewJob::new("chunk"))
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while backlog.waiting().0 != 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                backlog.waiting()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Still 3 a reading later: the other stage's chunk is not counted.
        tokio::time::sleep(REFRESH + Duration::from_millis(200)).await;
        assert_eq!(backlog.waiting().0, 3);
    }
}
