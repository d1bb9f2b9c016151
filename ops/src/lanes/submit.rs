//! Submit: a chat job on a lane's queue, from a prompt or a whole chat request.
//!
//! A job's `priority` is a **rank: smaller runs first** (0 by default; negative ranks run
//! sooner still), the workspace's one meaning of a priority (the coordinator's `x_priority`,
//! a task's `priority`: `docs/architecture.md`, "Priorities"); it enters squeueha's order
//! (higher claimed first) negated, as `horos_coordinator::queue_priority` does.

use std::time::Duration;

use horos_vllm_client::{ChatMessage, ChatRequest};
use serde::{Deserialize, Serialize};
use squeueha::NewJob;

use super::LaneJobs;
use crate::error::OpsError;

/// What to submit: a `prompt` (a user message, sent to `model` or the lane's) or a whole chat
/// `request`; `model` and `max_tokens` override the request's.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"queue": "think", "prompt": "Summarise RFC 9110 in one line."}))]
#[schemars(example = serde_json::json!({"queue": "vision", "request": {"model": "qwen3-vl", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens": 256, "priority": -1, "dedup_key": "report-42", "delay_s": 60}))]
pub struct SubmitArgs {
    /// The lane's queue.
    pub queue: String,
    /// A user message.
    #[serde(default)]
    pub prompt: Option<String>,
    /// A whole OpenAI chat completion request.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub request: Option<ChatRequest>,
    /// The model (default: the request's, else the lane's).
    #[serde(default)]
    pub model: Option<String>,
    /// Most tokens to generate.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// A rank: smaller runs first (0 by default), as the coordinator's `x_priority`.
    #[serde(default)]
    pub priority: i32,
    /// Jobs of a queue with the same key (within squeueha's dedup window, 24 h) are one job:
    /// a second submission answers the first's id, marked [`Submitted::duplicate`].
    #[serde(default)]
    #[schemars(
        length(min = 1),
        description = "Jobs of a queue with the same key (within 24 h) are one job: a second \
                       submission answers the first's id, marked `duplicate`."
    )]
    pub dedup_key: Option<String>,
    /// Seconds before the job may run (it is `delayed` until then); 0 to 30 days.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_DELAY_S))]
    pub delay_s: Option<f64>,
}

/// The longest `delay_s`: 30 days.
pub const MAX_DELAY_S: f64 = 30.0 * 24.0 * 3600.0;

/// A queued job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The job's id (its state and answer: [`LaneJobs::status`]).
    pub id: i64,
    /// The queue it waits on.
    pub queue: String,
    /// True when a job with the same `dedup_key` was already queued: `id` is that job's (it
    /// may have finished since), and nothing new was queued.
    #[serde(default)]
    pub duplicate: bool,
}

