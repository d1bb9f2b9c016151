//! Dead letters: a queue's listed, one requeued, a queue's purged. The ingest pipeline's stages
//! (`pdf_to_images`, `image_to_ocr`, ...) are queues of the pipeline's own database: given the
//! pipeline, their dead letters are read there, and one is requeued only while its document is
//! still being ingested (a failed document is ingested again with
//! [`Documents::retry`](crate::documents::Documents::retry)).

use ingest_pipeline::configured::ConfiguredPipeline;
use ingest_pipeline::pipeline::Stage;
use serde::{Deserialize, Serialize};
use squeueha::{AsyncQueue, DeadJob};

use super::LaneJobs;
use crate::error::OpsError;

/// How many dead letters are listed when the caller does not say.
pub const DEFAULT_DEAD_LIMIT: usize = 20;
/// The most dead letters one call lists.
const MAX_DEAD_LIMIT: usize = 1000;

fn default_limit() -> usize {
    DEFAULT_DEAD_LIMIT
}

/// A queue's dead letters: listed (the default), one of them requeued (`requeue`), or all of
/// them purged (`purge`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"queue": "think"}))]
#[schemars(example = serde_json::json!({"queue": "think", "limit": 5}))]
#[schemars(example = serde_json::json!({"queue": "image_to_ocr", "requeue": 17}))]
#[schemars(example = serde_json::json!({"queue": "think", "purge": true}))]
pub struct DeadArgs {
    /// The queue: a lane's, or a stage of the ingest pipeline.
    pub queue: String,
    /// How many to list (at most 1000).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: usize,
    /// Requeue this dead job instead of listing.
    #[serde(default)]
    pub requeue: Option<i64>,
    /// Delete the queue's dead letters instead of listing.
    #[serde(default)]
    pub purge: bool,
}

impl DeadArgs {
    /// List up to `limit` of `queue`'s dead letters.
    pub fn list(queue: impl Into<String>, limit: usize) -> Self {
        Self {
            queue: queue.into(),
            limit,
            requeue: None,
            purge: false,
        }
    }

    /// Requeue dead job `id` of `queue`.
    pub fn requeue(queue: impl Into<String>, id: i64) -> Self {
        Self {
            requeue: Some(id),
            ..Self::list(queue, DEFAULT_DEAD_LIMIT)
        }
    }

    /// Purge `queue`'s dead letters.
    pub fn purge(queue: impl Into<String>) -> Self {
        Self {
            purge: true,
            ..Self::list(queue, DEFAULT_DEAD_LIMIT)
        }
    }
}

/// One dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The id the job had.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Claims made.
    pub attempts: u32,
    /// When it died (Unix milliseconds).
    pub died_at: i64,
    /// Why it died.
    pub reason: Option<String>,
}

impl From<DeadJob> for DeadLetter {
    fn from(d: DeadJob) -> Self {
        Self {
            id: d.id,
            queue: d.queue,
            attempts: d.attempts,
            died_at: d.died_at,
            reason: d.last_error,
        }
    }
}

/// A queue's dead letters, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetters {
    /// The queue.
    pub queue: String,
    /// Its dead letters.
    pub dead: Vec<DeadLetter>,
}

/// A dead job back in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requeued {
    /// The dead job's id.
    pub requeued: i64,
    /// The new job's id.
    pub id: i64,
}

/// A queue's dead letters deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    /// The queue.
    pub queue: String,
    /// How many were deleted.
    pub purged: usize,
}

/// What [`LaneJobs::dead`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum DeadAnswer {
    /// The dead letters listed.
    Listed(DeadLetters),
    /// One requeued.
    Requeued(Requeued),
    /// A queue's purged.
    Purged(Purged),
}

/// Whether `queue` is a stage of the ingest pipeline (its jobs live in the pipeline's
/// database).
pub fn is_ingest_stage(queue: &str) -> bool {
    Stage::ALL.iter().any(|s| s.queue() == queue)
}

