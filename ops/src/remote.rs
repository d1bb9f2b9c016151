//! The operations of a running HOROS system, called over its HTTP API ([`Remote`]): a client
//! with nothing but the coordinator's address (and its admin key where it has one). The answers
//! are the same types the operations return in-process: documents through the admin API
//! (`/api/v1/documents`, [`crate::http::DocumentAdmin`]), lane jobs through
//! `/api/v1/lanes/jobs` ([`crate::http::LaneAdmin`]), searches through `/v1/search`, and any
//! OpenAI call through [`Remote::client`].

use std::time::{Duration, Instant};

use horos_vllm_client::{Client, ClientConfig};
use ingest_pipeline::store::{DocStatus, Report};
use serde_json::{Value, json};

use crate::documents::{Exported, Hit, IngestArgs, Ingested};
use crate::error::OpsError;
use crate::lanes::{JobStatus, SubmitArgs, Submitted};

/// A question for [`Remote::search`].
#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// Any text a person typed.
    Text(String),
    /// An image (PNG or JPEG bytes): the pages that look like it, on the visual index.
    Image(Vec<u8>),
}

/// A search over the HTTP API.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteSearch {
    /// The question.
    pub question: Question,
    /// `text`, `vector`, `visual` or `hybrid` (`None`: the server's default, `text`; an image is
    /// always `visual`).
    pub mode: Option<String>,
    /// How many pages (1 to 100).
    pub k: usize,
    /// Only this document.
    pub document: Option<i64>,
}

/// How long [`Remote::wait_documents`] and [`Remote::wait_job`] poll, and how often (the lane
/// jobs' own, as [`LaneJobs::wait`](crate::lanes::LaneJobs::wait) takes it).
pub use crate::lanes::Wait;

/// A running system's coordinator, reached over HTTP.
#[derive(Debug, Clone)]
pub struct Remote {
    client: Client,
}

impl Remote {
    /// The system whose coordinator answers at `base` (`http://HOST:PORT`), with `key` (the
    /// admin key where the coordinator has one: the document and lane routes are admin routes);
    /// a call gives up after `timeout`.
    pub fn new(base: &str, key: Option<String>, timeout: Duration) -> Result<Self, OpsError> {
        let mut config = ClientConfig::new(base).total_timeout(timeout);
        if let Some(key) = key {
            config = config.api_key(key);
        }
        Ok(Self {
            client: Client::with_config(config).map_err(OpsError::Client)?,
        })
    }

    /// The OpenAI client of the same coordinator (chat, embeddings, models).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A PDF or a directory of the system's inbox, submitted for ingestion into its collection.
    pub async fn ingest(&self, args: &IngestArgs) -> Result<Ingested, OpsError> {
        let mut body = json!({"path": args.path});
        if let Some(c) = &args.collection {
            body["collection"] = json!(c);
        }
        Ok(self.client.post("/api/v1/documents", &body).await?)
    }

    /// A document's report: its status, pages, chunks, each stage's work.
    pub async fn report(&self, document: i64) -> Result<Report, OpsError> {
        Ok(self
            .client
            .get(&format!("/api/v1/documents/{document}"))
            .await?)
    }

    /// A document as Markdown, page by page.
    pub async fn export(&self, document: i64) -> Result<Exported, OpsError> {
        Ok(self
            .client
            .get(&format!("/api/v1/documents/{document}/markdown"))
            .await?)
    }

