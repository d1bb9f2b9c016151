//! Work for a lane that waits outside its queue, as the allocator counts it: requests the
//! coordinator holds for a parked lane's model, and the ingest pipeline's pages and chunks
//! waiting for the lane that reads or embeds them.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use horos_modes::Demand;

/// Several sources of work for one lane, added up (the oldest wait is the oldest of all).
pub struct Demands(pub Vec<Arc<dyn Demand>>);

impl Demand for Demands {
    fn waiting(&self) -> (usize, f64) {
        self.0.iter().fold((0, 0.0), |(n, oldest), d| {
            let (m, wait) = d.waiting();
            (n + m, f64::max(oldest, wait))
        })
    }
}

/// Adds `more` to what `demand` already counts.
pub fn add(demand: &mut Option<Arc<dyn Demand>>, more: Arc<dyn Demand>) {
    *demand = Some(match demand.take() {
        None => more,
        Some(first) => Arc::new(Demands(vec![first, more])),
    });
}

/// The jobs of one stage of the ingest pipeline not done yet (waiting, in flight or waiting
/// for a retry), read every second on a blocking thread: the allocator's reads never touch the
/// pipeline's database. The reading stops once the last handle is dropped.
pub struct StageBacklog {
    last: Mutex<(usize, f64)>,
}

/// How often a stage's backlog is read.
const REFRESH: Duration = Duration::from_secs(1);

impl StageBacklog {
    /// Watches `stage` (a queue name of the pipeline's `queue`).
    pub fn watch(queue: squeueha::Queue, stage: &'static str) -> Arc<StageBacklog> {
        let backlog = Arc::new(StageBacklog {
            last: Mutex::new((0, 0.0)),
        });
        let weak: Weak<StageBacklog> = Arc::downgrade(&backlog);
        tokio::spawn(async move {
            loop {
                let q = queue.clone();
                let read = tokio::task::spawn_blocking(move || q.stats(stage)).await;
                let Some(me) = weak.upgrade() else { break };
                match read {
                    Ok(Ok(s)) => {
                        let oldest = s.oldest_ready_age_ms.unwrap_or(0).max(0) as f64 / 1000.0;
                        let pending = usize::try_from(s.pending()).unwrap_or(usize::MAX);
                        *me.last.lock().unwrap_or_else(|e| e.into_inner()) = (pending, oldest);
                    }
                    // Unreadable for now (busy): the last reading stands until the next one.
                    Ok(Err(e)) => tracing::debug!(stage, error = %e, "ingest backlog not read"),
                    Err(e) => tracing::debug!(stage, error = %e, "ingest backlog not read"),
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
    use super::*;

    struct Fixed(usize, f64);

    impl Demand for Fixed {
        fn waiting(&self) -> (usize, f64) {
            (self.0, self.1)
        }
    }

    #[tokio::test]
    async fn sources_add_up_and_a_stage_backlog_follows_its_queue() {
        let mut d: Option<Arc<dyn Demand>> = None;
        add(&mut d, Arc::new(Fixed(2, 5.0)));
        add(&mut d, Arc::new(Fixed(3, 1.0)));
        assert_eq!(d.unwrap().waiting(), (5, 5.0));

        let dir = tempfile::tempdir().unwrap();
        let queue = squeueha::Queue::open(dir.path().join("ingest.db")).unwrap();
        let backlog = StageBacklog::watch(queue.clone(), "image_to_ocr");
        for i in 0..3 {
            queue
                .enqueue("image_to_ocr", squeueha::NewJob::new(format!("page {i}")))
                .unwrap();
        }
        queue
            .enqueue("embed_text", squeueha::NewJob::new("chunk"))
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
    }
}
