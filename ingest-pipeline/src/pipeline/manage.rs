//! Operations on whole documents: the dead-letter sweep that ends every document, a failed
//! document's retry, a document's deletion.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fanin::FanIn;
use squeueha::QueueTx;

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self, Deleted, DocStatus, Document};
use crate::vision::VisionReader;

use super::workers::payload_doc_id;
use super::{
    Pipeline, PipelineError, Stage, Submission, blocking, doc_dir, insert_and_enqueue, sha256_file,
};

/// Dead letters read per query by the sweep.
const SWEEP_PAGE: usize = 1_000;

/// How far before its last sweep's newest dead letter a sweep reads again, in milliseconds.
const SWEEP_OVERLAP_MS: i64 = 60_000;

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// Ends every pending document that a dead letter stopped: a job dead-lettered without its
    /// worker saying so (its lease expired on its last attempt: the worker crashed or hung)
    /// leaves its document pending for ever otherwise. The document is marked failed with the
    /// dead letter's reason (a tile's too: its page's fan-in parent is left as it is, since the
    /// document's other jobs are dropped). Returns how many documents this call failed.
    ///
    /// The workers run it every [`PipelineConfig::sweep_interval`](super::PipelineConfig) (and
    /// once when they start); it reads dead letters only while some document is pending, and
    /// then only those that died since its last read (a minute of overlap aside), so its cost
    /// does not grow with the dead-letter table.
    pub async fn reconcile_dead_letters(&self) -> Result<usize, PipelineError> {
        if !self.read(|c| Ok(store::has_pending_documents(c)?)).await? {
            return Ok(0);
        }
        let queue = self.inner.queue.clone();
        let this = self.clone();
        let failed = blocking(move || {
            let swept = this.inner.swept.lock().map(|s| *s).unwrap_or_default();
            // The first dead letter of each document: its reason is the document's.
            let mut reasons: BTreeMap<i64, String> = BTreeMap::new();
            let mut last = swept;
            for stage in Stage::ALL {
                // What died since the last sweep, and a minute before it: another process's
                // clock may be a little behind ours (a document failed twice is still failed).
                let mut after = (
                    swept[stage.index()].0.saturating_sub(SWEEP_OVERLAP_MS),
                    i64::MIN,
                );
                loop {
                    let page = queue.dead_letters_after(stage.queue(), after, SWEEP_PAGE)?;
                    for dead in &page {
                        if let Some(doc_id) = payload_doc_id(&dead.payload) {
                            let reason = dead.last_error.as_deref().unwrap_or("dead-lettered");
                            reasons
                                .entry(doc_id)
                                .or_insert_with(|| format!("{}: {reason}", stage.queue()));
                        }
                    }
                    let full = page.len() == SWEEP_PAGE;
                    if let Some(d) = page.last() {
                        after = (d.died_at, d.id);
                        last[stage.index()] = after;
                    }
                    if !full {
                        break;
                    }
                }
            }
            let failed =
                queue.transaction(|tx: &mut QueueTx<'_>| -> Result<usize, PipelineError> {
                    let mut failed = 0;
                    for (doc_id, reason) in &reasons {
                        if store::is_pending(tx, *doc_id)? {
                            store::fail_document(tx, *doc_id, reason)?;
                            failed += 1;
                        }
                    }
                    Ok(failed)
                })?;
            // Recorded once their documents are: a failed sweep reads them again.
            if let Ok(mut s) = this.inner.swept.lock() {
                *s = last;
            }
            Ok(failed)
        })
        .await?;
        self.finished(failed > 0);
        Ok(failed)
    }

    /// Ingests a failed document again from scratch: in one transaction, the failed document
    /// and everything derived from it are deleted ([`Pipeline::delete`]) and the file at its
    /// path, as it is now, is submitted to its collection ([`Pipeline::submit_to`]). The new
    /// document has a new id
    /// (so a job of the old one still queued finds nothing); [`Submission::Known`] when those
    /// bytes are another document's. Refused ([`PipelineError::NotFailed`]) for a document that
    /// is pending or done, and with nothing changed when its file cannot be read.
    pub async fn retry(&self, doc_id: i64) -> Result<Submission, PipelineError> {
        let doc = self
            .read(move |c| Ok(store::document(c, doc_id)?))
            .await?
            .ok_or(PipelineError::UnknownDocument(doc_id))?;
        let queue = self.inner.queue.clone();
        let fan = self.inner.fan.clone();
        let attempts = self.inner.cfg.max_attempts;
        let (submission, deleted) = blocking(move || {
            let path = doc.source_path();
            let sha = sha256_file(&path)?;
            let collection = doc.collection.clone();
            queue.transaction(|tx: &mut QueueTx<'_>| -> Result<_, PipelineError> {
                let deleted = delete_in(&fan, tx, doc_id, true)?
                    .ok_or(PipelineError::UnknownDocument(doc_id))?;
                let submitted = insert_and_enqueue(tx, &sha, &path, &collection, attempts)?;
                Ok((submitted, deleted))
            })
        })
        .await?;
        self.remove_files(deleted).await;
        Ok(submission)
    }

    /// Puts the pipeline's dead job `job_id` back in its stage's queue with fresh attempts (its
    /// new id), when its document is still being ingested. A job whose document has ended is
    /// refused ([`PipelineError::DocumentEnded`]): the stage would drop it at once, since a
    /// document's jobs only run while it is pending; a failed document is ingested again with
    /// [`Pipeline::retry`]. [`PipelineError::NoDeadJob`] when no stage has that dead letter.
    pub async fn requeue_dead(&self, job_id: i64) -> Result<i64, PipelineError> {
        let aq = &self.inner.aq;
        let dead = aq
            .dead_letter(job_id)
            .await?
            .filter(|d| Stage::ALL.iter().any(|s| s.queue() == d.queue))
            .ok_or(PipelineError::NoDeadJob(job_id))?;
        if let Some(doc_id) = payload_doc_id(&dead.payload) {
            let status = self
                .read(move |c| Ok(store::document(c, doc_id)?.map(|d| d.status)))
                .await?;
            if status != Some(DocStatus::Pending) {
                return Err(PipelineError::DocumentEnded {
                    job: job_id,
                    doc: doc_id,
                    status,
                });
            }
        }
        Ok(aq.requeue_dead(job_id).await?)
    }

    /// Deletes a document with everything derived from it: its rows (pages, text and full-text
    /// index, tables, chunks and their vectors, visual vectors, stage times) and its tiled pages'
    /// fan-in parents (the tiles' readings) in one transaction, then its page images. A pending
    /// document's jobs still queued find no document and are dropped. Returns the document as
    /// it was; `None` when there is no such document.
    pub async fn delete(&self, doc_id: i64) -> Result<Option<Document>, PipelineError> {
        let queue = self.inner.queue.clone();
        let fan = self.inner.fan.clone();
        let deleted = blocking(move || {
            queue.transaction(|tx: &mut QueueTx<'_>| delete_in(&fan, tx, doc_id, false))
        })
        .await?;
        let Some(deleted) = deleted else {
            return Ok(None);
        };
        let doc = deleted.0.document.clone();
        self.remove_files(deleted).await;
        Ok(Some(doc))
    }

    /// Removes a deleted document's chunks from the text-vector index and its files once its
    /// rows are gone. A failure leaves files nobody refers to (logged), never a row without its
    /// file.
    async fn remove_files(&self, (deleted, fan_in_files): (Deleted, Vec<PathBuf>)) {
        self.inner.text_index.forget_document(deleted.document.id);
        let work_dir = self.inner.cfg.work_dir.clone();
        let _ = tokio::task::spawn_blocking(move || {
            remove_document_files(&work_dir, &deleted, &fan_in_files)
        })
        .await;
    }
}

