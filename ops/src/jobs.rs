//! The coordinator's async jobs (`POST /v1/jobs`): a request queued now and answered later,
//! submitted, read and followed over the data plane with the caller's own key ([`Remote`]
//! methods). A job runs as its submitter (the same admission as the synchronous call); only
//! that key reads it back. The admin API (`/api/v1/jobs`) lists and reads every job.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::OpsError;
use crate::lanes::Wait;
use crate::remote::Remote;

/// The routes a job can take, by their job names.
pub const KINDS: [&str; 5] = ["chat", "completions", "embeddings", "images", "speech"];

/// A job to queue on the coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsyncJobArgs {
    /// Which route its request takes: one of [`KINDS`].
    pub kind: String,
    /// The request body, as for the synchronous route (`model` included).
    pub request: Map<String, Value>,
    /// A rank, smaller runs first (as `x_priority`).
    #[serde(default)]
    pub priority: Option<i32>,
}

impl AsyncJobArgs {
    /// A job of `kind` for `model` whose one input is `text`: a chat's user message, a
    /// completion's prompt, the text to embed or to speak, an image's prompt.
    pub fn from_text(kind: &str, model: &str, text: &str) -> Result<Self, OpsError> {
        let input = match kind {
            "chat" => json!({"messages": [{"role": "user", "content": text}]}),
            "completions" | "images" => json!({"prompt": text}),
            "embeddings" | "speech" => json!({"input": text}),
            other => return Err(unknown_kind(other)),
        };
        let mut request = Map::new();
        request.insert("model".into(), json!(model));
        if let Value::Object(fields) = input {
            request.extend(fields);
        }
        Ok(Self {
            kind: kind.to_owned(),
            request,
            priority: None,
        })
    }

    /// A job of `kind` whose request is `request` (a JSON object, as the synchronous route
    /// takes it).
    pub fn from_request(kind: &str, request: Value) -> Result<Self, OpsError> {
        if !KINDS.contains(&kind) {
            return Err(unknown_kind(kind));
        }
        let Value::Object(request) = request else {
            return Err(OpsError::invalid(
                "request",
                "a job's request is a JSON object (the synchronous route's body)",
            ));
        };
        Ok(Self {
            kind: kind.to_owned(),
            request,
            priority: None,
        })
    }
}

fn unknown_kind(kind: &str) -> OpsError {
    OpsError::invalid(
        "kind",
        format!("unknown job kind `{kind}`: one of {}", KINDS.join(", ")),
    )
}

/// A job's state, as the coordinator names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AsyncState {
    /// Waiting for a worker.
    Queued,
    /// A worker is calling its model.
    Running,
    /// Answered: `result` holds the route's answer.
    Succeeded,
    /// Failed for good: `error` says why.
    Failed,
    /// Cancelled before it finished.
    Cancelled,
}

impl AsyncState {
    /// Whether the job will not change any more.
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// The coordinator's name for it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A job as the coordinator reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsyncJob {
    /// Its id.
    pub id: i64,
    /// Its route (`chat`, ...).
    pub kind: String,
    /// Where it stands.
    pub state: AsyncState,
    /// The route's answer, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed (or its last attempt's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl AsyncJob {
    /// A chat's or a completion's text, once it succeeded.
    pub fn text(&self) -> Option<&str> {
        let choice = &self.result.as_ref()?["choices"][0];
        choice["message"]["content"]
            .as_str()
            .or(choice["text"].as_str())
    }

    /// The error's message, where there is one.
    pub fn error_message(&self) -> Option<&str> {
        let e = self.error.as_ref()?;
        e["message"]
            .as_str()
            .or(e["error"]["message"].as_str())
            .or(e.as_str())
    }
}

impl Remote {
    /// Queues `job` as this client's (its key's): checked as the synchronous call would be.
    pub async fn submit_async(&self, job: &AsyncJobArgs) -> Result<AsyncJob, OpsError> {
        Ok(self.client().post("/v1/jobs", &json!(job)).await?)
    }

    /// This client's job `id`: its state and, once it succeeded, its result (another key's
    /// job is not found, as a job that never was).
    pub async fn async_job(&self, id: i64) -> Result<AsyncJob, OpsError> {
        Ok(self.client().get(&format!("/v1/jobs/{id}")).await?)
    }

    /// Polls this client's job `id` every `wait.every` until it succeeded, failed or was
    /// cancelled; after `wait.at_most`, [`OpsError::InvalidArgument`] on `timeout`.
    pub async fn wait_async_job(&self, id: i64, wait: Wait) -> Result<AsyncJob, OpsError> {
        crate::lanes::status::poll_until(
            wait,
            || self.async_job(id),
            |job: &AsyncJob| job.state.is_final(),
            |job| format!("job {id} is {}", job.state.as_str()),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;
    use std::time::Duration;

    use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream};
    use horos_fakeai::{FakeConfig, FakeServer};

    use super::*;

    #[test]
    fn a_text_becomes_each_routes_input() {
        let chat = AsyncJobArgs::from_text("chat", "m", "hi").unwrap();
        assert_eq!(chat.request["messages"][0]["content"], "hi");
        assert_eq!(chat.request["model"], "m");
        let emb = AsyncJobArgs::from_text("embeddings", "e", "x").unwrap();
        assert_eq!(emb.request["input"], "x");
        let err = AsyncJobArgs::from_text("translate", "m", "x").unwrap_err();
        assert!(err.to_string().contains("translate"), "{err}");
        let err = AsyncJobArgs::from_request("chat", json!([1])).unwrap_err();
        assert!(err.to_string().contains("JSON object"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_is_submitted_followed_and_answered_over_http() {
        let upstream = FakeServer::start(FakeConfig::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = CoordinatorConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            state_path: Some(dir.path().join("state.db")),
            job_workers: 1,
            ..CoordinatorConfig::default()
        };
        let coordinator = Coordinator::builder(
            config,
            Arc::new(StaticUpstream::new().with("m", upstream.url())),
        )
        .bind()
        .await
        .unwrap();
        let remote = Remote::new(&coordinator.url(), None, Duration::from_secs(30)).unwrap();

        let mut args = AsyncJobArgs::from_text("chat", "m", "hello").unwrap();
        args.priority = Some(-1);
        let queued = remote.submit_async(&args).await.unwrap();
        assert_eq!(queued.kind, "chat");
        let wait = Wait {
            every: Duration::from_millis(50),
            at_most: Duration::from_secs(20),
        };
        let done = remote.wait_async_job(queued.id, wait).await.unwrap();
        assert_eq!(done.state, AsyncState::Succeeded, "{done:?}");
        assert!(done.text().is_some_and(|t| !t.is_empty()), "{done:?}");

        // A model the coordinator does not serve is refused at submission, as the call would be.
        let bad = AsyncJobArgs::from_text("chat", "nope", "hello").unwrap();
        assert!(remote.submit_async(&bad).await.is_err());
    }
}
