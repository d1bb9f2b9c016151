//! Errors: [`ApiError`] is what a client sees (OpenAI's error JSON), [`CoordinatorError`] is
//! what starting a coordinator can fail with.

use http::StatusCode;
use serde_json::{Value, json};

/// An error answered to a client in OpenAI's format:
/// `{"error": {"message", "type", "param", "code"}}` (plus extra fields where useful).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// OpenAI's `type` (e.g. `invalid_request_error`).
    pub kind: &'static str,
    /// The offending parameter, if any.
    pub param: Option<Box<str>>,
    /// A machine-readable code (e.g. `model_not_found`).
    pub code: Option<&'static str>,
    /// Seconds to put in a `Retry-After` header.
    pub retry_after_s: Option<u64>,
    /// Extra fields merged into the `error` object (e.g. the estimated ready time).
    pub extra: Option<Box<Value>>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after_s: None,
            extra: None,
        }
    }

    /// 400 `invalid_request_error`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 404 `model_not_found`.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("the model `{model}` does not exist"),
        )
        .param("model")
        .code("model_not_found")
    }

    /// 401 for the admin API.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "a valid Bearer API key is required",
        )
        .code("invalid_api_key")
    }

    /// 413: the body exceeds the limit.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("request body larger than {limit} bytes"),
        )
        .code("request_too_large")
    }

    /// 408: the body did not arrive within the time allowed.
    pub fn body_timeout(timeout: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {:.1} s",
                timeout.as_secs_f64()
            ),
        )
        .code("body_timeout")
    }

    /// 500 for our own failures.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// Sets `param`.
    pub fn param(mut self, p: &str) -> Self {
        self.param = Some(p.into());
        self
    }

    /// Sets `code`.
    pub fn code(mut self, c: &'static str) -> Self {
        self.code = Some(c);
        self
    }

    /// Sets the `Retry-After` seconds.
    pub fn retry_after(mut self, s: u64) -> Self {
        self.retry_after_s = Some(s);
        self
    }

    /// Adds extra fields to the error object.
    pub fn extra(mut self, v: Value) -> Self {
        self.extra = Some(Box::new(v));
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut err = json!({
            "message": self.message,
            "type": self.kind,
            "param": self.param.as_deref(),
            "code": self.code,
        });
        if let (Some(Value::Object(extra)), Some(obj)) =
            (self.extra.as_deref(), err.as_object_mut())
        {
            for (k, v) in extra {
                obj.insert(k.clone(), v.clone());
            }
        }
        json!({ "error": err })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

/// Failures of starting or running a coordinator.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// Socket failure.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The state database failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The job queue failed.
    #[error("queue: {0}")]
    Queue(#[from] squeueha::Error),
    /// A blocking task failed.
    #[error("blocking task failed: {0}")]
    Join(String),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] InvalidConfig),
}

/// A [`CoordinatorConfig`](crate::CoordinatorConfig) value out of its range, named by its key
/// (as in a configuration file) so that the message points at what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct InvalidConfig {
    /// The setting, e.g. `max_body_bytes` or `tasks.summarize.models`.
    pub key: String,
    /// Its value as given.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape() {
        let e = ApiError::model_not_found("m").extra(json!({"estimated_ready_s": 3}));
        let b = e.body();
        assert_eq!(b["error"]["code"], "model_not_found");
        assert_eq!(b["error"]["param"], "model");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["estimated_ready_s"], 3);
        assert!(b["error"]["message"].as_str().unwrap().contains('m'));
    }
}
