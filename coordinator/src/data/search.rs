//! `POST /v1/search`: the coordinator answers searches over what its owner indexed (the
//! documents a deployment ingested, say) through a [`Searcher`], behind the same keys and
//! limits as the inference routes.

use http::StatusCode;
use serde_json::{Value, json};

use crate::error::ApiError;

pub use horos_server_control::{SearchError, Searcher};

/// The most results one search returns.
pub const MAX_K: usize = 100;

/// Reads a search request's body: `{"query": "...", "k": 10, ...}`.
pub fn parse(body: &Value) -> Result<(String, usize), ApiError> {
    // A question is a text, or an image (`image`, read by the searcher) with no text.
    let query = match (&body["query"], &body["image"]) {
        (Value::String(q), _) => q.as_str(),
        (Value::Null, Value::String(_)) => "",
        (Value::Null, Value::Null) if body["like"].is_object() => "",
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "`query` (a string) is required, or `image` (a base64-encoded image), or `like` (a page)",
            )
            .param("query"));
        }
    };
    let k = match &body["k"] {
        Value::Null => 10,
        v => v
            .as_u64()
            .filter(|k| (1..=MAX_K as u64).contains(k))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("`k` must be an integer from 1 to {MAX_K}"),
                )
                .param("k")
            })? as usize,
    };
    Ok((query.to_owned(), k))
}

/// A searcher's answer as the response body, or its error as an API error.
pub fn answer(result: Result<Value, SearchError>) -> Result<Value, ApiError> {
    result
        .map(|hits| json!({"object": "list", "data": hits}))
        .map_err(error)
}

/// A searcher's error as an API error: a 400 for a request it cannot search, a 413 for one
/// past a ceiling (an image question over the pixel budget), a 503 for an index it cannot read
/// now.
pub fn error(e: SearchError) -> ApiError {
    match e {
        SearchError::Invalid(m) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", m)
        }
        SearchError::Unavailable(m) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", m)
                .code("search_unavailable")
        }
        SearchError::TooLarge(m) => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", m)
                .code("too_large")
        }
    }
}
