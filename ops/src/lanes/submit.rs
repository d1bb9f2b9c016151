//! Submit: a chat job on a lane's queue, from a prompt or a whole chat request.

use horos_vllm_client::{ChatMessage, ChatRequest};
use serde::{Deserialize, Serialize};
use squeueha::NewJob;

use super::LaneJobs;
use crate::error::OpsError;

/// What to submit: a `prompt` (a user message, sent to `model` or the lane's) or a whole chat
/// `request`; `model` and `max_tokens` override the request's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitArgs {
    /// The lane's queue.
    pub queue: String,
    /// A user message.
    #[serde(default)]
    pub prompt: Option<String>,
    /// A whole OpenAI chat completion request.
    #[serde(default)]
    pub request: Option<ChatRequest>,
    /// The model (default: the request's, else the lane's).
    #[serde(default)]
    pub model: Option<String>,
    /// Most tokens to generate.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Higher runs first (squeueha's priority).
    #[serde(default)]
    pub priority: i32,
}

/// A queued job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The job's id (its state and answer: [`LaneJobs::status`]).
    pub id: i64,
    /// The queue it waits on.
    pub queue: String,
}

impl LaneJobs {
    /// Queues a chat job on a lane. Refused with [`OpsError::UnknownLane`] for a queue no lane
    /// has, and [`OpsError::InvalidArgument`] without a prompt or request, with both, with a
    /// prompt but no model anywhere, or with `max_tokens` 0.
    pub async fn submit(&self, args: SubmitArgs) -> Result<Submitted, OpsError> {
        let SubmitArgs {
            queue,
            prompt,
            request,
            model,
            max_tokens,
            priority,
        } = args;
        let lane = self.lane(&queue)?;
        if max_tokens == Some(0) {
            return Err(OpsError::invalid(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ));
        }
        let mut request = match (request, prompt) {
            (Some(_), Some(_)) => {
                return Err(OpsError::invalid(
                    "prompt",
                    "give `prompt` or `request`, not both",
                ));
            }
            (Some(request), None) => request,
            (None, Some(prompt)) => {
                let model = model
                    .clone()
                    .or_else(|| lane.model.clone())
                    .ok_or_else(|| {
                        OpsError::invalid(
                            "model",
                            format!("give a model, or set `model` in the lane `{queue}`"),
                        )
                    })?;
                ChatRequest::new(model, vec![ChatMessage::user(prompt)])
            }
            (None, None) => {
                return Err(OpsError::invalid("prompt", "give `prompt` or `request`"));
            }
        };
        if let Some(model) = model {
            request.model = model;
        }
        if max_tokens.is_some() {
            request.max_tokens = max_tokens;
        }
        let job = NewJob::json(&request)?.priority(priority);
        let id = self.queue.enqueue(&queue, job).await?.id();
        Ok(Submitted { id, queue })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::{Value, json};

    use super::*;
    use crate::lanes::testing::lane_jobs;

    #[tokio::test]
    async fn a_prompt_is_queued_as_a_chat_request_for_the_lanes_model() {
        let (_dir, jobs) = lane_jobs().await;
        let args: SubmitArgs = serde_json::from_value(
            json!({"queue": "think", "prompt": "hello", "priority": 3, "max_tokens": 9}),
        )
        .unwrap();
        let done = jobs.submit(args).await.unwrap();
        assert_eq!(done.queue, "think");
        let job = jobs.queue().get(done.id).await.unwrap().unwrap();
        assert_eq!((job.queue.as_str(), job.priority), ("think", 3));
        let request: Value = serde_json::from_slice(&job.payload).unwrap();
        assert_eq!(request["model"], "smollm2");
        assert_eq!(request["max_tokens"], 9);
        assert_eq!(request["messages"][0]["content"], "hello");
    }

    #[tokio::test]
    async fn a_whole_request_keeps_its_model_unless_one_is_named() {
        let (_dir, jobs) = lane_jobs().await;
        let request = json!({"model": "big", "messages": [{"role": "user", "content": "x"}]});
        let args = |model: Option<&str>| -> SubmitArgs {
            serde_json::from_value(json!({"queue": "vision", "request": request, "model": model}))
                .unwrap()
        };
        for (model, expected) in [(None, "big"), (Some("small"), "small")] {
            let id = jobs.submit(args(model)).await.unwrap().id;
            let job = jobs.queue().get(id).await.unwrap().unwrap();
            let sent: Value = serde_json::from_slice(&job.payload).unwrap();
            assert_eq!(sent["model"], expected);
        }
    }

    #[tokio::test]
    async fn mistakes_are_refused_naming_the_argument_and_queue_nothing() {
        let (_dir, jobs) = lane_jobs().await;
        let e = jobs
            .submit(SubmitArgs {
                queue: "nope".into(),
                prompt: Some("x".into()),
                ..SubmitArgs::default()
            })
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no lane `nope`"), "{e}");
        // The lane `vision` has no model: a prompt needs one.
        let e = jobs
            .submit(SubmitArgs {
                queue: "vision".into(),
                prompt: Some("x".into()),
                ..SubmitArgs::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.param(), Some("model"), "{e}");
        let e = jobs
            .submit(SubmitArgs {
                queue: "think".into(),
                ..SubmitArgs::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.param(), Some("prompt"), "{e}");
        let e = jobs
            .submit(SubmitArgs {
                queue: "think".into(),
                prompt: Some("x".into()),
                max_tokens: Some(0),
                ..SubmitArgs::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.param(), Some("max_tokens"), "{e}");
        assert!(jobs.queue().all_stats().await.unwrap().is_empty());
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let e =
            serde_json::from_value::<SubmitArgs>(json!({"queue": "think", "prio": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field `prio`"), "{e}");
    }
}
