//! Stage `pdf_to_images`: render a document's pages, turn the ones to be read upright
//! ([`PipelineConfig::orientation`](super::PipelineConfig::orientation)), write them (and their
//! tiles) to disk, and enqueue one reading job per page or tile; a page with a usable text layer
//! is recorded as read by it and goes straight to `ocr_to_database`. A page the renderer gave up
//! alone ([`RenderedPage::failure`]: its streams decode past
//! [`RenderConfig::max_decoded_bytes`](crate::render::RenderConfig::max_decoded_bytes)) is
//! recorded as failed with its reason, done at once, and the document goes on.
//!
//! With [`PipelineConfig::pdf_workers`](super::PipelineConfig::pdf_workers) the document is
//! opened and its pages rendered in a fresh worker process of the pipeline's pool
//! ([`render_in_worker`]), which sends each page's PNG and text layer back; a worker that breaks
//! (its memory or CPU limit, its time per page, a crash) fails the document for good with the
//! typed reason ([`FailureReason`](crate::render::FailureReason): `resource_limit`, `timeout`,
//! `crashed`), the pages recorded before it kept. Without, in this process ([`render_pages`]).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fanin::ParentSpec;
use sha2::{Digest, Sha256};
use squeueha::{Job, NewJob};

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::orientation;
use crate::render::{RenderConfig, RenderedPage, encode_png, render_pages};
use crate::store::{self, DocStatus, PageFailed, PageImage};
use crate::text_layer::TextLayer;
use crate::tiling::{Tile, TileConfig, cut_tiles, tile_grid};
use crate::vision::{Reading, TesseractReader, VisionReader};
use crate::worker::{WorkerError, WorkerPage, WorkerPool};
use image::RgbImage;

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
            tokio::sync::mpsc::channel::<Rendered>(self.inner.cfg.page_buffer.max(1));
        let mut render_cfg = self.inner.cfg.render;
        // A page kept by its text layer is rasterized only for the visual embedder.
        render_cfg.raster_text_pages = self.inner.cfg.embed;
        let name = doc.path.clone();
        let renderer = match self.inner.pdf_workers.clone() {
            Some(pool) => tokio::spawn(async move {
                render_in_worker(&pool, data, &render_cfg, first, tx_pages)
                    .await
                    .map_err(|e| match e {
                        // Not the document's fault: the machine's (no such program, no pipe).
                        WorkerError::Spawn { .. } => JobError::Retry(e.to_string()),
                        _ => JobError::Permanent(format!("{name}: {e}")),
                    })
            }),
            None => tokio::task::spawn_blocking(move || {
                render_pages(data, &render_cfg, first, |page| {
                    if tx_pages.blocking_send(Rendered::from(page)).is_err() {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .map_err(|e| JobError::Permanent(format!("{name}: {e}")))
            }),
        };
        let dir = doc_dir(&self.inner.cfg.work_dir, doc_id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| JobError::Retry(e.to_string()))?;
        // Pages are made ready (turned upright, encoded, written) a few at a time on the
        // blocking pool, and recorded one by one in page order: rendering resumes after the last
        // page recorded, so none may be recorded before the pages ahead of it.
        let ahead = self.inner.cfg.page_buffer.max(1);
        let mut preparing = std::collections::VecDeque::with_capacity(ahead);
        let mut page_error: Option<JobError> = None;
        let mut stopped = false;
        loop {
            if preparing.len() < ahead
                && let Some(page) = rx_pages.recv().await
            {
                preparing.push_back(self.prepare_page(&dir, page));
                continue;
            }
            // As many pages ahead as allowed, or no more to come: record the oldest.
            let Some(oldest) = preparing.pop_front() else {
                break;
            };
            match self.record_page(doc_id, &dir, oldest).await {
                Ok(true) => {}
                // The document failed (another stage's dead letter) or was deleted meanwhile:
                // stop rendering.
                Ok(false) => {
                    stopped = true;
                    break;
                }
                Err(e) => {
                    page_error = Some(e);
                    stopped = true;
                    break;
                }
            }
        }
        drop(rx_pages);
        if stopped {
            // The pages made ready after the one that stopped rendering are not recorded: their
            // files are nobody's, and the directory goes too when they were its last files.
            for pending in preparing {
                if let Ok(Ok(page)) = pending.await {
                    page.remove_files();
                }
            }
            let _ = tokio::fs::remove_dir(&dir).await;
        }
        let rendered = renderer.await.map_err(|e| JobError::Retry(e.to_string()))?;
        if let Some(e) = page_error {
            return Err(e);
        }
        let page_count = rendered?;
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = &mut *tx;
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
        if finished {
            self.drop_images_once_read(doc_id).await;
        }
        self.finished(finished);
        Ok(())
    }

    /// Makes a page ready on the blocking pool ([`prepare_page`]), with this pipeline's tiling
    /// and orientation detection.
    fn prepare_page(
        &self,
        dir: &Path,
        page: Rendered,
    ) -> tokio::task::JoinHandle<Result<PreparedPage, JobError>> {
        let path = dir.join(format!("page-{:05}.png", page.page_no));
        let tiles = self.inner.cfg.tiles;
        let orientation = self.inner.cfg.orientation.clone();
        let max_pixels = self.inner.cfg.render.max_page_pixels;
        tokio::task::spawn_blocking(move || {
            prepare_page(page, path, &tiles, orientation.as_ref(), max_pixels)
        })
    }

    /// Records a page made ready by [`Pipeline::prepare_page`] with its read jobs (or, when it
    /// keeps its text layer, its reading and its `ocr_to_database` job); `false` when the
    /// document is no longer pending (nothing recorded, the page's files removed: rendering
    /// stops).
    pub(super) async fn record_page(
        &self,
        doc_id: i64,
        dir: &Path,
        prepared: tokio::task::JoinHandle<Result<PreparedPage, JobError>>,
    ) -> Result<bool, JobError> {
        let page = prepared
            .await
            .map_err(|e| JobError::Retry(e.to_string()))??;
        let attempts = self.inner.cfg.max_attempts;
        let fan = self.inner.fan.clone();
        let p = page.clone();
        let live = self
            .tx(move |tx| {
                let c = &mut *tx;
                // Checked here rather than before each page: one transaction per page, no extra read.
                if !store::is_pending(c, doc_id)? {
                    return Ok(false);
                }
                store::set_page_count(c, doc_id, p.page_count)?;
                if let Some(failed) = &p.failure {
                    store::insert_failed_page(c, doc_id, p.page_no, (p.width, p.height), failed)?;
                    return Ok(true);
                }
                let path_s = p.path.to_string_lossy();
                let img = PageImage {
                    doc_id,
                    page_no: p.page_no,
                    width: p.width,
                    height: p.height,
                    image_bytes: p.bytes,
                    image_path: &path_s,
                    tiles: p.tiles.len().max(1) as u32,
                };
                // The page row and its read jobs are created together, once: a rendering resumed
                // after a crash skips recorded pages, and a page rendered twice enqueues nothing.
                if !store::insert_page(c, &img)? {
                    return Ok(true);
                }
                let page_no = p.page_no;
                if p.rotation != 0 {
                    store::set_page_rotation(c, doc_id, page_no, p.rotation)?;
                }
                if let Some(reading) = &p.text_layer {
                    if store::record_page_reading(c, doc_id, page_no, reading)? {
                        tx.enqueue(
                            Stage::OcrToDatabase.queue(),
                            NewJob::json(&PageJob { doc_id, page_no })?.max_attempts(attempts),
                        )?;
                    }
                    return Ok(true);
                }
                if p.tiles.is_empty() {
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
                let mut jobs = Vec::with_capacity(p.tiles.len());
                for &t in &p.tiles {
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
                store::set_page_fan_in(tx, doc_id, page_no, parent)?;
                Ok(true)
            })
            .await
            .map_err(JobError::from)?;
        if !live {
            // Not recorded (the document failed or was deleted meanwhile): these files are
            // nobody's; the directory goes too when this page was its last file.
            page.remove_files();
            let _ = std::fs::remove_dir(dir);
        }
        Ok(live)
    }
}

/// Renders the pages `first..` of the PDF `data` in a worker of `pool`, sending each to `pages`
/// as it comes: the document's page count. The worker serves this document only, and is ended
/// and reaped after it; a worker that breaks fails the document with its typed reason.
async fn render_in_worker(
    pool: &WorkerPool,
    data: Vec<u8>,
    config: &RenderConfig,
    first: u32,
    pages: tokio::sync::mpsc::Sender<Rendered>,
) -> Result<u32, WorkerError> {
    let mut worker = pool.get().await?;
    let read = async {
        let page_count = worker.open(&data, config).await?;
        drop(data);
        for page_no in first.max(1)..=page_count {
            let page = worker.render_page(page_no).await?;
            if pages.send(Rendered::from(page)).await.is_err() {
                break;
            }
        }
        Ok(page_count)
    }
    .await;
    worker.finish().await;
    read
}

/// A page's raster as the renderer gave it.
#[derive(Debug)]
enum Raster {
    /// Rendered in this process.
    Image(RgbImage),
    /// Rendered by a worker, as PNG (decoded here only to be turned or tiled).
    Png(Vec<u8>),
}

impl Raster {
    /// Whether the page has no image (kept by its text layer and not rasterized, or failed).
    fn is_empty(&self) -> bool {
        match self {
            Raster::Image(image) => image.width() == 0,
            Raster::Png(png) => png.is_empty(),
        }
    }
}

/// A page as rendered, in this process or in a worker.
#[derive(Debug)]
pub(super) struct Rendered {
    page_no: u32,
    page_count: u32,
    size: (u32, u32),
    raster: Raster,
    text_layer: Option<TextLayer>,
    failure: Option<PageFailed>,
}

impl From<RenderedPage> for Rendered {
    fn from(page: RenderedPage) -> Self {
        Self {
            page_no: page.page_no,
            page_count: page.page_count,
            size: page.size,
            raster: Raster::Image(page.image),
            text_layer: page.text_layer,
            failure: page.failure.map(|f| PageFailed {
                reason: f.reason(),
                message: f.to_string(),
            }),
        }
    }
}

impl From<WorkerPage> for Rendered {
    fn from(page: WorkerPage) -> Self {
        Self {
            page_no: page.page_no,
            page_count: page.page_count,
            size: page.size,
            raster: Raster::Png(page.png),
            text_layer: page.text_layer,
            failure: page.failure.map(|f| PageFailed {
                reason: f.reason,
                message: f.message,
            }),
        }
    }
}

/// A rendered page made ready to be recorded: upright, encoded and written with its tiles.
#[derive(Debug, Clone)]
pub(super) struct PreparedPage {
    page_no: u32,
    page_count: u32,
    /// Where its PNG was written.
    path: PathBuf,
    width: u32,
    height: u32,
    /// Its PNG's size.
    bytes: u64,
    /// The tiles written beside it (none when it is read whole, or not read).
    tiles: Vec<Tile>,
    /// Degrees it was turned clockwise to make it upright.
    rotation: u16,
    /// Its text layer's reading, when it keeps it (it is then neither read nor turned).
    text_layer: Option<Reading>,
    /// Why it failed alone (nothing written, nothing to read).
    failure: Option<PageFailed>,
}

impl PreparedPage {
    /// A page with no image written: kept by its text layer (and not rasterized), or failed.
    fn without_image(
        page: &Rendered,
        path: PathBuf,
        text_layer: Option<Reading>,
        failure: Option<PageFailed>,
    ) -> Self {
        Self {
            page_no: page.page_no,
            page_count: page.page_count,
            path,
            width: page.size.0,
            height: page.size.1,
            bytes: 0,
            tiles: Vec::new(),
            rotation: 0,
            text_layer,
            failure,
        }
    }

    /// Removes the page's PNG and its tiles'.
    fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.path);
        for t in &self.tiles {
            let _ = std::fs::remove_file(tile_path(&self.path, t.index));
        }
    }
}

/// Makes a rendered page ready (blocking work): keeps its text layer when usable (and writes no
/// image when the page was not rasterized:
/// [`RenderConfig::raster_text_pages`](crate::render::RenderConfig::raster_text_pages)); otherwise
/// turns it upright when `orientation` detects it sideways or upside down, and cuts it into
/// tiles when its PNG is above the tiling threshold. Its PNG (and its tiles') is written to
/// `path` durably, the directory included, before the page's row can commit: a recorded page
/// always has its image after a power loss.
fn prepare_page(
    mut page: Rendered,
    path: PathBuf,
    tiles_cfg: &TileConfig,
    orientation: Option<&TesseractReader>,
    max_pixels: u64,
) -> Result<PreparedPage, JobError> {
    if let Some(failed) = page.failure.take() {
        tracing::warn!(
            page = page.page_no,
            reason = failed.reason.as_str(),
            "{}",
            failed.message
        );
        return Ok(PreparedPage::without_image(&page, path, None, Some(failed)));
    }
    // A page with a usable text layer keeps it: it is not read, so not turned or tiled either.
    let text_layer = page
        .text_layer
        .take()
        .filter(TextLayer::is_usable)
        .map(TextLayer::into_reading);
    if text_layer.is_some() && page.raster.is_empty() {
        // Not rasterized (nothing reads its pixels): no image is written.
        return Ok(PreparedPage::without_image(&page, path, text_layer, None));
    }
    let encode =
        |image: &image::RgbImage| encode_png(image).map_err(|e| JobError::Permanent(e.to_string()));
    // A worker's PNG is decoded here only when the page is turned or cut into tiles, under the
    // renderer's pixel ceiling.
    let decode = |png: &[u8]| {
        crate::embed::decode_image(png, max_pixels)
            .map(|image| image.to_rgb8())
            .map_err(|e| JobError::Permanent(format!("page {}: {e}", page.page_no)))
    };
    let (mut image, mut png) = match std::mem::replace(&mut page.raster, Raster::Png(Vec::new())) {
        Raster::Image(image) => {
            let png = encode(&image)?;
            (Some(image), png)
        }
        Raster::Png(png) => (None, png),
    };
    let (mut width, mut height) = match &image {
        Some(image) => image.dimensions(),
        None => page.size,
    };
    let mut rotation = 0;
    if text_layer.is_none()
        && let Some(detector) = orientation
    {
        rotation = detector.detect_rotation(&png).map_err(|e| {
            let msg = format!("page {}: orientation detection: {e}", page.page_no);
            if e.is_retryable() {
                JobError::Retry(msg)
            } else {
                JobError::Permanent(msg)
            }
        })?;
        if rotation != 0 {
            let upright = match image.take() {
                Some(image) => image,
                None => decode(&png)?,
            };
            let turned = orientation::rotate_rgb(upright, rotation);
            png = encode(&turned)?;
            (width, height) = turned.dimensions();
            image = Some(turned);
        }
    }
    write_synced(&path, &png).map_err(|e| JobError::Retry(e.to_string()))?;
    let tiles = if text_layer.is_none() && png.len() as u64 > tiles_cfg.threshold_bytes {
        tile_grid(width, height, tiles_cfg)
    } else {
        Vec::new()
    };
    if !tiles.is_empty() {
        // Tiles are cut here, once, from the page in memory; each read job reads its own.
        let image = match image {
            Some(image) => image,
            None => decode(&png)?,
        };
        let encoded = cut_tiles(&image, &tiles).map_err(|e| JobError::Permanent(e.to_string()))?;
        for (tile, bytes) in tiles.iter().zip(encoded) {
            write_synced(&tile_path(&path, tile.index), &bytes)
                .map_err(|e| JobError::Retry(e.to_string()))?;
        }
    }
    // The renames are durable once the directory is.
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| JobError::Retry(e.to_string()))?;
    }
    Ok(PreparedPage {
        page_no: page.page_no,
        page_count: page.page_count,
        path,
        width,
        height,
        bytes: png.len() as u64,
        tiles,
        rotation,
        text_layer,
        failure: None,
    })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A page a worker sent as PNG is made ready as the same page rendered here: the same
    /// PNG, the same size, the same tiles (its PNG decoded here to cut them), byte for byte.
    #[test]
    fn a_worker_png_is_prepared_as_the_page_rendered_here() {
        let dir = tempfile::tempdir().unwrap();
        let pdf = horos_testkit::pdf::page(
            "0.2 0.4 0.8 rg 72 72 300 500 re f 0 0 0 rg 100 600 m 500 700 l 5 w S",
        );
        let config = RenderConfig {
            dpi: 100.0,
            ..RenderConfig::default()
        };
        let mut rendered = Vec::new();
        render_pages(pdf, &config, 1, |p| {
            rendered.push(p);
            ControlFlow::Continue(())
        })
        .unwrap();
        let page = rendered.remove(0);
        let png = encode_png(&page.image).unwrap();
        let from_worker = Rendered {
            page_no: page.page_no,
            page_count: page.page_count,
            size: page.size,
            raster: Raster::Png(png.clone()),
            text_layer: None,
            failure: None,
        };
        let mut here = Rendered::from(page);
        here.text_layer = None;
        // Every read page is cut into tiles.
        let tiles = TileConfig {
            threshold_bytes: 0,
            ..TileConfig::default()
        };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let max = config.max_page_pixels;
        let here = prepare_page(here, a.join("page-00001.png"), &tiles, None, max).unwrap();
        let worker =
            prepare_page(from_worker, b.join("page-00001.png"), &tiles, None, max).unwrap();
        assert!(worker.tiles.len() > 1, "{:?}", worker.tiles);
        assert_eq!(
            (worker.width, worker.height, worker.bytes, &worker.tiles),
            (here.width, here.height, here.bytes, &here.tiles)
        );
        assert_eq!(std::fs::read(&worker.path).unwrap(), png);
        for t in &here.tiles {
            assert_eq!(
                std::fs::read(tile_path(&worker.path, t.index)).unwrap(),
                std::fs::read(tile_path(&here.path, t.index)).unwrap(),
                "tile {}",
                t.index
            );
        }
    }
}
