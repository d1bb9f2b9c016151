//! Stage `pdf_to_images`: render a document's pages, write them (and their tiles) to disk, and
//! enqueue one reading job per page or tile; a page with a usable text layer is recorded as read
//! by it and goes straight to `ocr_to_database`.

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

use fanin::ParentSpec;
use sha2::{Digest, Sha256};
use squeueha::{Job, NewJob};

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::render::{RenderedPage, encode_png, render_pages};
use crate::store::{self, DocStatus, PageImage};
use crate::text_layer::TextLayer;
use crate::tiling::{cut_tiles, tile_grid};
use crate::vision::VisionReader;

use super::{JobError, PageJob, Pipeline, ReadJob, RenderJob, Stage, doc_dir, hex, tile_path};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    pub(super) async fn render_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let rj: RenderJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let doc_id = rj.doc_id;
        let doc = self.read(move |c| Ok(store::document(c, doc_id)?)).await?;
        // Failed, done or deleted meanwhile: nothing to render.
        let Some(doc) = doc.filter(|d| d.status == DocStatus::Pending) else {
            return self.drop_job(job).await;
        };
        let path = doc.source_path();
        // Refuse an oversized file before reading it into memory.
        let limit = self.inner.cfg.render.max_file_bytes;
        if let Ok(meta) = tokio::fs::metadata(&path).await
            && meta.len() > limit
        {
            let e = crate::render::RenderError::FileTooLarge {
                size: meta.len(),
                limit,
            };
            return Err(JobError::Permanent(format!("{}: {e}", doc.path)));
        }
        // Reading and hashing a whole file is blocking work: off the async workers.
        let read = tokio::task::spawn_blocking(move || {
            std::fs::read(&path).map(|data| {
                let sha = hex(&Sha256::digest(&data));
                (data, sha)
            })
        })
        .await
        .map_err(|e| JobError::Retry(e.to_string()))?;
        let (data, sha) = match read {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JobError::Permanent(format!("{}: file not found", doc.path)));
            }
            Err(e) => return Err(JobError::Retry(e.to_string())),
        };
        if sha != doc.sha256 {
            return Err(JobError::Permanent(format!(
                "{}: file changed since submission",
                doc.path
            )));
        }
        let first = self
            .read(move |c| Ok(store::last_rendered_page(c, doc_id)?))
            .await?
            + 1;
        let (tx_pages, mut rx_pages) =
            tokio::sync::mpsc::channel::<RenderedPage>(self.inner.cfg.page_buffer.max(1));
        let render_cfg = self.inner.cfg.render;
        let renderer = tokio::task::spawn_blocking(move || {
            render_pages(data, &render_cfg, first, |page| {
                if tx_pages.blocking_send(page).is_err() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
        });
        let dir = doc_dir(&self.inner.cfg.work_dir, doc_id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| JobError::Retry(e.to_string()))?;
        let mut page_error: Option<JobError> = None;
        while let Some(page) = rx_pages.recv().await {
            match self.save_page(doc_id, &dir, page).await {
                Ok(true) => {}
                // The document failed (another stage's dead letter) or was deleted meanwhile:
                // stop rendering.
                Ok(false) => break,
                Err(e) => {
                    page_error = Some(e);
                    break;
                }
            }
        }
        drop(rx_pages);
        let rendered = renderer.await.map_err(|e| JobError::Retry(e.to_string()))?;
        if let Some(e) = page_error {
            return Err(e);
        }
        let page_count = rendered.map_err(|e| JobError::Permanent(format!("{}: {e}", doc.path)))?;
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = tx.connection();
                if !store::is_pending(c, doc_id)? {
                    tx.ack(lease)?;
                    return Ok(false);
                }
                store::set_page_count(c, doc_id, page_count)?;
                let finished = store::finish_rendering(c, doc_id)?;
                store::add_stage_time(c, doc_id, Stage::PdfToImages.queue(), secs, 0.0)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        self.finished(finished);
        Ok(())
    }

    /// Writes a page's PNG (and its tiles'), durably, and records the page with its read jobs;
    /// `false` when the document is no longer pending (nothing recorded, the files just written
    /// removed: rendering stops).
    pub(super) async fn save_page(
        &self,
        doc_id: i64,
        dir: &Path,
        mut page: RenderedPage,
    ) -> Result<bool, JobError> {
        let path = dir.join(format!("page-{:05}.png", page.page_no));
        let tiles_cfg = self.inner.cfg.tiles;
        let write_path = path.clone();
        // A page with a usable text layer keeps it: it is not read, so not tiled either.
        let text_layer = page
            .text_layer
            .take()
            .filter(TextLayer::is_usable)
            .map(TextLayer::into_reading);
        let kept_text_layer = text_layer.is_some();
        let (w, h, bytes, tiles) = tokio::task::spawn_blocking(move || -> Result<_, JobError> {
            let png = encode_png(&page.image).map_err(|e| JobError::Permanent(e.to_string()))?;
            write_synced(&write_path, &png).map_err(|e| JobError::Retry(e.to_string()))?;
            let (w, h) = page.image.dimensions();
            let tiles = if !kept_text_layer && png.len() as u64 > tiles_cfg.threshold_bytes {
                tile_grid(w, h, &tiles_cfg)
            } else {
                Vec::new()
            };
            // Tiles are cut here, once, from the page still in memory; each read job reads its own.
            let encoded =
                cut_tiles(&page.image, &tiles).map_err(|e| JobError::Permanent(e.to_string()))?;
            for (tile, bytes) in tiles.iter().zip(encoded) {
                write_synced(&tile_path(&write_path, tile.index), &bytes)
                    .map_err(|e| JobError::Retry(e.to_string()))?;
            }
            // The renames are durable once the directory is: before the page's row commits, so
            // a recorded page always has its image after a power loss.
            if let Some(dir) = write_path.parent() {
                std::fs::File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| JobError::Retry(e.to_string()))?;
            }
            Ok((w, h, png.len() as u64, tiles))
        })
        .await
        .map_err(|e| JobError::Retry(e.to_string()))??;
        let page_no = page.page_no;
        let page_count = page.page_count;
        let attempts = self.inner.cfg.max_attempts;
        let path_s = path.to_string_lossy().to_string();
        let fan = self.inner.fan.clone();
        let tile_indices: Vec<u32> = tiles.iter().map(|t| t.index).collect();
        let live = self
            .tx(move |tx| {
                let c = tx.connection();
                // Checked here rather than before each page: one transaction per page, no extra read.
                if !store::is_pending(c, doc_id)? {
                    return Ok(false);
                }
                store::set_page_count(c, doc_id, page_count)?;
                let img = PageImage {
                    doc_id,
                    page_no,
                    width: w,
                    height: h,
                    image_bytes: bytes,
                    image_path: &path_s,
                    tiles: tiles.len().max(1) as u32,
                };
                // The page row and its read jobs are created together, once: a rendering resumed
                // after a crash skips recorded pages, and a page rendered twice enqueues nothing.
                if !store::insert_page(c, &img)? {
                    return Ok(true);
                }
                if let Some(reading) = &text_layer {
                    if store::record_page_reading(c, doc_id, page_no, reading)? {
                        tx.enqueue(
                            Stage::OcrToDatabase.queue(),
                            NewJob::json(&PageJob { doc_id, page_no })?.max_attempts(attempts),
                        )?;
                    }
                    return Ok(true);
                }
                if tiles.is_empty() {
                    tx.enqueue(
                        Stage::ImageToOcr.queue(),
                        NewJob::json(&ReadJob {
                            doc_id,
                            page_no,
                            tile: None,
                        })?
                        .max_attempts(attempts),
                    )?;
                    return Ok(true);
                }
                // A tiled page is a fan-in parent: one fragment job per tile; the last tile's
                // report enqueues the page's ocr_to_database job in the same transaction.
                let mut jobs = Vec::with_capacity(tiles.len());
                for &t in &tiles {
                    jobs.push(
                        NewJob::json(&ReadJob {
                            doc_id,
                            page_no,
                            tile: Some(t),
                        })?
                        .max_attempts(attempts),
                    );
                }
                let spec = ParentSpec::new(
                    format!("page {doc_id}:{page_no}"),
                    Stage::ImageToOcr.queue(),
                )
                .jobs(jobs)
                .then(
                    Stage::OcrToDatabase.queue(),
                    serde_json::json!({ "doc_id": doc_id, "page_no": page_no }),
                );
                let parent = fan.create_parent_in(tx, &spec)?;
                store::set_page_fan_in(tx.connection(), doc_id, page_no, parent)?;
                Ok(true)
            })
            .await
            .map_err(JobError::from)?;
        if !live {
            // Not recorded (the document failed or was deleted meanwhile): these files are
            // nobody's; the directory goes too when this page was its last file.
            let _ = std::fs::remove_file(&path);
            for i in tile_indices {
                let _ = std::fs::remove_file(tile_path(&path, i));
            }
            let _ = std::fs::remove_dir(dir);
        }
        Ok(live)
    }
}

/// Writes `bytes` to `path` through a temporary file, flushed to disk before the rename: a
/// reader never sees a partial image, and the image survives a power loss.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("png.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}
