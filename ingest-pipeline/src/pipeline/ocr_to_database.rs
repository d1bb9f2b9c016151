//! Stage `ocr_to_database`: join a page's readings (whole page and tiles), store its text,
//! tables, figures and chunks, and enqueue its embeddings.

use std::time::Instant;

use fanin::{Completion, FragmentOutcome, ParentState};
use squeueha::{Job, NewJob};

use crate::chunk::{Chunk, ChunkConfig, chunk_blocks, chunk_text};
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self, EmbedStep};
use crate::tiling::{Tile, merge_tile_texts, merge_tile_words};
use crate::vision::{ReadBy, Reading, VisionReader};

use super::{JobError, PageJob, Pipeline, Stage, blocking};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    pub(super) async fn store_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        // A tiled page arrives as the fan-in's completion: its tiles' readings are the parent's
        // results, in tile order.
        let (pj, tiles): (PageJob, Option<Vec<(Tile, Reading)>>) =
            match serde_json::from_slice::<Completion>(&job.payload) {
                Ok(c) => {
                    let pj: PageJob = serde_json::from_value(c.data)
                        .map_err(|e| JobError::Permanent(e.to_string()))?;
                    if c.state != ParentState::Completed {
                        let (doc_id, lease) = (pj.doc_id, job.lease);
                        let fan = self.inner.fan.clone();
                        let parent = c.parent_id;
                        let outcomes = blocking(move || Ok(fan.results(parent)?)).await?;
                        let reason = outcomes
                            .iter()
                            .find_map(|o| match o {
                                FragmentOutcome::Failed(e) => Some(e.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        let msg = format!(
                            "{}: page {}: tiles {:?} failed: {reason}",
                            Stage::ImageToOcr.queue(),
                            pj.page_no,
                            c.failed
                        );
                        self.tx(move |tx| {
                            store::fail_document(tx, doc_id, &msg)?;
                            tx.ack(lease)?;
                            Ok(())
                        })
                        .await?;
                        self.inner.finished.notify_waiters();
                        return Ok(());
                    }
                    let fan = self.inner.fan.clone();
                    let parent = c.parent_id;
                    let results = blocking(move || Ok(fan.results(parent)?)).await?;
                    let mut tiles = Vec::with_capacity(results.len());
                    for r in results {
                        let FragmentOutcome::Done(bytes) = r else {
                            return Err(JobError::Permanent(format!(
                                "tile of page {} not done: {r:?}",
                                pj.page_no
                            )));
                        };
                        let tile: (Option<Tile>, Reading) = serde_json::from_slice(&bytes)
                            .map_err(|e| JobError::Permanent(e.to_string()))?;
                        let (Some(t), reading) = tile else {
                            return Err(JobError::Permanent(format!(
                                "page {}: tile result without its tile",
                                pj.page_no
                            )));
                        };
                        tiles.push((t, reading));
                    }
                    (pj, Some(tiles))
                }
                Err(_) => (
                    job.json().map_err(|e| JobError::Permanent(e.to_string()))?,
                    None,
                ),
            };
        let lease = job.lease;
        let attempts = self.inner.cfg.max_attempts;
        let chunk_cfg = self.inner.cfg.chunks;
        let embed = self.inner.cfg.embed;
        let (reader_name, reader_kind) = (
            self.inner.reader.name().to_string(),
            self.inner.reader.read_by(),
        );
        let finished = self
            .tx(move |tx| {
                let c = &mut *tx;
                if !store::is_pending(c, pj.doc_id)? {
                    tx.ack(lease)?;
                    return Ok(false);
                }
                if let Some(tiles) = &tiles {
                    // Kept beside the page for the report and for inspection.
                    for (tile, reading) in tiles {
                        store::record_tile_reading(c, pj.doc_id, pj.page_no, tile, reading)?;
                    }
                }
                let (whole, tiles) = store::page_readings(c, pj.doc_id, pj.page_no)?;
                let mut reading = join_readings(whole, tiles);
                let read_by = *reading.read_by.get_or_insert(reader_kind);
                // The reader's name, unless another reader (the text layer, a fallback) read it.
                let reader = if read_by == reader_kind {
                    reader_name.as_str()
                } else {
                    read_by.as_str()
                };
                let chunks = page_chunks(&reading, &chunk_cfg);
                store::store_page_text(c, pj.doc_id, pj.page_no, &reading, reader, &chunks)?;
                // Without embedding, the page's steps are done with its text: the document ends
                // with its last page stored.
                let mut finished = false;
                for (stage, step) in [
                    (Stage::EmbedText, EmbedStep::Text),
                    (Stage::EmbedVisual, EmbedStep::Visual),
                ] {
                    if embed {
                        tx.enqueue(
                            stage.queue(),
                            NewJob::json(&PageJob {
                                doc_id: pj.doc_id,
                                page_no: pj.page_no,
                            })?
                            .max_attempts(attempts),
                        )?;
                    } else {
                        finished |= store::finish_step(tx, pj.doc_id, pj.page_no, step)?;
                    }
                }
                let secs = started.elapsed().as_secs_f64();
                store::add_stage_time(tx, pj.doc_id, Stage::OcrToDatabase.queue(), secs, 0.0)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        if finished {
            self.drop_images_once_read(pj.doc_id).await;
        }
        self.finished(finished);
        Ok(())
    }
}

/// A page's chunks: by its structure when its text layer was laid out (sections and tables,
/// [`chunk_blocks`]), else windows over its text.
pub fn page_chunks(reading: &Reading, config: &ChunkConfig) -> Vec<Chunk> {
    match &reading.layout {
        Some(layout) if reading.read_by == Some(crate::vision::ReadBy::TextLayer) => {
            let page = horos_pdf::structure::document(&[layout]);
            match page.first() {
                Some(p) if !p.blocks.is_empty() => chunk_blocks(&p.blocks, config),
                _ => chunk_text(&reading.text, config),
            }
        }
        _ => chunk_text(&reading.text, config),
    }
}

/// Joins a page's readings: the whole-page reading, or its tiles' (exactly by word boxes when
/// every tile has them, else by removing repeated word runs between consecutive tiles).
pub fn join_readings(whole: Option<Reading>, tiles: Vec<(Tile, Reading)>) -> Reading {
    if tiles.is_empty() {
        return whole.unwrap_or_default();
    }
    // Word boxes of a tile the reader turned are not in the tile's pixels: join by text then.
    let text = if tiles
        .iter()
        .all(|(_, r)| r.words.is_some() && r.rotation == 0)
    {
        let with_words: Vec<(Tile, Vec<crate::tiling::Word>)> = tiles
            .iter()
            .map(|(t, r)| (*t, r.words.clone().unwrap_or_default()))
            .collect();
        merge_tile_words(&with_words)
    } else {
        let texts: Vec<String> = tiles.iter().map(|(_, r)| r.text.clone()).collect();
        merge_tile_texts(&texts, 3)
    };
    // Tiles read by different readers: some fell back to Tesseract.
    let mut kinds = tiles.iter().filter_map(|(_, r)| r.read_by);
    let first = kinds.next();
    let read_by = if kinds.all(|k| Some(k) == first) {
        first
    } else {
        Some(ReadBy::Tesseract)
    };
    let mut tables = Vec::new();
    let mut figures: Vec<String> = Vec::new();
    let mut inference_seconds = 0.0;
    for (_, r) in tiles {
        tables.extend(r.tables);
        for f in r.figures {
            if !figures.contains(&f) {
                figures.push(f);
            }
        }
        inference_seconds += r.inference_seconds;
    }
    Reading {
        text,
        words: None,
        tables,
        figures,
        inference_seconds,
        read_by,
        rotation: 0,
        // Tiles are read by OCR or a model: no text layer to lay out.
        layout: None,
    }
}
