//! Jobs as they go in (`NewJob`), come out (`Job`) and are looked up (`JobInfo`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, de::DeserializeOwned};

use crate::error::Result;

/// Milliseconds since the Unix epoch; the clock every process sharing a database agrees on.
pub type Millis = i64;

/// Now, in [`Millis`]: the clock the queue stamps jobs with. Crates that keep their own
/// timestamps in the queue's database use it too. A clock before 1970 reads 0.
pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// How an enqueue is made idempotent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Dedup {
    /// Every enqueue creates a job.
    #[default]
    None,
    /// Jobs with the same key in the same queue (within the dedup window) are one job.
    Key(String),
    /// The SHA-256 of the payload is the key.
    PayloadHash,
}

/// A job to enqueue. Build with [`NewJob::new`] or [`NewJob::json`] and the builder methods.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub(crate) payload: Vec<u8>,
    pub(crate) priority: i32,
    pub(crate) delay: Duration,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) dedup: Dedup,
}

impl NewJob {
    /// A job carrying raw bytes.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        NewJob {
            payload: payload.into(),
            priority: 0,
            delay: Duration::ZERO,
            max_attempts: None,
            dedup: Dedup::None,
        }
    }

    /// A job carrying `value` serialized as JSON.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        Ok(NewJob::new(serde_json::to_vec(value)?))
    }

    /// Higher priorities are claimed first (default 0; negative values are allowed).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The job is not visible to consumers before `delay` has passed.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Claims allowed before the job moves to the dead-letter table (overrides the queue default).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Makes the enqueue idempotent by an explicit key.
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup = Dedup::Key(key.into());
        self
    }

    /// Makes the enqueue idempotent by the payload's SHA-256.
    pub fn dedup_by_payload(mut self) -> Self {
        self.dedup = Dedup::PayloadHash;
        self
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
}

/// Result of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job was created.
    New(i64),
    /// The dedup key matched an earlier enqueue; this is that job's id (it may have finished since).
    Duplicate(i64),
}

impl Enqueued {
    /// The job id, new or existing.
    pub fn id(self) -> i64 {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }

    /// True when the enqueue created a job.
    pub fn is_new(self) -> bool {
        matches!(self, Enqueued::New(_))
    }
}

/// The receipt of a claim. Only the holder of the current lease may ack, nack or extend the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The job the lease is for.
    pub job_id: i64,
    /// Random token of this claim; a later claim of the same job gets another one.
    pub token: i64,
}

/// A claimed job.
#[derive(Debug, Clone)]
pub struct Job {
    /// Job id, unique in the database.
    pub id: i64,
    /// Queue it came from.
    pub queue: String,
    /// The payload as enqueued.
    pub payload: Vec<u8>,
    /// Its priority.
    pub priority: i32,
    /// Claims so far, this one included.
    pub attempts: u32,
    /// Claims allowed before the dead-letter table.
    pub max_attempts: u32,
    /// When the job was enqueued.
    pub enqueued_at: Millis,
    /// When the lease expires and the job becomes visible again unless acked or extended.
    pub lease_expires_at: Millis,
    /// The receipt needed to ack, nack or extend.
    pub lease: Lease,
}

impl Job {
    /// Decodes the payload as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        Ok(serde_json::from_slice(&self.payload)?)
    }

    /// True when this is the last attempt before a failure sends the job to the dead-letter table.
    pub fn is_last_attempt(&self) -> bool {
        self.attempts >= self.max_attempts
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Visible, waiting for a consumer.
    Ready,
    /// Claimed; invisible until its lease expires.
    InFlight,
    /// Waiting for its delay or retry backoff.
    Delayed,
    /// Acked and retained (see [`Config::retain_done`](crate::Config::retain_done)).
    Done,
    /// In the dead-letter table.
    Dead,
}

impl JobState {
    /// The state's name as serialised: `ready`, `in_flight`, `delayed`, `done` or `dead`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::InFlight => "in_flight",
            Self::Delayed => "delayed",
            Self::Done => "done",
            Self::Dead => "dead",
        }
    }
}

/// A job looked up by id, whatever its state.
#[derive(Debug, Clone)]
pub struct JobInfo {
    /// Job id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its state.
    pub state: JobState,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its priority.
    pub priority: i32,
    /// Claims so far.
    pub attempts: u32,
    /// Claims allowed.
    pub max_attempts: u32,
    /// Last error given by `nack` (or the reason it died).
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub enqueued_at: Millis,
}

/// A job in the dead-letter table.
#[derive(Debug, Clone)]
pub struct DeadJob {
    /// The id the job had (kept, so callers can correlate).
    pub id: i64,
    /// Queue it came from.
    pub queue: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its priority.
    pub priority: i32,
    /// Claims made.
    pub attempts: u32,
    /// Why it died: the last error given by `nack`, or a lease expiry.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub enqueued_at: Millis,
    /// When it moved to the dead-letter table.
    pub died_at: Millis,
}

/// What became of a job given back with `nack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nacked {
    /// The job will be visible again at this time.
    Retry {
        /// When it becomes visible.
        at: Millis,
    },
    /// Its attempts were used up: it is in the dead-letter table.
    Dead,
}

#[cfg(test)]
mod tests {
    use super::JobState;

    #[test]
    fn a_states_name_is_its_serialised_name() {
        for state in [
            JobState::Ready,
            JobState::InFlight,
            JobState::Delayed,
            JobState::Done,
            JobState::Dead,
        ] {
            assert_eq!(
                serde_json::to_value(state).ok(),
                Some(serde_json::Value::from(state.as_str()))
            );
        }
    }
}
