//! Admin routes the coordinator's owner adds (`/api/v1/NAME/...` behind the admin key): a
//! document pipeline's workers, say. The coordinator checks the key and reads the body; the
//! extension answers.

use async_trait::async_trait;
use http::{Method, StatusCode};
use serde_json::Value;

/// An answer of an [`AdminExtension`]: a status and a JSON body.
pub type AdminAnswer = (StatusCode, Value);

/// Routes under `/api/v1/{name}` of the admin API, behind its key.
#[async_trait]
pub trait AdminExtension: Send + Sync {
    /// The path segment it serves (`ingest` serves `/api/v1/ingest` and below).
    fn name(&self) -> &str;

    /// Answers `method` on `rest` (the path after `/api/v1/{name}`, `""` or `/...`), with the
    /// request's JSON body (`null` without one).
    async fn call(&self, method: &Method, rest: &str, body: Value) -> AdminAnswer;
}
