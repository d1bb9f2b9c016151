//! The coordinator's `POST /v1/search` over the ingest pipeline's pages: full text with any
//! text a person types (every word, else any), optionally within one document.

use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use horos_coordinator::{SearchError, Searcher};
use serde_json::Value;

/// The pipeline's pages, searchable once the pipeline has started.
#[derive(Default)]
pub struct IngestSearcher {
    conn: OnceLock<Arc<Mutex<rusqlite::Connection>>>,
}

impl IngestSearcher {
    /// Searches `pipeline`'s pages from now on.
    pub fn attach(&self, pipeline: &crate::ingest::RefPipeline) -> Result<(), String> {
        let conn = pipeline.connection().map_err(|e| e.to_string())?;
        let _ = self.conn.set(Arc::new(Mutex::new(conn)));
        Ok(())
    }
}

#[async_trait]
impl Searcher for IngestSearcher {
    async fn search(&self, query: &str, k: usize, options: &Value) -> Result<Value, SearchError> {
        match options["mode"].as_str() {
            None | Some("text") => {}
            Some(other) => {
                return Err(SearchError::Invalid(format!(
                    "search mode `{other}` is not served here (text)"
                )));
            }
        }
        let document = match &options["document"] {
            Value::Null => None,
            v => Some(v.as_i64().ok_or_else(|| {
                SearchError::Invalid("`document` must be a document id (an integer)".into())
            })?),
        };
        let conn =
            self.conn.get().cloned().ok_or_else(|| {
                SearchError::Unavailable("the ingest pipeline is starting".into())
            })?;
        let query = query.to_owned();
        // Within one document: look deeper, then keep that document's pages.
        let fetch = if document.is_some() { k * 20 } else { k };
        let hits = tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            ingest_pipeline::store::search_user_text(&conn, &query, fetch)
        })
        .await
        .map_err(|e| SearchError::Unavailable(e.to_string()))?
        .map_err(|e| SearchError::Unavailable(e.to_string()))?;
        let hits: Vec<_> = hits
            .into_iter()
            .filter(|h| document.is_none_or(|d| h.doc_id == d))
            .take(k)
            .collect();
        Ok(crate::ingest::hits_json(&hits))
    }
}
