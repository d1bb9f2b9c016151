//! Errors and their classification.

use std::error::Error as StdError;
use std::fmt;
use std::io;

/// The part of a call that ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// Opening the TCP connection.
    Connect,
    /// Waiting for the response headers.
    FirstByte,
    /// The whole call (waiting for a concurrency permit, connecting, the response and its body or
    /// stream).
    Total,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::FirstByte => "first byte",
            TimeoutPhase::Total => "total",
        })
    }
}

/// What a caller should do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// A transient failure of the server or the network: try again later, the request itself is fine
    /// (connection refused, timeouts, 408, 429, 502, 503, 504).
    Retryable,
    /// The request's own fault (400, 413, 422, or a request this client cannot encode): never retry
    /// it as is.
    BadRequest,
    /// The connection was cut while the server held the request (reset, or closed before a complete
    /// answer): the server process has probably died, possibly because of this request (a poison
    /// pill). Check the server's health before deciding.
    ServerCrashed,
    /// Anything else (a misconfiguration such as 401/404 or an invalid URL, a 500, an answer that does
    /// not parse): retrying will not help, yet the request is not known to be at fault.
    Fatal,
}

/// An error from the client. [`Error::class`] tells what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The base URL or a request path is not a valid `http://` URL.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// The request could not be serialized.
    #[error("cannot encode the request: {0}")]
    Encode(#[source] serde_json::Error),
    /// A local file (an image) could not be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The connection could not be opened (nothing listening, refused, unreachable).
    #[error("cannot connect to {url}: {message}")]
    Connect {
        /// The server's base URL.
        url: String,
        /// The cause, as text.
        message: String,
        /// Whether the connection was actively refused (nothing listens on the port).
        refused: bool,
    },
    /// A timeout elapsed.
    #[error("{phase} timeout after {millis} ms")]
    Timeout {
        /// Which timeout.
        phase: TimeoutPhase,
        /// Its length.
        millis: u64,
    },
    /// The server answered with a non-success status.
    #[error("HTTP {status}: {body}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The response body (cut at 64 KiB), usually an OpenAI-style `{"error": {...}}` object.
        body: String,
    },
    /// The connection broke after the request was sent: reset, or closed before the complete answer.
    #[error("connection lost mid-request: {0}")]
    ConnectionLost(String),
    /// The answer is not what the OpenAI API describes (malformed JSON, a broken event stream).
    #[error("malformed response: {message}")]
    Decode {
        /// What went wrong.
        message: String,
        /// The start of the offending text.
        body: String,
    },
    /// The answer exceeded the configured size limit.
    #[error("response larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// An error event inside a stream (`data: {"error": ...}`).
    #[error("server error in stream: {0}")]
    StreamError(String),
    /// Any other HTTP-level failure.
    #[error("HTTP error: {0}")]
    Http(String),
}

impl Error {
    /// The classification of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Connect { .. } | Error::Timeout { .. } => ErrorClass::Retryable,
            Error::Status { status, .. } => classify_status(*status),
            Error::ConnectionLost(_) => ErrorClass::ServerCrashed,
            Error::Encode(_) | Error::File { .. } => ErrorClass::BadRequest,
            Error::InvalidUrl(_)
            | Error::Decode { .. }
            | Error::TooLarge { .. }
            | Error::StreamError(_)
            | Error::Http(_) => ErrorClass::Fatal,
        }
    }

    /// Shorthand for `self.class() == ErrorClass::Retryable`.
    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Retryable
    }

    /// The HTTP status, when the server answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The response body of an HTTP error.
    pub fn body(&self) -> Option<&str> {
        match self {
            Error::Status { body, .. } | Error::Decode { body, .. } => Some(body),
            _ => None,
        }
    }
}

/// The class of an HTTP error status.
pub fn classify_status(status: u16) -> ErrorClass {
    match status {
        408 | 429 | 502 | 503 | 504 => ErrorClass::Retryable,
        400 | 413 | 422 => ErrorClass::BadRequest,
        _ => ErrorClass::Fatal,
    }
}

/// Walks an error's source chain for an I/O error kind.
fn io_kind(err: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cur = e.source();
    }
    None
}

/// The full message of an error and its sources.
fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let m = e.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = e.source();
    }
    s
}

/// A broken event stream is a malformed answer: an event over the limit, or not UTF-8.
impl From<horos_sse::SseError> for Error {
    fn from(e: horos_sse::SseError) -> Self {
        let body = match &e {
            horos_sse::SseError::NotUtf8 { line } => line.clone(),
            horos_sse::SseError::TooLarge { .. } => String::new(),
        };
        Error::Decode {
            message: e.to_string(),
            body,
        }
    }
}

/// Maps an error from sending a request (before the response headers).
pub(crate) fn from_send(
    err: hyper_util::client::legacy::Error,
    url: &str,
    connect_timeout_ms: u64,
) -> Error {
    let kind = io_kind(&err);
    if err.is_connect() {
        if kind == Some(io::ErrorKind::TimedOut) {
            return Error::Timeout {
                phase: TimeoutPhase::Connect,
                millis: connect_timeout_ms,
            };
        }
        return Error::Connect {
            url: url.to_owned(),
            message: chain(&err),
            refused: kind == Some(io::ErrorKind::ConnectionRefused),
        };
    }
    from_hyper_chain(&err)
}

/// Maps an error while reading a response body.
pub(crate) fn from_body(err: hyper::Error) -> Error {
    from_hyper_chain(&err)
}

fn from_hyper_chain(err: &(dyn StdError + 'static)) -> Error {
    // A hyper error in the chain tells whether the connection broke.
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                return Error::ConnectionLost(chain(err));
            }
            if h.is_timeout() {
                return Error::Timeout {
                    phase: TimeoutPhase::Total,
                    millis: 0,
                };
            }
        }
        cur = e.source();
    }
    match io_kind(err) {
        Some(
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof,
        ) => Error::ConnectionLost(chain(err)),
        _ => Error::Http(chain(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        for s in [408, 429, 502, 503, 504] {
            assert_eq!(classify_status(s), ErrorClass::Retryable, "{s}");
        }
        for s in [400, 413, 422] {
            assert_eq!(classify_status(s), ErrorClass::BadRequest, "{s}");
        }
        for s in [401, 403, 404, 500, 501] {
            assert_eq!(classify_status(s), ErrorClass::Fatal, "{s}");
        }
        let e = Error::Status {
            status: 503,
            body: "busy".into(),
        };
        assert!(e.is_retryable());
        assert_eq!(e.status(), Some(503));
        assert_eq!(e.body(), Some("busy"));
        assert_eq!(
            Error::ConnectionLost("x".into()).class(),
            ErrorClass::ServerCrashed
        );
    }

    #[test]
    fn io_kinds_map_to_connection_lost() {
        let e = io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer");
        assert!(matches!(from_hyper_chain(&e), Error::ConnectionLost(_)));
        let e = io::Error::other("weird");
        assert!(matches!(from_hyper_chain(&e), Error::Http(_)));
    }
}