impl LaneJobs {
    /// Queues a chat job on a lane, with the lane's `max_attempts` when it has one. Refused
    /// with [`OpsError::UnknownLane`] for a queue no lane has, and
    /// [`OpsError::InvalidArgument`] without a prompt or request, with both, with a prompt but
    /// no model anywhere, with `max_tokens` 0, an empty `dedup_key`, or a `delay_s` that is not
    /// 0 to 30 days.
    pub async fn submit(&self, args: SubmitArgs) -> Result<Submitted, OpsError> {
        let SubmitArgs {
            queue,
            prompt,
            request,
            model,
            max_tokens,
            priority,
            dedup_key,
            delay_s,
        } = args;
        let lane = self.lane(&queue)?;
        if max_tokens == Some(0) {
            return Err(OpsError::invalid(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ));
        }
        if dedup_key.as_deref().is_some_and(str::is_empty) {
            return Err(OpsError::invalid(
                "dedup_key",
                "`dedup_key` must not be empty",
            ));
        }
        let delay = match delay_s {
            None => None,
            Some(s) if s.is_finite() && (0.0..=MAX_DELAY_S).contains(&s) => {
                Some(Duration::from_secs_f64(s))
            }
            Some(s) => {
                return Err(OpsError::invalid(
                    "delay_s",
                    format!("`delay_s` {s}: seconds from 0 to {MAX_DELAY_S} (30 days)"),
                ));
            }
        };
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
        // The rank in squeueha's order (`i32::MIN` has no negation: claimed as `i32::MIN + 1`).
        let mut job = NewJob::json(&request)?.priority(priority.saturating_neg());
        if let Some(key) = dedup_key {
            job = job.dedup_key(key);
        }
        if let Some(delay) = delay.filter(|d| !d.is_zero()) {
            job = job.delay(delay);
        }
        if let Some(attempts) = lane.max_attempts {
            job = job.max_attempts(attempts);
        }
        let enqueued = self.queue.enqueue(&queue, job).await?;
        Ok(Submitted {
            id: enqueued.id(),
            queue,
            duplicate: !enqueued.is_new(),
        })
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
        // Rank 3 enters squeueha's order (higher first) as -3.
        assert_eq!((job.queue.as_str(), job.priority), ("think", -3));
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

    #[tokio::test]
    async fn a_dedup_key_queues_one_job_and_answers_its_id_again() {
        let (_dir, jobs) = lane_jobs().await;
        let args = || -> SubmitArgs {
            serde_json::from_value(json!({"queue": "think", "prompt": "x", "dedup_key": "k1"}))
                .unwrap()
        };
        let first = jobs.submit(args()).await.unwrap();
        let second = jobs.submit(args()).await.unwrap();
        assert!(!first.duplicate);
        assert!(second.duplicate);
        assert_eq!(first.id, second.id);
        let stats = jobs.queue().all_stats().await.unwrap();
        assert_eq!(stats.iter().map(|s| s.ready).sum::<u64>(), 1, "{stats:?}");
        let e = jobs
            .submit(SubmitArgs {
                dedup_key: Some(String::new()),
                ..args()
            })
            .await
            .unwrap_err();
        assert_eq!(e.param(), Some("dedup_key"), "{e}");
    }

    #[tokio::test]
    async fn a_delayed_job_waits_and_a_bad_delay_is_refused() {
        let (_dir, jobs) = lane_jobs().await;
        let args = |delay: f64| SubmitArgs {
            queue: "think".into(),
            prompt: Some("x".into()),
            delay_s: Some(delay),
            ..SubmitArgs::default()
        };
        let id = jobs.submit(args(60.0)).await.unwrap().id;
        let job = jobs.queue().get(id).await.unwrap().unwrap();
        assert_eq!(job.state, squeueha::JobState::Delayed);
        let id = jobs.submit(args(0.0)).await.unwrap().id;
        let job = jobs.queue().get(id).await.unwrap().unwrap();
        assert_eq!(job.state, squeueha::JobState::Ready);
        for bad in [-1.0, f64::NAN, MAX_DELAY_S + 1.0] {
            let e = jobs.submit(args(bad)).await.unwrap_err();
            assert_eq!(e.param(), Some("delay_s"), "{e}");
        }
    }

    #[tokio::test]
    async fn a_lanes_max_attempts_applies_to_its_jobs() {
        let (_dir, jobs) = lane_jobs().await;
        let request = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        let vision: SubmitArgs =
            serde_json::from_value(json!({"queue": "vision", "request": request})).unwrap();
        let id = jobs.submit(vision).await.unwrap().id;
        assert_eq!(jobs.queue().get(id).await.unwrap().unwrap().max_attempts, 2);
        let think: SubmitArgs =
            serde_json::from_value(json!({"queue": "think", "prompt": "x"})).unwrap();
        let id = jobs.submit(think).await.unwrap().id;
        // The queue's default (squeueha's 5).
        assert_eq!(jobs.queue().get(id).await.unwrap().unwrap().max_attempts, 5);
    }

    #[tokio::test]
    async fn a_smaller_rank_is_claimed_first() {
        let (_dir, jobs) = lane_jobs().await;
        let submit = |priority: i32| SubmitArgs {
            queue: "think".into(),
            prompt: Some(format!("rank {priority}")),
            priority,
            ..SubmitArgs::default()
        };
        let low = jobs.submit(submit(5)).await.unwrap().id;
        let high = jobs.submit(submit(0)).await.unwrap().id;
        let claimed = jobs
            .queue()
            .blocking()
            .poll_batch("think", 1, Duration::from_secs(30))
            .unwrap();
        assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [high]);
        assert_ne!(low, high);
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let e =
            serde_json::from_value::<SubmitArgs>(json!({"queue": "think", "prio": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field `prio`"), "{e}");
    }
}
