//! The one error of every operation: [`OpsError`], whose variants say what the caller can do
//! about it, and [`ErrorKind`], the same said coarsely for a front that maps it (an HTTP status,
//! an MCP tool error).

use std::path::PathBuf;

use ingest_pipeline::hybrid::SearchError;
use ingest_pipeline::inbox::InboxError;
use ingest_pipeline::pipeline::PipelineError;
use ingest_pipeline::store::{DocStatus, StoreError};

/// Why an operation failed.
///
/// The first variants are the caller's to fix (an argument, an id that does not exist, a
/// request the state of the system refuses); the last ones are the backends' failures, their
/// cause kept as [`std::error::Error::source`]. [`OpsError::kind`] sorts them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// An argument is wrong (`param` names it): fix it and call again.
    #[error("{message}")]
    InvalidArgument {
        /// The argument at fault.
        param: &'static str,
        /// What is wrong, and what would be right.
        message: String,
    },
    /// No lane has this queue: submit to one of `known`.
    #[error("no lane `{queue}` (the lanes' queues: {})", known_or_none(.known))]
    UnknownLane {
        /// The queue named.
        queue: String,
        /// The lanes' queues.
        known: Vec<String>,
    },
    /// No job has this id (never submitted, or its record was purged).
    #[error("no job {0}")]
    NoJob(i64),
    /// No dead letter has this id in the queues looked at.
    #[error("{}", no_dead_job(*.id, *.ingest))]
    NoDeadJob {
        /// The id named.
        id: i64,
        /// Whether the ingest pipeline's queues were the ones looked at.
        ingest: bool,
    },
    /// The ingest pipeline's dead job belongs to a document that is no longer being ingested:
    /// requeued, it would be dropped. A failed document is ingested again with a retry.
    #[error("{}", document_ended(*.job, *.doc, *.status))]
    DocumentEnded {
        /// The dead job.
        job: i64,
        /// Its document.
        doc: i64,
        /// The document's status; `None` when it was deleted.
        status: Option<DocStatus>,
    },
    /// An ingest stage's dead letters are not purged: the pipeline reads them to fail their
    /// documents. Delete or retry the documents instead.
    #[error(
        "`{queue}` is a stage of the ingest pipeline: its dead letters fail their documents, \
         so they are not purged (delete the documents, or ingest them again with a retry)"
    )]
    StageNotPurged {
        /// The stage's queue.
        queue: String,
    },
    /// No document has this id.
    #[error("no document {0}")]
    NoDocument(i64),
    /// Only a failed document is ingested again.
    #[error("document {id} is {}, not failed: only a failed document is retried", .status.as_str())]
    NotFailed {
        /// The document.
        id: i64,
        /// Its status.
        status: DocStatus,
    },
    /// No document was submitted from this file.
    #[error("no document was submitted from {}", .path.display())]
    NeverSubmitted {
        /// The file, as its real path.
        path: PathBuf,
    },
    /// Documents were submitted from this file, but none of them failed.
    #[error("no document submitted from {} has failed", .path.display())]
    NoFailedDocument {
        /// The file, as its real path.
        path: PathBuf,
    },
    /// A directory of the inbox holds no PDF.
    #[error("no PDF under {}: put .pdf files there, or name one file", .dir.display())]
    NoPdf {
        /// The directory.
        dir: PathBuf,
    },
    /// A path is not accepted from the inbox (outside it, missing, not a file).
    #[error(transparent)]
    Inbox(#[from] InboxError),
    /// No coordinator answers at the admin API's address: start it, or fix the address.
    #[error(
        "no coordinator answers at {url} ({message}): is `horos-ref run` running with this \
         configuration?"
    )]
    CoordinatorUnreachable {
        /// The address tried.
        url: String,
        /// Why the connection failed.
        message: String,
    },
    /// The coordinator answered with an error status (its own message kept).
    #[error("the coordinator answered {status}: {message}{}", status_hint(*.status))]
    Coordinator {
        /// The HTTP status.
        status: u16,
        /// The coordinator's message (`error.message`), or its whole body.
        message: String,
    },
    /// The queue database failed.
    #[error("queue: {0}")]
    Queue(#[from] squeueha::Error),
    /// The lanes' results table could not be read.
    #[error("results: {0}")]
    Results(#[source] horos_feeder::Error),
    /// The ingest pipeline failed.
    #[error(transparent)]
    Pipeline(PipelineError),
    /// A search failed (the question could not be embedded, no visual model, the store).
    #[error(transparent)]
    Search(#[from] SearchError),
    /// An HTTP client failed otherwise (it could not be built, a timeout, a malformed answer).
    #[error("client: {0}")]
    Client(#[source] horos_vllm_client::Error),
    /// The pipeline could not be opened from its settings (its database, a client).
    #[error("the pipeline: {0}")]
    Setup(#[source] ingest_pipeline::configured::SetupError),
    /// An output file could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A blocking task panicked or was cancelled.
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// What an [`OpsError`] means to a front: how an HTTP API answers it, whether an MCP tool's
/// arguments were at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller's arguments: fix them (HTTP 400).
    InvalidArgument,
    /// What was named does not exist (HTTP 404).
    NotFound,
    /// The request conflicts with the state of the system (HTTP 409).
    Conflict,
    /// A service this operation needs does not answer (HTTP 502).
    Unavailable,
    /// The system's own failure (HTTP 500).
    Internal,
}

impl OpsError {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument { .. } | Self::UnknownLane { .. } | Self::Inbox(_) => {
                ErrorKind::InvalidArgument
            }
            Self::NoJob(_)
            | Self::NoDeadJob { .. }
            | Self::NoDocument(_)
            | Self::NeverSubmitted { .. }
            | Self::NoFailedDocument { .. }
            | Self::NoPdf { .. } => ErrorKind::NotFound,
            Self::DocumentEnded { .. } | Self::StageNotPurged { .. } | Self::NotFailed { .. } => {
                ErrorKind::Conflict
            }
            Self::CoordinatorUnreachable { .. } | Self::Coordinator { .. } => {
                ErrorKind::Unavailable
            }
            Self::Queue(_)
            | Self::Results(_)
            | Self::Pipeline(_)
            | Self::Search(_)
            | Self::Client(_)
            | Self::Setup(_)
            | Self::Write { .. }
            | Self::Task(_) => ErrorKind::Internal,
        }
    }

    /// The argument at fault, where one is (`queue` for an unknown lane).
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Self::InvalidArgument { param, .. } => Some(param),
            Self::UnknownLane { .. } => Some("queue"),
            Self::Inbox(_) => Some("path"),
            _ => None,
        }
    }

    /// An [`OpsError::InvalidArgument`].
    pub(crate) fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            param,
            message: message.into(),
        }
    }
}

