//! What the job API exposes: job kinds, their queues and the states a job is shown in.

use serde::{Deserialize, Serialize};

use crate::data::route::Route;

/// Prefix of the coordinator's job queues (`coord.jobs.chat`, ...).
pub const QUEUE_PREFIX: &str = "coord.jobs.";

/// The kind of a job: which synchronous route its request takes. Serialised as `chat`,
/// `completions`, `embeddings`, `images`, `speech`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A chat completion (`POST /v1/chat/completions`).
    Chat,
    /// A completion of a raw prompt (`POST /v1/completions`).
    Completions,
    /// Embeddings (`POST /v1/embeddings`).
    Embeddings,
    /// Image generation (`POST /v1/images/generations`).
    Images,
    /// Text to speech (`POST /v1/audio/speech`); the result holds the audio base64-encoded
    /// with its content type (`{"object": "audio.speech", "content_type": "audio/wav", "bytes": N, "b64_json": "..."}`).
    Speech,
}

impl JobKind {
    /// Every kind.
    pub const ALL: [JobKind; 5] = [
        JobKind::Chat,
        JobKind::Completions,
        JobKind::Embeddings,
        JobKind::Images,
        JobKind::Speech,
    ];

    /// The kind's name (`chat`, `completions`, `embeddings`, `images`, `speech`).
    pub const fn as_str(self) -> &'static str {
        match self {
            JobKind::Chat => "chat",
            JobKind::Completions => "completions",
            JobKind::Embeddings => "embeddings",
            JobKind::Images => "images",
            JobKind::Speech => "speech",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The route its requests take.
    pub const fn route(self) -> Route {
        match self {
            JobKind::Chat => Route::Chat,
            JobKind::Completions => Route::Completions,
            JobKind::Embeddings => Route::Embeddings,
            JobKind::Images => Route::Images,
            JobKind::Speech => Route::Speech,
        }
    }

    /// The queue its jobs wait in (`coord.jobs.chat`, ...).
    pub fn queue(self) -> String {
        format!("{QUEUE_PREFIX}{}", self.as_str())
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's state as `GET /v1/jobs/{id}` shows it. Serialised as `queued`, `running`,
/// `succeeded`, `failed`, `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting in its queue (ready or delayed).
    Queued,
    /// Claimed by a worker.
    Running,
    /// Finished with a 2xx answer.
    Succeeded,
    /// Finished with an error, or out of attempts.
    Failed,
    /// Cancelled by an operator: never run, or its run abandoned and its answer discarded.
    Cancelled,
}

impl JobStatus {
    /// Every state.
    pub const ALL: [JobStatus; 5] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    /// The state's name (`queued`, `running`, `succeeded`, `failed`, `cancelled`).
    pub const fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// The state named `name`, if any.
    pub fn parse(name: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl From<squeueha::JobState> for JobStatus {
    fn from(s: squeueha::JobState) -> Self {
        match s {
            squeueha::JobState::Ready | squeueha::JobState::Delayed => JobStatus::Queued,
            squeueha::JobState::InFlight => JobStatus::Running,
            squeueha::JobState::Done => JobStatus::Succeeded,
            squeueha::JobState::Dead => JobStatus::Failed,
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serialised_forms_and_parse_back() {
        for k in JobKind::ALL {
            assert_eq!(serde_json::json!(k), serde_json::json!(k.as_str()));
            assert_eq!(JobKind::parse(k.as_str()), Some(k));
        }
        for s in JobStatus::ALL {
            assert_eq!(serde_json::json!(s), serde_json::json!(s.as_str()));
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobKind::parse("video"), None);
        assert_eq!(JobStatus::parse("done"), None);
        assert_eq!(JobKind::Images.queue(), "coord.jobs.images");
        assert_eq!(JobKind::Speech.route(), Route::Speech);
        assert_eq!(JobKind::parse("speech"), Some(JobKind::Speech));
        assert_eq!(
            JobStatus::from(squeueha::JobState::Delayed),
            JobStatus::Queued
        );
    }
}
