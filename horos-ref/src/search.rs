//! The coordinator's `POST /v1/search` over the ingest pipeline's pages: `mode` "text" (the
//! default), "vector", "visual" or "hybrid" (`ingest_pipeline::hybrid`), optionally within one
//! document.

use async_trait::async_trait;
use horos_coordinator::{SearchError, Searcher};
use ingest_pipeline::embed::EmbedError;
use ingest_pipeline::hybrid::{self, Mode};
use ingest_pipeline::visual_search::VisualSearchError;
use serde_json::Value;

use crate::ingest::LatePipeline;

/// The pipeline's pages, searchable once the pipeline has started.
pub struct IngestSearcher(pub LatePipeline);

#[async_trait]
impl Searcher for IngestSearcher {
    async fn search(&self, query: &str, k: usize, options: &Value) -> Result<Value, SearchError> {
        let document = match &options["document"] {
            Value::Null => None,
            v => Some(v.as_i64().ok_or_else(|| {
                SearchError::Invalid("`document` must be a document id (an integer)".into())
            })?),
        };
        let mode: Mode = match options["mode"].as_str() {
            None => Mode::Text,
            Some(m) => m
                .parse()
                .map_err(|e: hybrid::SearchError| SearchError::Invalid(e.to_string()))?,
        };
        let pipeline = self
            .0
            .get()
            .ok_or_else(|| SearchError::Unavailable("the ingest pipeline is starting".into()))?;
        let hits = crate::ingest::search_pages(pipeline, mode, query.to_owned(), k, document)
            .await
            .map_err(|e| match e {
                // Asked for what this deployment cannot do: no late-interaction model.
                e @ hybrid::SearchError::Visual(VisualSearchError::Embed(
                    EmbedError::NoTextQuery(_),
                )) => SearchError::Invalid(e.to_string()),
                other => SearchError::Unavailable(other.to_string()),
            })?;
        Ok(crate::ingest::hits_json(&hits))
    }
}
