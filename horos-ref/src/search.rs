//! The coordinator's `POST /v1/search` over the ingest pipeline's pages: `mode` "text" (the
//! default: full text with any text a person types, every word else any) or "visual" (MaxSim of
//! the question's vectors from the configured late-interaction model over the page images),
//! optionally within one document.

use std::sync::OnceLock;

use async_trait::async_trait;
use horos_coordinator::{SearchError, Searcher};
use ingest_pipeline::embed::EmbedError;
use ingest_pipeline::visual_search::{VisualQuery, VisualSearchError, search_by_text};
use serde_json::Value;

use crate::ingest::RefPipeline;

/// The pipeline's pages, searchable once the pipeline has started.
#[derive(Default)]
pub struct IngestSearcher {
    pipeline: OnceLock<RefPipeline>,
}

impl IngestSearcher {
    /// Searches `pipeline`'s pages from now on.
    pub fn attach(&self, pipeline: &RefPipeline) {
        let _ = self.pipeline.set(pipeline.clone());
    }
}

#[async_trait]
impl Searcher for IngestSearcher {
    async fn search(&self, query: &str, k: usize, options: &Value) -> Result<Value, SearchError> {
        let document = match &options["document"] {
            Value::Null => None,
            v => Some(v.as_i64().ok_or_else(|| {
                SearchError::Invalid("`document` must be a document id (an integer)".into())
            })?),
        };
        let pipeline = self
            .pipeline
            .get()
            .ok_or_else(|| SearchError::Unavailable("the ingest pipeline is starting".into()))?;
        let conn = pipeline
            .connection()
            .map_err(|e| SearchError::Unavailable(e.to_string()))?;
        let hits = match options["mode"].as_str() {
            None | Some("text") => {
                let query = query.to_owned();
                // Within one document: look deeper, then keep that document's pages.
                let fetch = if document.is_some() { k * 20 } else { k };
                let hits = tokio::task::spawn_blocking(move || {
                    ingest_pipeline::store::search_user_text(&conn, &query, fetch)
                })
                .await
                .map_err(|e| SearchError::Unavailable(e.to_string()))?
                .map_err(|e| SearchError::Unavailable(e.to_string()))?;
                hits.into_iter()
                    .filter(|h| document.is_none_or(|d| h.doc_id == d))
                    .take(k)
                    .collect::<Vec<_>>()
            }
            Some("visual") => {
                let q = VisualQuery {
                    text: query.to_owned(),
                    k,
                    docs: document.map(|d| vec![d]),
                    threads: std::thread::available_parallelism().map_or(1, usize::from),
                };
                search_by_text(conn, pipeline.visual(), q)
                    .await
                    .map_err(|e| match e {
                        // No model configured (the pixel-patch fallback): asked for what this
                        // deployment cannot do.
                        e @ VisualSearchError::Embed(EmbedError::NoTextQuery(_)) => {
                            SearchError::Invalid(e.to_string())
                        }
                        other => SearchError::Unavailable(other.to_string()),
                    })?
            }
            Some(other) => {
                return Err(SearchError::Invalid(format!(
                    "search mode `{other}` is not known (text, visual)"
                )));
            }
        };
        Ok(crate::ingest::hits_json(&hits))
    }
}
