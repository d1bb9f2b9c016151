//! The pipeline on a gateway's seams ([`horos_server_control`]): `POST /v1/search` over its
//! pages ([`IngestSearcher`]), its workers on the admin API ([`IngestAdmin`]), and its documents
//! on the status page ([`IngestStatus`]), its PDF workers in the deep health check
//! ([`PdfWorkersHealth`]). The gateway's routes are built before the pipeline
//! starts: the searcher and the admin routes hold a [`LatePipeline`] and answer "starting"
//! until it is set.

mod admin;
mod health;
mod search;
mod status;

pub use admin::IngestAdmin;
pub use health::PdfWorkersHealth;
pub use search::IngestSearcher;
pub use status::IngestStatus;

use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use crate::pipeline::Pipeline;
use crate::store::PageHit;

/// A pipeline set once it has started, shared with the routes built before it.
pub type LatePipeline<R, T, V> = Arc<OnceLock<Pipeline<R, T, V>>>;

/// Search hits as every front answers them (`/v1/search`, the command line, MCP):
/// `[{"document", "page", "score", "snippet"}]`.
pub fn hits_json(hits: &[PageHit]) -> Value {
    Value::Array(
        hits.iter()
            .map(|h| {
                json!({"document": h.doc_id, "page": h.page_no, "score": h.score,
                       "snippet": h.snippet})
            })
            .collect(),
    )
}