    /// The best pages for `search`.
    pub async fn search(&self, search: &RemoteSearch) -> Result<Vec<Hit>, OpsError> {
        use base64::Engine as _;
        let mut body = json!({"k": search.k, "document": search.document});
        match &search.question {
            Question::Text(q) => body["query"] = json!(q),
            Question::Image(bytes) => {
                body["image"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
        }
        if let Some(mode) = &search.mode {
            body["mode"] = json!(mode);
        }
        let answer: Value = self.client.post("/v1/search", &body).await?;
        serde_json::from_value(answer["data"].clone()).map_err(|e| {
            OpsError::Client(horos_vllm_client::Error::Decode {
                message: format!("/v1/search: {e}"),
                body: answer.to_string(),
            })
        })
    }

    /// A chat job queued on a lane.
    pub async fn submit(&self, args: &SubmitArgs) -> Result<Submitted, OpsError> {
        let body = json!({"queue": args.queue, "prompt": args.prompt, "request": args.request,
                          "model": args.model, "max_tokens": args.max_tokens,
                          "priority": args.priority, "dedup_key": args.dedup_key,
                          "delay_s": args.delay_s});
        Ok(self.client.post("/api/v1/lanes/jobs", &body).await?)
    }

    /// A lane job's state, and its answer once done.
    pub async fn job(&self, id: i64) -> Result<JobStatus, OpsError> {
        Ok(self.client.get(&format!("/api/v1/lanes/jobs/{id}")).await?)
    }

    /// Polls `documents` until each is done or failed; `on_report` sees every report read (a
    /// progress bar's feed). Their final reports, in order.
    pub async fn wait_documents(
        &self,
        documents: &[i64],
        wait: Wait,
        mut on_report: impl FnMut(&Report),
    ) -> Result<Vec<Report>, OpsError> {
        let t0 = Instant::now();
        let mut last: Vec<Option<Report>> = vec![None; documents.len()];
        loop {
            for (id, slot) in documents.iter().zip(last.iter_mut()) {
                if slot
                    .as_ref()
                    .is_some_and(|r| r.document.status != DocStatus::Pending)
                {
                    continue;
                }
                let report = self.report(*id).await?;
                on_report(&report);
                *slot = Some(report);
            }
            let pending: Vec<i64> = documents
                .iter()
                .zip(&last)
                .filter(|(_, r)| {
                    r.as_ref()
                        .is_none_or(|r| r.document.status == DocStatus::Pending)
                })
                .map(|(id, _)| *id)
                .collect();
            if pending.is_empty() {
                return Ok(last.into_iter().flatten().collect());
            }
            if t0.elapsed() >= wait.at_most {
                return Err(OpsError::invalid(
                    "timeout",
                    format!(
                        "documents {pending:?} still pending after {} s",
                        wait.at_most.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(wait.every).await;
        }
    }

    /// Polls lane job `id` until it is done (its answer) or dead.
    pub async fn wait_job(&self, id: i64, wait: Wait) -> Result<JobStatus, OpsError> {
        crate::lanes::status::wait_until_ended(id, wait, || self.job(id)).await
    }

    /// Any page under the coordinator (`/status`, `/metrics`) as text.
    pub async fn page(&self, path: &str) -> Result<String, OpsError> {
        Ok(self.client.get_text(path).await?.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, OnceLock};

    use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream};
    use ingest_pipeline::gateway::IngestSearcher;
    use squeueha::JobState;

    use super::*;
    use crate::documents::{SubmissionStatus, testing as docs_kit};
    use crate::http::{DocumentAdmin, LaneAdmin};
    use crate::lanes::testing::lane_jobs;

    #[tokio::test]
    async fn the_operations_answer_over_http_as_they_do_in_process() {
        let (dir, docs) = docs_kit::documents().await;
        let (_queue_dir, jobs) = lane_jobs().await;
        let late = Arc::new(OnceLock::from(docs.pipeline().clone()));
        let config = CoordinatorConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..CoordinatorConfig::default()
        };
        let coordinator = Coordinator::builder(config, Arc::new(StaticUpstream::new()))
            .admin_extension(Arc::new(DocumentAdmin::new(
                Arc::clone(&late),
                docs.inbox().clone(),
            )))
            .admin_extension(Arc::new(LaneAdmin(jobs)))
            .searcher(Arc::new(IngestSearcher(late)))
            .bind()
            .await
            .unwrap();
        let remote = Remote::new(&coordinator.url(), None, Duration::from_secs(10)).unwrap();

        // A document: submitted, read, failed, exported, found.
        docs_kit::pdf(dir.path(), "a.pdf", "alpha");
        let ingested = remote.ingest(&IngestArgs::new("a.pdf")).await.unwrap();
        let submitted = ingested.documents()[0].clone();
        assert_eq!(submitted.status, SubmissionStatus::Queued);
        let id = submitted.document;
        docs_kit::read_page(&docs, id, 1, "the quarterly revenue table");
        assert_eq!(
            remote.report(id).await.unwrap().document.status,
            DocStatus::Pending
        );
        docs_kit::fail(&docs, id, "a test");
        let mut seen = 0;
        let wait = Wait {
            every: Duration::from_millis(20),
            at_most: Duration::from_secs(5),
        };
        let reports = remote
            .wait_documents(&[id], wait, |_| seen += 1)
            .await
            .unwrap();
        assert_eq!(reports[0].document.status, DocStatus::Failed);
        assert_eq!(seen, 1);
        let md = remote.export(id).await.unwrap();
        assert!(md.markdown.contains("quarterly revenue"), "{md:?}");
        let hits = remote
            .search(&RemoteSearch {
                question: Question::Text("revenue".into()),
                mode: Some("text".into()),
                k: 3,
                document: None,
            })
            .await
            .unwrap();
        assert_eq!((hits[0].document, hits[0].page), (id, 1), "{hits:?}");
        // An image question that is no image is the server's 400, its message kept.
        let e = remote
            .search(&RemoteSearch {
                question: Question::Image(b"not an image".to_vec()),
                mode: None,
                k: 3,
                document: None,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&e, OpsError::Coordinator { status: 400, message } if message.contains("image")),
            "{e:?}"
        );
        let e = remote.report(999).await.unwrap_err();
        assert!(
            matches!(e, OpsError::Coordinator { status: 404, .. }),
            "{e:?}"
        );

        // A lane job: queued, read back; nothing feeds it here, so waiting times out.
        let job = remote
            .submit(&SubmitArgs {
                queue: "think".into(),
                prompt: Some("hello".into()),
                ..SubmitArgs::default()
            })
            .await
            .unwrap();
        assert_eq!(remote.job(job.id).await.unwrap().state, JobState::Ready);
        let short = Wait {
            every: Duration::from_millis(20),
            at_most: Duration::from_millis(100),
        };
        let e = remote.wait_job(job.id, short).await.unwrap_err();
        assert_eq!(e.param(), Some("timeout"), "{e:?}");
        assert!(remote.page("/metrics").await.unwrap().contains("horos_"));
        coordinator.shutdown(Duration::from_secs(2)).await;
    }
}
