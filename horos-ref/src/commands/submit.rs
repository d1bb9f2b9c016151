//! `horos-ref submit`: a chat job on a lane's queue (horos-ops' `LaneJobs::submit`); `--wait`
//! follows it (`LaneJobs::wait`) and prints its answer.

use std::time::Duration;

use horos_ops::lanes::{LaneJobs, SubmitArgs as Submit};
use horos_ops::remote::Wait;
use horos_vllm_client::ChatRequest;
use squeueha::JobState;

use crate::cli::SubmitArgs;
use crate::error::AppError;

pub async fn submit(jobs: &LaneJobs, args: SubmitArgs, json_out: bool) -> Result<(), AppError> {
    let request = match &args.request {
        Some(path) => {
            let text = tokio::fs::read(path).await?;
            let request: ChatRequest = serde_json::from_slice(&text).map_err(|e| {
                AppError::Usage(format!("{}: not a chat request: {e}", path.display()))
            })?;
            Some(request)
        }
        None => None,
    };
    let job = jobs
        .submit(Submit {
            queue: args.queue,
            prompt: args.prompt,
            request,
            model: args.model,
            max_tokens: args.max_tokens,
            priority: args.priority,
            dedup_key: args.dedup_key,
            delay_s: args.delay,
        })
        .await?;
    if !args.wait {
        if json_out {
            super::print_json(&job);
        } else if job.duplicate {
            println!(
                "job {} already queued on {} (same dedup key)",
                job.id, job.queue
            );
        } else {
            println!("job {} queued on {}", job.id, job.queue);
        }
        return Ok(());
    }
    if !json_out {
        let already = if job.duplicate { "already " } else { "" };
        eprintln!("job {} {already}queued on {}; waiting", job.id, job.queue);
    }
    let wait = Wait {
        every: Duration::from_millis(200),
        at_most: Duration::MAX,
    };
    let status = jobs.wait(job.id, wait).await?;
    if json_out {
        super::print_json(&status);
    } else if let Some(answer) = &status.answer {
        println!("{answer}");
    }
    if status.state == JobState::Dead {
        return Err(AppError::Usage(format!(
            "job {} is dead: {}",
            job.id,
            status.last_error.as_deref().unwrap_or("no error recorded")
        )));
    }
    Ok(())
}