/// Deletes document `doc_id` with everything derived from it in `tx`, its tiled pages' fan-in
/// parents included; with `failed_only`, only a failed document (else why not). Returns the
/// deleted document and the fan-in's result files, to remove once committed.
fn delete_in(
    fan: &FanIn,
    tx: &mut QueueTx<'_>,
    doc_id: i64,
    failed_only: bool,
) -> Result<Option<(Deleted, Vec<PathBuf>)>, PipelineError> {
    if failed_only {
        let doc = store::document(tx, doc_id)?.ok_or(PipelineError::UnknownDocument(doc_id))?;
        if doc.status != DocStatus::Failed {
            return Err(PipelineError::NotFailed {
                id: doc_id,
                status: doc.status,
            });
        }
    }
    let Some(deleted) = store::delete_document(tx, doc_id)? else {
        return Ok(None);
    };
    let mut files = Vec::new();
    for &parent in &deleted.fan_in_parents {
        files.extend(fan.delete_parent_in(tx, parent)?);
    }
    Ok(Some((deleted, files)))
}

/// Removes the files of a deleted document: its directory (tiles and leftovers included), the
/// directory named by its SHA-256 where releases before per-document directories wrote, any
/// page image recorded elsewhere, and its fan-in parents' result files.
fn remove_document_files(work_dir: &Path, deleted: &Deleted, fan_in_files: &[PathBuf]) {
    let doc = &deleted.document;
    for dir in [doc_dir(work_dir, doc.id), work_dir.join(&doc.sha256)] {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(document = doc.id, dir = %dir.display(), "not removed: {e}"),
        }
    }
    for path in deleted.image_paths.iter().chain(fan_in_files) {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(document = doc.id, path = %path.display(), "not removed: {e}"),
        }
    }
}
