//! `horos-ref dead`: a queue's dead letters, one of them requeued, or all of them purged
//! (horos-ops' `LaneJobs::dead`). The ingest pipeline's stages (`pdf_to_images`,
//! `image_to_ocr`, ...) are queues of the pipeline's own file, read there when `[ingest]` is
//! configured.

use horos_ops::lanes::{DeadAnswer, DeadArgs as Dead, LaneJobs, is_ingest_stage};

use super::row;
use crate::cli::DeadArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn dead(
    config: &Config,
    jobs: &LaneJobs,
    args: DeadArgs,
    json_out: bool,
) -> Result<(), AppError> {
    let documents = if config.ingest.is_some() && is_ingest_stage(&args.queue) {
        Some(crate::ingest::documents(config).await?)
    } else {
        None
    };
    let op = Dead {
        queue: args.queue,
        limit: args.limit,
        requeue: args.requeue,
        purge: args.purge,
    };
    let answer = jobs
        .dead(documents.as_ref().map(|d| d.pipeline()), op)
        .await?;
    match answer {
        DeadAnswer::Listed(listed) if json_out => super::print_json(&listed.dead),
        DeadAnswer::Listed(listed) => {
            for d in listed.dead {
                row!(
                    "{} attempts={} {}",
                    d.id,
                    d.attempts,
                    d.reason.unwrap_or_default()
                );
            }
        }
        other if json_out => super::print_json(&other),
        DeadAnswer::Requeued(r) => println!("dead job {} requeued as job {}", r.requeued, r.id),
        DeadAnswer::Purged(p) => println!("{} dead job(s) of {} purged", p.purged, p.queue),
    }
    Ok(())
}
