//! The seam between a gateway's `POST /v1/search` and an index: [`Searcher`].

use async_trait::async_trait;
use serde_json::Value;

/// Why a search was not answered.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SearchError {
    /// The request cannot be searched as written (400): an unknown mode, a bad filter.
    #[error("{0}")]
    Invalid(String),
    /// The index could not be read now (503).
    #[error("{0}")]
    Unavailable(String),
}

/// An index the coordinator answers `POST /v1/search` from.
#[async_trait]
pub trait Searcher: Send + Sync {
    /// The best `k` results for `query` (any text a person typed: never a syntax error), with
    /// the request's other fields as `options` (e.g. `mode`, `document`).
    async fn search(&self, query: &str, k: usize, options: &Value) -> Result<Value, SearchError>;
}
