//! Stage `embed_text`: embed a page's chunks with the [`TextEmbedder`].

use std::time::Instant;

use squeueha::Job;

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self, EmbedStep};
use crate::vision::VisionReader;

use super::{JobError, PageJob, Pipeline, Stage};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    pub(super) async fn embed_text_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let pj: PageJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let (doc_id, page_no) = (pj.doc_id, pj.page_no);
        let Some(chunks) = self
            .read(move |c| {
                if !store::is_pending(c, doc_id)? {
                    return Ok(None);
                }
                Ok(Some(store::page_chunks(c, doc_id, page_no)?))
            })
            .await?
        else {
            return self.drop_job(job).await;
        };
        let mut ids = Vec::with_capacity(chunks.len());
        let mut vectors = Vec::with_capacity(chunks.len());
        let infer = Instant::now();
        for batch in chunks.chunks(self.inner.cfg.embed_batch.max(1)) {
            let texts: Vec<String> = batch.iter().map(|c| c.1.clone()).collect();
            let got = self.inner.text.embed(texts).await.map_err(|e| {
                if e.is_retryable() {
                    JobError::Retry(e.to_string())
                } else {
                    JobError::Permanent(e.to_string())
                }
            })?;
            if got.len() != batch.len() {
                return Err(JobError::Retry(format!(
                    "{} vectors for {} texts",
                    got.len(),
                    batch.len()
                )));
            }
            ids.extend(batch.iter().map(|c| c.0));
            vectors.extend(got);
        }
        let infer_secs = if chunks.is_empty() {
            0.0
        } else {
            infer.elapsed().as_secs_f64()
        };
        let model = self.inner.text.name().to_string();
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = &mut *tx;
                if !store::is_pending(c, pj.doc_id)? {
                    tx.ack(lease)?;
                    return Ok(false);
                }
                store::store_chunk_vectors(c, &ids, &vectors, &model)?;
                let finished = store::finish_step(c, pj.doc_id, pj.page_no, EmbedStep::Text)?;
                store::add_stage_time(c, pj.doc_id, Stage::EmbedText.queue(), secs, infer_secs)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        // The new vectors into the in-memory index now (once it is built), not at the next
        // question.
        let index = self.inner.text_index.clone();
        let synced = self.read(move |c| {
            if index.is_built() {
                index.sync(c)?;
            }
            Ok(())
        });
        if let Err(e) = synced.await {
            tracing::warn!(error = %e, "text-vector index not brought up to date (next question will)");
        }
        self.finished(finished);
        Ok(())
    }
}
