//! What a job carries: its kind, its request, its priority and the key that submitted it.

use super::*;

/// What a queued job carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobPayload {
    /// Which route the request takes.
    pub kind: JobKind,
    /// The request body, as for the synchronous route.
    pub request: Map<String, Value>,
    /// Priority (smaller is more important).
    pub priority: Option<i32>,
    /// The name of the data-plane key that submitted it (`None`: a caller without a key). The
    /// job runs as that key (its allowed models, its usage) and only that key sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl JobPayload {
    /// Reads `POST /v1/jobs`' body: `{"kind": ..., "request": {...}, "priority": N}` (400 naming
    /// the field otherwise). The submitter (`key`) is the caller's, set by the server.
    pub fn from_body(body: &Map<String, Value>) -> Result<JobPayload, ApiError> {
        let name = body.get("kind").and_then(Value::as_str).ok_or_else(|| {
            ApiError::bad_request(
                "`kind` is required (chat, completions, embeddings, images or speech)",
            )
            .param("kind")
        })?;
        let Some(kind) = JobKind::parse(name) else {
            return Err(ApiError::bad_request(format!(
                "unknown job kind `{name}` (chat, completions, embeddings, images or speech)"
            ))
            .param("kind"));
        };
        let request = match body.get("request") {
            Some(Value::Object(m)) => m.clone(),
            _ => {
                return Err(
                    ApiError::bad_request("`request` must be a JSON object").param("request")
                );
            }
        };
        let priority =
            match body.get("priority") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_i64().and_then(|p| i32::try_from(p).ok()).ok_or_else(
                    || ApiError::bad_request("`priority` must be an integer").param("priority"),
                )?),
            };
        // The queue's order: the job's `priority`, else its request's `x_priority`.
        let priority = priority.or_else(|| {
            request
                .get("x_priority")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
        });
        Ok(JobPayload {
            kind,
            request,
            priority,
            key: None,
        })
    }
}
