//! Stage `image_to_ocr`: read a page or a tile with the [`VisionReader`].

use std::sync::Arc;
use std::time::Instant;

use fanin::FragmentResult;
use squeueha::{Job, NewJob};

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self};
use crate::vision::VisionReader;

use super::{JobError, PageJob, Pipeline, ReadJob, Stage, blocking};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    pub(super) async fn read_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let rj: ReadJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let Some(png) = self
            .load_page(rj.doc_id, rj.page_no, rj.tile.map(|t| t.index))
            .await?
        else {
            return self.drop_job(job).await;
        };
        let mut reading = self.inner.reader.read(Arc::new(png)).await.map_err(|e| {
            if e.is_retryable() {
                JobError::Retry(e.to_string())
            } else {
                JobError::Permanent(e.to_string())
            }
        })?;
        reading.read_by.get_or_insert(self.inner.reader.read_by());
        let secs = started.elapsed().as_secs_f64();
        if rj.tile.is_some() {
            // A tile: fan-in records it and acks its job; the last one enqueues the page's
            // ocr_to_database job, all in one transaction.
            let fan = self.inner.fan.clone();
            let job = job.clone();
            let bytes = serde_json::to_vec(&(rj.tile, &reading))
                .map_err(|e| JobError::Permanent(e.to_string()))?;
            blocking(move || Ok(fan.complete(&job, FragmentResult::Bytes(bytes))?)).await?;
            let infer = reading.inference_seconds;
            self.tx(move |tx| {
                if store::is_pending(tx, rj.doc_id)? {
                    store::add_stage_time(tx, rj.doc_id, Stage::ImageToOcr.queue(), secs, infer)?;
                }
                Ok(())
            })
            .await?;
            return Ok(());
        }
        let lease = job.lease;
        let attempts = self.inner.cfg.max_attempts;
        self.tx(move |tx| {
            let c = &mut *tx;
            // Failed or deleted while it was read: nothing to record.
            if !store::is_pending(c, rj.doc_id)? {
                tx.ack(lease)?;
                return Ok(());
            }
            if store::record_page_reading(c, rj.doc_id, rj.page_no, &reading)? {
                tx.enqueue(
                    Stage::OcrToDatabase.queue(),
                    NewJob::json(&PageJob {
                        doc_id: rj.doc_id,
                        page_no: rj.page_no,
                    })?
                    .max_attempts(attempts),
                )?;
            }
            store::add_stage_time(
                tx,
                rj.doc_id,
                Stage::ImageToOcr.queue(),
                secs,
                reading.inference_seconds,
            )?;
            tx.ack(lease)?;
            Ok(())
        })
        .await?;
        Ok(())
    }
}
