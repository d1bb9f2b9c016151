//! Ingesting the sample PDFs: Tesseract reads the pages, MiniLM (through the coordinator)
//! embeds the text, the CPU patch embedder embeds the page images. A document is known by its
//! SHA-256, so a second run submits nothing new and starts no worker.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ingest_pipeline::embed::PixelPatchFallback;
use ingest_pipeline::openai::OpenAiEmbedder;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig, Submission};
use ingest_pipeline::store::DocStatus;
use ingest_pipeline::vision::TesseractReader;
use serde_json::json;

use super::out::Out;

/// The demo's pipeline type.
pub type DemoPipeline = Pipeline<TesseractReader, OpenAiEmbedder, PixelPatchFallback>;

/// What the ingestion did.
#[derive(Debug, Default)]
pub struct Summary {
    /// Documents done (new or from an earlier run).
    pub documents: usize,
    /// Their pages.
    pub pages: u64,
    /// Documents ingested by this run.
    pub new: usize,
    /// Documents that failed.
    pub failed: usize,
}

/// Opens the pipeline's SQLite database under `dir` (blocking work off the runtime).
pub async fn open(dir: &Path, embedder: OpenAiEmbedder) -> Result<DemoPipeline, String> {
    let mut cfg = PipelineConfig::new(dir);
    // MiniLM reads 256 word pieces at most (llama-server truncates longer inputs): chunks of
    // 128 tokens, as ingest-pipeline's own MiniLM test uses.
    cfg.chunks.size = 128;
    cfg.chunks.overlap = 30;
    cfg.retry_delay = Duration::from_secs(2);
    // Jobs claimed when the demo was interrupted come back after this; running jobs renew their
    // lease every third of it, so a short one only shortens the wait of the next run (the
    // default 10 min made a run after Ctrl-C sit idle that long).
    cfg.visibility = Duration::from_secs(15);
    // A scan sideways or upside down is turned upright once, when rendered: for Tesseract and
    // for the page-image embedder alike.
    cfg.orientation = Some(TesseractReader::default());
    tokio::task::spawn_blocking(move || {
        Pipeline::open(
            cfg,
            TesseractReader::default().with_orientation(false),
            embedder,
            PixelPatchFallback::default(),
        )
        .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Submits every file, runs the workers if anything is left to do, and reports each document.
pub async fn ingest(
    pipeline: &DemoPipeline,
    files: &[PathBuf],
    out: &Out,
) -> Result<Summary, String> {
    let t0 = Instant::now();
    let mut pending = Vec::new();
    let mut summary = Summary::default();
    for file in files {
        let sub = pipeline
            .submit(file)
            .await
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let doc = sub.document().clone();
        match (&sub, doc.status) {
            (Submission::Known(_), DocStatus::Done) => {
                summary.documents += 1;
                summary.pages += u64::from(doc.pages.unwrap_or(0));
                out.event(
                    "document",
                    format!(
                        "{}: already ingested (document {}, {} pages): nothing to do",
                        file.display(),
                        doc.id,
                        doc.pages.unwrap_or(0)
                    ),
                    json!({"file": file, "doc_id": doc.id, "pages": doc.pages,
                           "status": "done", "new": false}),
                );
            }
            (Submission::Known(_), DocStatus::Failed) => {
                summary.failed += 1;
                out.event(
                    "document",
                    format!(
                        "{}: failed in an earlier run: {}",
                        file.display(),
                        doc.error.as_deref().unwrap_or("?")
                    ),
                    json!({"file": file, "doc_id": doc.id, "status": "failed",
                           "error": doc.error, "new": false}),
                );
            }
            // New, or interrupted in an earlier run (its jobs are still queued: resumed).
            _ => {
                let resumed = matches!(sub, Submission::Known(_));
                out.event(
                    "submitted",
                    format!(
                        "{}: {} (document {})",
                        file.display(),
                        if resumed {
                            "resuming an interrupted ingestion"
                        } else {
                            "queued for ingestion"
                        },
                        doc.id
                    ),
                    json!({"file": file, "doc_id": doc.id, "resumed": resumed}),
                );
                pending.push((file.clone(), doc.id));
            }
        }
    }
    if pending.is_empty() {
        return Ok(summary);
    }
    out.event(
        "ingesting",
        format!(
            "reading {} document(s) with Tesseract, embedding with MiniLM through the coordinator \
             (a few seconds a page on 2 cores)...",
            pending.len()
        ),
        json!({"documents": pending.len()}),
    );
    let running = pipeline.start();
    let mut result = Ok(());
    for (file, id) in &pending {
        let doc = match pipeline.wait_for(*id, Duration::from_secs(3600)).await {
            Ok(d) => d,
            Err(e) => {
                result = Err(format!("{}: {e}", file.display()));
                break;
            }
        };
        let (p, doc_id) = (pipeline.clone(), *id);
        let report = tokio::task::spawn_blocking(move || p.report(doc_id))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        if doc.status == DocStatus::Done {
            summary.documents += 1;
            summary.new += 1;
            summary.pages += u64::from(report.pages);
        } else {
            summary.failed += 1;
        }
        out.event(
            "document",
            format!(
                "{}: {} — {} pages, {} chunks, {} tables, {:.1} s wall, {:.1} s inference{}",
                file.display(),
                if doc.status == DocStatus::Done {
                    "ingested"
                } else {
                    "FAILED"
                },
                report.pages,
                report.chunks,
                report.tables,
                report.wall_seconds,
                report.inference_seconds,
                doc.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ),
            json!({"file": file, "doc_id": id, "pages": report.pages, "chunks": report.chunks,
                   "tables": report.tables,
                   "status": if doc.status == DocStatus::Done { "done" } else { "failed" },
                   "error": doc.error, "new": true, "wall_s": report.wall_seconds,
                   "inference_s": report.inference_seconds}),
        );
    }
    running.shutdown().await;
    result?;
    out.event(
        "ingest_time",
        format!("ingestion took {:.1} s", t0.elapsed().as_secs_f64()),
        json!({"seconds": t0.elapsed().as_secs_f64()}),
    );
    Ok(summary)
}
