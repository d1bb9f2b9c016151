//! Status: a lane job's state and, once the feeder stored it, its answer.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use squeueha::JobState;

use super::LaneJobs;
use crate::error::OpsError;

/// How long a wait polls, and how often ([`LaneJobs::wait`]; the remote operations' too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Between two polls.
    pub every: Duration,
    /// In all, before [`OpsError::InvalidArgument`] on `timeout`.
    pub at_most: Duration,
}

/// Which job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"id": 42}))]
pub struct StatusArgs {
    /// The job's id (from [`LaneJobs::submit`]).
    #[schemars(description = "The job's id (from submit).")]
    pub id: i64,
}

/// A job's state, and its answer once done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    pub id: i64,
    /// Where it is: `ready`, `in_flight`, `delayed`, `done` or `dead`.
    pub state: JobState,
    /// Its queue (absent when the finished job's record was purged and only its answer is
    /// left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Claims so far (absent with `queue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The last failure (or why it died).
    #[serde(default)]
    pub last_error: Option<String>,
    /// The answer's text, once the feeder stored it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl LaneJobs {
    /// The state of job `id`, with its answer once the feeder stored it (a job with an answer
    /// is `done`, whether or not its record is retained). [`OpsError::NoJob`] when neither the
    /// queue nor the results know it.
    pub async fn status(&self, args: StatusArgs) -> Result<JobStatus, OpsError> {
        let id = args.id;
        let results = self.results().await?.clone();
        let answer = tokio::task::spawn_blocking(move || results.result_text(id))
            .await?
            .map_err(OpsError::Results)?;
        let job = self.queue.get(id).await?;
        match (job, answer) {
            (Some(job), answer) => Ok(JobStatus {
                id,
                state: if answer.is_some() {
                    JobState::Done
                } else {
                    job.state
                },
                queue: Some(job.queue),
                attempts: Some(job.attempts),
                last_error: job.last_error,
                answer,
            }),
            (None, Some(answer)) => Ok(JobStatus {
                id,
                state: JobState::Done,
                queue: None,
                attempts: None,
                last_error: None,
                answer: Some(answer),
            }),
            (None, None) => Err(OpsError::NoJob(id)),
        }
    }

    /// Polls job `id` every `wait.every` until it is done (with its answer) or dead; after
    /// `wait.at_most`, [`OpsError::InvalidArgument`] on `timeout`.
    pub async fn wait(&self, id: i64, wait: Wait) -> Result<JobStatus, OpsError> {
        wait_until_ended(id, wait, || self.status(StatusArgs { id })).await
    }
}

/// Reads job `id` with `read` every `wait.every` until it is done or dead; after
/// `wait.at_most`, [`OpsError::InvalidArgument`] on `timeout`. In process ([`LaneJobs::wait`])
/// and over HTTP (`Remote::wait_job`) alike.
pub(crate) async fn wait_until_ended<F, Fut>(
    id: i64,
    wait: Wait,
    read: F,
) -> Result<JobStatus, OpsError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<JobStatus, OpsError>>,
{
    poll_until(
        wait,
        read,
        |job: &JobStatus| matches!(job.state, JobState::Done | JobState::Dead),
        |job| format!("lane job {id} is {}", job.state.as_str()),
    )
    .await
}

/// Reads with `read` every `wait.every` until `ended` holds for what it read, which it
/// returns; after `wait.at_most`, [`OpsError::InvalidArgument`] on `timeout`, saying
/// `where_it_is` of the last read and for how long. The one poll loop of the jobs a caller
/// follows (lane jobs, the coordinator's async jobs).
pub(crate) async fn poll_until<T, F, Fut>(
    wait: Wait,
    mut read: F,
    ended: impl Fn(&T) -> bool,
    where_it_is: impl Fn(&T) -> String,
) -> Result<T, OpsError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, OpsError>>,
{
    let t0 = Instant::now();
    loop {
        let last = read().await?;
        if ended(&last) {
            return Ok(last);
        }
        if t0.elapsed() >= wait.at_most {
            return Err(OpsError::invalid(
                "timeout",
                format!("{} after {} s", where_it_is(&last), wait.at_most.as_secs()),
            ));
        }
        tokio::time::sleep(wait.every).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use horos_feeder::{Completed, ResultSink, TableSink};
    use horos_vllm_client::ChatResponse;
    use serde_json::json;

    use super::*;
    use crate::lanes::SubmitArgs;
    use crate::lanes::testing::lane_jobs;

    fn prompt(text: &str) -> SubmitArgs {
        SubmitArgs {
            queue: "think".into(),
            prompt: Some(text.into()),
            ..SubmitArgs::default()
        }
    }

    #[tokio::test]
    async fn a_job_is_ready_then_done_with_the_answer_the_feeder_stored() {
        let (_dir, jobs) = lane_jobs().await;
        let id = jobs.submit(prompt("2+2?")).await.unwrap().id;
        let s = jobs.status(StatusArgs { id }).await.unwrap();
        assert_eq!(s.state, JobState::Ready);
        assert_eq!((s.queue.as_deref(), s.attempts), (Some("think"), Some(0)));
        assert_eq!(s.answer, None);
        // The feeder claims it, gets an answer, and stores it with the ack (as TableSink does).
        let queue = jobs.queue().blocking().clone();
        let claimed = queue
            .poll_batch("think", 1, Duration::from_secs(30))
            .unwrap();
        let response: ChatResponse = serde_json::from_value(json!({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "smollm2",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "four"}}]
        }))
        .unwrap();
        let sink = TableSink::new(queue).unwrap();
        let stored = sink
            .store(&[Completed {
                job: claimed[0].clone(),
                response,
            }])
            .unwrap();
        assert_eq!(stored, 1);
        let s = jobs.status(StatusArgs { id }).await.unwrap();
        assert_eq!(s.state, JobState::Done);
        assert_eq!(s.answer.as_deref(), Some("four"));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["answer"], "four");
        assert_eq!(v["state"], "done");
    }

    #[tokio::test]
    async fn a_dead_job_says_why_and_an_unknown_one_is_not_found() {
        let (_dir, jobs) = lane_jobs().await;
        let id = jobs.submit(prompt("x")).await.unwrap().id;
        let short = Wait {
            every: Duration::from_millis(5),
            at_most: Duration::from_millis(20),
        };
        let e = jobs.wait(id, short).await.unwrap_err();
        assert_eq!(e.param(), Some("timeout"), "{e}");
        let queue = jobs.queue().blocking().clone();
        let claimed = queue
            .poll_batch("think", 1, Duration::from_secs(30))
            .unwrap();
        queue.bury(claimed[0].lease, "poison pill").unwrap();
        let s = jobs.wait(id, short).await.unwrap();
        assert_eq!(s.state, JobState::Dead);
        let s = jobs.status(StatusArgs { id }).await.unwrap();
        assert_eq!(s.state, JobState::Dead);
        assert_eq!(s.last_error.as_deref(), Some("poison pill"));
        let e = jobs.status(StatusArgs { id: 987 }).await.unwrap_err();
        assert!(matches!(e, OpsError::NoJob(987)), "{e}");
        assert_eq!(e.to_string(), "no job 987");
    }
}
