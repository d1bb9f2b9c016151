//! The seam between an admin API and the crates that add routes to it: [`AdminExtension`]
//! (`/api/v1/NAME/...` behind the admin key: a document pipeline's workers, the VRAM ledger's
//! leases). The server checks the key and reads the body; the extension answers.

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

/// An error answer in the OpenAI error format every HOROS route answers with:
/// `{"error": {"message", "type", "param", "code"}}`; `kind` is `invalid_request_error` for a
/// request at fault and `server_error` for the extension's own failure.
pub fn error_answer(
    status: StatusCode,
    kind: &str,
    message: impl Into<String>,
    code: Option<&str>,
    param: Option<&str>,
) -> AdminAnswer {
    (
        status,
        serde_json::json!({"error": {
            "message": message.into(), "type": kind, "param": param, "code": code,
        }}),
    )
}
