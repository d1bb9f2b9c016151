//! Per-document timing and cost: the stages' summed job times and the report built from them.

use serde::{Deserialize, Serialize};
use squeueha::params;

use super::{
    Db, Document, PageFailed, Result, StoreError, document, exec, is_postgres, now_s, one,
};

/// Adds a job's time to a document's per-stage totals.
pub fn add_stage_time(
    db: &mut dyn Db,
    doc_id: i64,
    stage: &str,
    seconds: f64,
    inference_seconds: f64,
) -> Result<()> {
    exec(db,
        "INSERT INTO ip_stage_stats (doc_id, stage, jobs, seconds, inference_seconds) VALUES (?1, ?2, 1, ?3, ?4)
         ON CONFLICT (doc_id, stage) DO UPDATE SET jobs = ip_stage_stats.jobs + 1,
           seconds = ip_stage_stats.seconds + excluded.seconds,
           inference_seconds = ip_stage_stats.inference_seconds + excluded.inference_seconds",
        params![doc_id, stage, seconds, inference_seconds],
    )?;
    Ok(())
}

/// Time spent in one stage for one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTime {
    /// Stage (queue) name.
    pub stage: String,
    /// Jobs run.
    pub jobs: u64,
    /// Wall seconds summed over jobs.
    pub seconds: f64,
    /// Seconds spent in models (OCR, vision, embeddings).
    pub inference_seconds: f64,
}

/// Cost assumptions of the report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Price of one hour of inference time (GPU or CPU), in the report's currency. Default 0.35
    /// (a consumer GPU's power and amortisation, in euros).
    pub per_inference_hour: f64,
    /// Price of one hour of other processing (rendering, storage). Default 0.02.
    pub per_cpu_hour: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            per_inference_hour: 0.35,
            per_cpu_hour: 0.02,
        }
    }
}

/// The per-document report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The document.
    pub document: Document,
    /// Pages recorded.
    pub pages: u32,
    /// Tiles read (0 when no page was tiled).
    pub tiles: u32,
    /// Text chunks.
    pub chunks: u32,
    /// Tables found.
    pub tables: u32,
    /// Per stage.
    pub stages: Vec<StageTime>,
    /// Inference seconds, all stages.
    pub inference_seconds: f64,
    /// Wall time from submission to completion (or now).
    pub wall_seconds: f64,
    /// Estimated cost with the given [`CostModel`].
    pub estimated_cost: f64,
    /// The pages that failed alone (the document went on without them), in page order.
    #[serde(default)]
    pub failed_pages: Vec<FailedPage>,
}

/// A page that failed alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedPage {
    /// Page number, from 1.
    pub page_no: u32,
    /// Why.
    #[serde(flatten)]
    pub failure: PageFailed,
}

/// The pages of a document that failed alone, in page order.
pub fn failed_pages(db: &mut dyn Db, doc_id: i64) -> Result<Vec<FailedPage>> {
    let rows = db.query(
        "SELECT page_no, failure, failure_message FROM ip_pages
         WHERE doc_id = ?1 AND failure IS NOT NULL ORDER BY page_no",
        params![doc_id],
    )?;
    let mut failed = Vec::with_capacity(rows.len());
    for r in rows {
        if let Some(failure) = PageFailed::from_columns(r.get(1)?, r.get(2)?) {
            failed.push(FailedPage {
                page_no: r.get(0)?,
                failure,
            });
        }
    }
    Ok(failed)
}

/// Builds the report of a document.
pub fn report(db: &mut dyn Db, doc_id: i64, cost: &CostModel) -> Result<Report> {
    let document =
        document(db, doc_id)?.ok_or_else(|| StoreError::NotFound(format!("document {doc_id}")))?;
    let mut count = |sql: &str| -> Result<u32> { Ok(one(db, sql, params![doc_id])?.get(0)?) };
    let pages = count("SELECT COUNT(*) FROM ip_pages WHERE doc_id = ?1")?;
    let tiles = count("SELECT COUNT(*) FROM ip_tiles WHERE doc_id = ?1")?;
    let chunks = count("SELECT COUNT(*) FROM ip_chunks WHERE doc_id = ?1")?;
    let tables = count("SELECT COUNT(*) FROM ip_tables WHERE doc_id = ?1")?;
    // In the order the stages first ran.
    let first_run = if is_postgres(db) { "id" } else { "rowid" };
    let stages = db
        .query(
            &format!(
                "SELECT stage, jobs, seconds, inference_seconds FROM ip_stage_stats
                 WHERE doc_id = ?1 ORDER BY {first_run}"
            ),
            params![doc_id],
        )?
        .iter()
        .map(|r| {
            Ok(StageTime {
                stage: r.get(0)?,
                jobs: r.get(1)?,
                seconds: r.get(2)?,
                inference_seconds: r.get(3)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let r = one(
        db,
        "SELECT created_at, finished_at FROM ip_documents WHERE id = ?1",
        params![doc_id],
    )?;
    let (created, finished): (f64, Option<f64>) = (r.get(0)?, r.get(1)?);
    // `+ 0.0`: an empty float sum is -0.0.
    let inference_seconds: f64 = stages.iter().map(|s| s.inference_seconds).sum::<f64>() + 0.0;
    let other: f64 = stages
        .iter()
        .map(|s| (s.seconds - s.inference_seconds).max(0.0))
        .sum::<f64>()
        + 0.0;
    let estimated_cost =
        inference_seconds / 3600.0 * cost.per_inference_hour + other / 3600.0 * cost.per_cpu_hour;
    let failed_pages = failed_pages(db, doc_id)?;
    Ok(Report {
        document,
        pages,
        tiles,
        chunks,
        tables,
        stages,
        inference_seconds,
        wall_seconds: finished.unwrap_or_else(now_s) - created,
        estimated_cost,
        failed_pages,
    })
}
