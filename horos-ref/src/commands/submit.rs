//! `horos-ref submit`: a chat job on a lane's queue (horos-ops' `LaneJobs::submit`).

use horos_ops::lanes::{LaneJobs, SubmitArgs as Submit};
use horos_vllm_client::ChatRequest;

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
        })
        .await?;
    if json_out {
        super::print_json(&job);
    } else {
        println!("job {} queued on {}", job.id, job.queue);
    }
    Ok(())
}
