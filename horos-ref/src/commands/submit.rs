//! `horos-ref submit`: a chat job on a lane's queue.

use horos_vllm_client::{ChatMessage, ChatRequest};
use serde_json::json;
use squeueha::{AsyncQueue, NewJob};

use crate::cli::SubmitArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn submit(
    config: &Config,
    queue: &AsyncQueue,
    args: SubmitArgs,
    json_out: bool,
) -> Result<(), AppError> {
    let SubmitArgs {
        queue: name,
        prompt,
        request,
        model,
        max_tokens,
        priority,
    } = args;
    let Some(lane) = config.lanes.iter().find(|l| l.queue == name) else {
        return Err(AppError::Usage(format!("no lane has the queue `{name}`")));
    };
    let mut req: ChatRequest = match (request, prompt) {
        (Some(path), _) => {
            let text = tokio::fs::read(&path).await?;
            serde_json::from_slice(&text).map_err(|e| {
                AppError::Usage(format!("{}: not a chat request: {e}", path.display()))
            })?
        }
        (None, Some(prompt)) => {
            let model = model
                .clone()
                .or_else(|| lane.model.clone())
                .ok_or_else(|| {
                    AppError::Usage(format!("give --model, or set `model` in the lane `{name}`"))
                })?;
            ChatRequest::new(model, vec![ChatMessage::user(prompt)])
        }
        (None, None) => return Err(AppError::Usage("give --prompt or --request".into())),
    };
    if let Some(model) = model {
        req.model = model;
    }
    if let Some(n) = max_tokens {
        req.max_tokens = Some(n);
    }
    let job = NewJob::json(&req)?.priority(priority);
    let id = queue.enqueue(&name, job).await?.id();
    if json_out {
        println!("{}", json!({"id": id, "queue": name}));
    } else {
        println!("job {id} queued on {name}");
    }
    Ok(())
}
