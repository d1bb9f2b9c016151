//! `horos-ref dead`: a queue's dead letters, or one of them requeued. The ingest pipeline's
//! stages (`pdf_to_images`, `image_to_ocr`, ...) are queues of the pipeline's own file, read
//! there when `[ingest]` is configured; one of their dead jobs is requeued only while its
//! document is still being ingested (a failed document is ingested again with `ingest --retry`).

use ingest_pipeline::pipeline::{PipelineError, Stage};
use ingest_pipeline::store::DocStatus;
use serde_json::json;
use squeueha::{AsyncQueue, DeadJob};

use super::row;
use crate::cli::DeadArgs;
use crate::config::Config;
use crate::error::AppError;
use crate::ingest::RefPipeline;

pub async fn dead(
    config: &Config,
    queue: &AsyncQueue,
    args: DeadArgs,
    json_out: bool,
) -> Result<(), AppError> {
    let pipeline = if ingest_stage(config, &args.queue) {
        Some(
            crate::ingest::open_configured(config)
                .await
                .map_err(AppError::Usage)?,
        )
    } else {
        None
    };
    if let Some(id) = args.requeue {
        let new_id = match &pipeline {
            Some(p) => requeue_ingest_job(p, id).await?,
            None => queue.requeue_dead(id).await?,
        };
        if json_out {
            println!("{}", json!({"requeued": id, "id": new_id}));
        } else {
            println!("dead job {id} requeued as job {new_id}");
        }
        return Ok(());
    }
    let dead = match &pipeline {
        Some(p) => {
            AsyncQueue::new(p.queue().clone())
                .dead_letters(&args.queue, args.limit)
                .await?
        }
        None => queue.dead_letters(&args.queue, args.limit).await?,
    };
    print_dead(dead, json_out);
    Ok(())
}

/// Whether `queue` is a stage of the configured ingest pipeline (its jobs live in the
/// pipeline's file, not in the configuration's database).
fn ingest_stage(config: &Config, queue: &str) -> bool {
    config.ingest.is_some() && Stage::ALL.iter().any(|s| s.queue() == queue)
}

/// Requeues the pipeline's dead job `id`, or says why not and what to do instead.
async fn requeue_ingest_job(pipeline: &RefPipeline, id: i64) -> Result<i64, AppError> {
    pipeline.requeue_dead(id).await.map_err(|e| match e {
        PipelineError::DocumentEnded { job, doc, status } => AppError::Usage(match status {
            Some(DocStatus::Failed) => format!(
                "dead job {job} belongs to document {doc}, which failed: requeued, the job \
                 would be dropped and the document stay failed. Ingest the document again, \
                 after fixing the cause (horos-ref docs {doc} says it): horos-ref ingest \
                 --retry {doc}"
            ),
            Some(other) => format!(
                "dead job {job} belongs to document {doc}, which is {}: nothing to requeue",
                other.as_str()
            ),
            None => format!(
                "dead job {job} belongs to document {doc}, which no longer exists (deleted, or \
                 replaced by ingest --retry): nothing to requeue; to ingest its file again: \
                 horos-ref ingest PATH"
            ),
        }),
        PipelineError::NoDeadJob(job) => AppError::Usage(format!(
            "no dead job {job} in the ingest pipeline's queues (horos-ref dead --queue STAGE \
             lists a stage's)"
        )),
        other => AppError::Usage(other.to_string()),
    })
}

fn print_dead(dead: Vec<DeadJob>, json_out: bool) {
    if json_out {
        let list: Vec<_> = dead
            .iter()
            .map(|d| {
                json!({"id": d.id, "queue": d.queue, "attempts": d.attempts,
                       "died_at": d.died_at, "reason": d.last_error})
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
    } else {
        for d in dead {
            row!(
                "{} attempts={} {}",
                d.id,
                d.attempts,
                d.last_error.unwrap_or_default()
            );
        }
    }
}
