//! Stage `embed_visual`: embed a page image with the [`VisualEmbedder`] (many vectors).

use std::sync::Arc;
use std::time::Instant;

use squeueha::Job;

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self, EmbedStep};
use crate::vision::VisionReader;

use super::{JobError, PageJob, Pipeline, Stage};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    pub(super) async fn embed_visual_job(
        &self,
        job: &Job,
        started: Instant,
    ) -> Result<(), JobError> {
        let pj: PageJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let Some(png) = self.load_page(pj.doc_id, pj.page_no, None).await? else {
            return self.drop_job(job).await;
        };
        let infer = Instant::now();
        let mv = self
            .inner
            .visual
            .embed_image(Arc::new(png))
            .await
            .map_err(|e| {
                if e.is_retryable() {
                    JobError::Retry(e.to_string())
                } else {
                    JobError::Permanent(e.to_string())
                }
            })?;
        let infer_secs = infer.elapsed().as_secs_f64();
        let factor = self.inner.cfg.visual_pool_factor;
        // Pooled off the async threads (a k-means over the page's vectors: milliseconds).
        let mv = if factor > 1 {
            tokio::task::spawn_blocking(move || crate::maxsim::MultiVector {
                data: crate::visual_index::pool_tokens(&mv.data, mv.dim, factor, 2),
                dim: mv.dim,
            })
            .await
            .map_err(|e| JobError::Retry(format!("pooling the page's vectors: {e}")))?
        } else {
            mv
        };
        let model = self.inner.visual.name().to_string();
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = &mut *tx;
                if !store::is_pending(c, pj.doc_id)? {
                    tx.ack(lease)?;
                    return Ok(false);
                }
                store::store_page_vectors(c, pj.doc_id, pj.page_no, &mv, &model)?;
                let finished = store::finish_step(c, pj.doc_id, pj.page_no, EmbedStep::Visual)?;
                store::add_stage_time(c, pj.doc_id, Stage::EmbedVisual.queue(), secs, infer_secs)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        self.finished(finished);
        Ok(())
    }
}
