//! The coordinator's `POST /v1/search` over the ingest pipeline's pages: `mode` "text" (the
//! default), "vector", "visual" or "hybrid" (`ingest_pipeline::hybrid`), optionally within one
//! document.

use std::sync::OnceLock;

use async_trait::async_trait;
use horos_coordinator::{SearchError, Searcher};
use ingest_pipeline::embed::EmbedError;
use ingest_pipeline::hybrid::{self, Mode};
use ingest_pipeline::visual_search::VisualSearchError;
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
        let mode: Mode = match options["mode"].as_str() {
            None => Mode::Text,
            Some(m) => m
                .parse()
                .map_err(|e: hybrid::SearchError| SearchError::Invalid(e.to_string()))?,
        };
        let pipeline = self
            .pipeline
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

/// `/api/v1/ingest/workers` on the coordinator's admin API: `GET` each stage's workers (target
/// and running), `PUT {"image_to_ocr": 4, ...}` changes them while the pipeline runs.
#[derive(Default)]
pub struct IngestAdmin {
    pipeline: OnceLock<RefPipeline>,
}

impl IngestAdmin {
    /// Manages `pipeline`'s workers from now on.
    pub fn attach(&self, pipeline: &RefPipeline) {
        let _ = self.pipeline.set(pipeline.clone());
    }
}

/// The most workers one stage may be given at run time.
const MAX_WORKERS: u64 = 64;

#[async_trait]
impl horos_coordinator::AdminExtension for IngestAdmin {
    fn name(&self) -> &str {
        "ingest"
    }

    async fn call(
        &self,
        method: &http::Method,
        rest: &str,
        body: Value,
    ) -> horos_coordinator::AdminAnswer {
        use http::StatusCode;
        use ingest_pipeline::pipeline::Stage;
        let error =
            |status: StatusCode, m: String| (status, serde_json::json!({"error": {"message": m}}));
        let Some(pipeline) = self.pipeline.get() else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the ingest pipeline is starting".into(),
            );
        };
        if rest != "/workers" {
            return error(
                StatusCode::NOT_FOUND,
                format!("no route /api/v1/ingest{rest}"),
            );
        }
        if *method == http::Method::PUT {
            let Some(changes) = body.as_object() else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "the body is {\"STAGE\": WORKERS, ...}".into(),
                );
            };
            // Every change checked before any is applied.
            let mut parsed = Vec::new();
            for (name, n) in changes {
                let stage = Stage::ALL.into_iter().find(|s| s.queue() == name);
                match (stage, n.as_u64().filter(|n| *n <= MAX_WORKERS)) {
                    (Some(stage), Some(n)) => parsed.push((stage, n as usize)),
                    (None, _) => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            format!("`{name}` is not a stage of the pipeline"),
                        );
                    }
                    (_, None) => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            format!("`{name}`: workers must be an integer from 0 to {MAX_WORKERS}"),
                        );
                    }
                }
            }
            for (stage, n) in parsed {
                tracing::info!(stage = stage.queue(), workers = n, "ingest workers changed");
                pipeline.set_workers(stage, n);
            }
        } else if *method != http::Method::GET {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on /api/v1/ingest/workers"),
            );
        }
        let stages: serde_json::Map<String, Value> = Stage::ALL
            .into_iter()
            .map(|s| {
                (
                    s.queue().to_owned(),
                    serde_json::json!({"workers": pipeline.target_workers(s),
                                       "running": pipeline.active_workers(s)}),
                )
            })
            .collect();
        (StatusCode::OK, Value::Object(stages))
    }
}