impl From<PipelineError> for OpsError {
    /// The pipeline's refusals as the variants a caller acts on; its failures kept whole.
    fn from(e: PipelineError) -> Self {
        match e {
            PipelineError::UnknownDocument(id) => Self::NoDocument(id),
            PipelineError::NoDeadJob(id) => Self::NoDeadJob { id, ingest: true },
            PipelineError::DocumentEnded { job, doc, status } => {
                Self::DocumentEnded { job, doc, status }
            }
            PipelineError::NotFailed { id, status } => Self::NotFailed { id, status },
            other => Self::Pipeline(other),
        }
    }
}

impl From<StoreError> for OpsError {
    /// A store failure is the pipeline's.
    fn from(e: StoreError) -> Self {
        Self::Pipeline(PipelineError::Store(e))
    }
}

fn known_or_none(known: &[String]) -> String {
    if known.is_empty() {
        "none configured".to_owned()
    } else {
        known.join(", ")
    }
}

fn no_dead_job(id: i64, ingest: bool) -> String {
    if ingest {
        format!(
            "no dead job {id} in the ingest pipeline's queues (horos-ref dead --queue STAGE \
             lists a stage's)"
        )
    } else {
        format!("no dead job {id}")
    }
}

fn document_ended(job: i64, doc: i64, status: Option<DocStatus>) -> String {
    match status {
        Some(DocStatus::Failed) => format!(
            "dead job {job} belongs to document {doc}, which failed: requeued, the job would be \
             dropped and the document stay failed. Ingest the document again, after fixing the \
             cause (horos-ref docs {doc} says it): horos-ref ingest --retry {doc}"
        ),
        Some(other) => format!(
            "dead job {job} belongs to document {doc}, which is {}: nothing to requeue",
            other.as_str()
        ),
        None => format!(
            "dead job {job} belongs to document {doc}, which no longer exists (deleted, or \
             replaced by ingest --retry): nothing to requeue; to ingest its file again: \
             horos-ref ingest PATH"
        ),
    }
}

/// What the operator can do about a refusal: a wrong key is the one thing fixable from here.
fn status_hint(status: u16) -> &'static str {
    match status {
        401 => {
            " (set [coordinator] api_key_env's variable (or api_key) to the key the running \
             coordinator was started with)"
        }
        403 => " (this key may not do that: use the admin key)",
        _ => "",
    }
}

impl From<horos_vllm_client::Error> for OpsError {
    /// The coordinator's own message where it sent one, and where it was looked for when
    /// nothing answers.
    fn from(e: horos_vllm_client::Error) -> Self {
        use horos_vllm_client::Error;
        match e {
            Error::Status { status, body } => {
                let message = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                    .unwrap_or(body);
                Self::Coordinator { status, message }
            }
            Error::Connect { url, message, .. } => Self::CoordinatorUnreachable { url, message },
            other => Self::Client(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_key_says_which_setting_to_fix() {
        let e = OpsError::from(horos_vllm_client::Error::Status {
            status: 401,
            body: r#"{"error": {"message": "bad key"}}"#.into(),
        });
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        let text = e.to_string();
        assert!(
            text.starts_with("the coordinator answered 401: bad key"),
            "{text}"
        );
        assert!(text.contains("api_key_env"), "{text}");
    }

    #[test]
    fn the_pipelines_refusals_become_variants_a_caller_acts_on() {
        let e = OpsError::from(PipelineError::UnknownDocument(7));
        assert!(matches!(e, OpsError::NoDocument(7)));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = OpsError::from(PipelineError::DocumentEnded {
            job: 3,
            doc: 9,
            status: Some(DocStatus::Failed),
        });
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(e.to_string().contains("horos-ref ingest --retry 9"), "{e}");
        let e = OpsError::from(PipelineError::Timeout(1));
        assert!(matches!(e, OpsError::Pipeline(PipelineError::Timeout(1))));
        assert_eq!(e.kind(), ErrorKind::Internal);
    }

    #[test]
    fn an_unknown_lane_names_the_argument_and_the_lanes() {
        let e = OpsError::UnknownLane {
            queue: "nope".into(),
            known: vec!["think".into(), "vision".into()],
        };
        assert_eq!(e.param(), Some("queue"));
        assert_eq!(
            e.to_string(),
            "no lane `nope` (the lanes' queues: think, vision)"
        );
    }
}