impl LaneJobs {
    /// Lists, requeues or purges the dead letters of `args.queue`. With `pipeline`, an ingest
    /// stage's are the pipeline's ([`is_ingest_stage`]): a requeue is refused with
    /// [`OpsError::DocumentEnded`] when its document is no longer pending, a purge with
    /// [`OpsError::StageNotPurged`]. `requeue` and `purge` together are refused.
    pub async fn dead(
        &self,
        pipeline: Option<&ConfiguredPipeline>,
        args: DeadArgs,
    ) -> Result<DeadAnswer, OpsError> {
        let pipeline = pipeline.filter(|_| is_ingest_stage(&args.queue));
        match (args.requeue, args.purge) {
            (Some(_), true) => Err(OpsError::invalid(
                "purge",
                "give `requeue` or `purge`, not both",
            )),
            (Some(id), false) => {
                let new_id = match pipeline {
                    Some(p) => p.requeue_dead(id).await?,
                    None => self.queue.requeue_dead(id).await.map_err(|e| match e {
                        squeueha::Error::NotFound(_) => OpsError::NoDeadJob { id, ingest: false },
                        other => OpsError::Queue(other),
                    })?,
                };
                Ok(DeadAnswer::Requeued(Requeued {
                    requeued: id,
                    id: new_id,
                }))
            }
            (None, true) => {
                if pipeline.is_some() {
                    return Err(OpsError::StageNotPurged { queue: args.queue });
                }
                let queue = self.queue.blocking().clone();
                let name = args.queue.clone();
                let purged =
                    tokio::task::spawn_blocking(move || queue.purge_dead(&name, None)).await??;
                Ok(DeadAnswer::Purged(Purged {
                    queue: args.queue,
                    purged,
                }))
            }
            (None, false) => {
                let limit = args.limit.min(MAX_DEAD_LIMIT);
                let dead = match pipeline {
                    Some(p) => {
                        AsyncQueue::new(p.queue().clone())
                            .dead_letters(&args.queue, limit)
                            .await?
                    }
                    None => self.queue.dead_letters(&args.queue, limit).await?,
                };
                Ok(DeadAnswer::Listed(DeadLetters {
                    queue: args.queue,
                    dead: dead.into_iter().map(DeadLetter::from).collect(),
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::lanes::SubmitArgs;
    use crate::lanes::testing::lane_jobs;

    /// Submits a job on `think` and buries it with `reason`; its id.
    async fn dead_job(jobs: &LaneJobs, reason: &str) -> i64 {
        let id = jobs
            .submit(SubmitArgs {
                queue: "think".into(),
                prompt: Some("x".into()),
                ..SubmitArgs::default()
            })
            .await
            .unwrap()
            .id;
        let queue = jobs.queue().blocking();
        let claimed = queue
            .poll_batch("think", 1, Duration::from_secs(30))
            .unwrap();
        assert_eq!(claimed[0].id, id);
        queue.bury(claimed[0].lease, reason).unwrap();
        id
    }

    #[tokio::test]
    async fn a_lanes_dead_letters_are_listed_requeued_and_purged() {
        let (_dir, jobs) = lane_jobs().await;
        let first = dead_job(&jobs, "poison pill").await;
        dead_job(&jobs, "bad request").await;
        let DeadAnswer::Listed(listed) = jobs.dead(None, DeadArgs::list("think", 1)).await.unwrap()
        else {
            panic!("not a list");
        };
        assert_eq!(listed.dead.len(), 1, "the limit holds");
        assert_eq!(listed.dead[0].id, first);
        assert_eq!(listed.dead[0].reason.as_deref(), Some("poison pill"));

        let answer = jobs
            .dead(None, DeadArgs::requeue("think", first))
            .await
            .unwrap();
        let DeadAnswer::Requeued(r) = answer else {
            panic!("not a requeue");
        };
        assert_eq!(r.requeued, first);
        assert_eq!(
            serde_json::to_value(answer).unwrap(),
            json!({"requeued": first, "id": r.id})
        );
        assert_eq!(jobs.queue().stats("think").await.unwrap().ready, 1);
        let e = jobs
            .dead(None, DeadArgs::requeue("think", first))
            .await
            .unwrap_err();
        assert!(matches!(e, OpsError::NoDeadJob { .. }), "{e:?}");

        let purged = jobs.dead(None, DeadArgs::purge("think")).await.unwrap();
        assert_eq!(
            purged,
            DeadAnswer::Purged(Purged {
                queue: "think".into(),
                purged: 1
            })
        );
        assert_eq!(jobs.queue().stats("think").await.unwrap().dead, 0);
    }

    #[tokio::test]
    async fn requeue_and_purge_together_are_refused() {
        let (_dir, jobs) = lane_jobs().await;
        let args: DeadArgs =
            serde_json::from_value(json!({"queue": "think", "requeue": 1, "purge": true})).unwrap();
        let e = jobs.dead(None, args).await.unwrap_err();
        assert_eq!(e.param(), Some("purge"));
    }

    #[tokio::test]
    async fn an_ingest_stages_dead_letters_are_the_pipelines_and_a_failed_documents_stay() {
        use crate::documents::IngestArgs;
        use crate::documents::testing::{documents, fail, pdf};

        let (_lanes_dir, jobs) = lane_jobs().await;
        let (dir, docs) = documents().await;
        pdf(dir.path(), "a.pdf", "a");
        let doc = docs
            .ingest(IngestArgs::new("a.pdf"))
            .await
            .unwrap()
            .documents()[0]
            .document;
        // Its rendering dies for good and the document fails, as the worker records them.
        let stage = docs.pipeline().queue();
        let claimed = stage
            .poll_batch("pdf_to_images", 1, Duration::from_secs(30))
            .unwrap();
        stage.bury(claimed[0].lease, "not a PDF").unwrap();
        fail(&docs, doc, "pdf_to_images: not a PDF");
        let pipeline = Some(docs.pipeline());

        let DeadAnswer::Listed(listed) = jobs
            .dead(pipeline, DeadArgs::list("pdf_to_images", 20))
            .await
            .unwrap()
        else {
            panic!("not a list");
        };
        assert_eq!(listed.dead.len(), 1, "{listed:?}");
        assert_eq!(listed.dead[0].reason.as_deref(), Some("not a PDF"));
        // Without the pipeline, the name is only a queue of the lanes' database: nothing there.
        let DeadAnswer::Listed(elsewhere) = jobs
            .dead(None, DeadArgs::list("pdf_to_images", 20))
            .await
            .unwrap()
        else {
            panic!("not a list");
        };
        assert!(elsewhere.dead.is_empty());

        let job = listed.dead[0].id;
        let e = jobs
            .dead(pipeline, DeadArgs::requeue("pdf_to_images", job))
            .await
            .unwrap_err();
        assert!(
            matches!(e, OpsError::DocumentEnded { doc: d, .. } if d == doc),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains(&format!("horos-ref ingest --retry {doc}")),
            "{e}"
        );
        let e = jobs
            .dead(pipeline, DeadArgs::requeue("pdf_to_images", 999_999))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no dead job 999999"), "{e}");
        let e = jobs
            .dead(pipeline, DeadArgs::purge("pdf_to_images"))
            .await
            .unwrap_err();
        assert!(matches!(e, OpsError::StageNotPurged { .. }), "{e:?}");
        assert_eq!(
            stage.stats("pdf_to_images").unwrap().dead,
            1,
            "nothing changed"
        );
    }

    #[test]
    fn the_stages_are_known_by_their_queues() {
        assert!(is_ingest_stage("pdf_to_images") && is_ingest_stage("embed_visual"));
        assert!(!is_ingest_stage("think"));
    }
}
