//! The fake's HTTP answers: bodies (whole or streamed), JSON and OpenAI-style errors.

use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Locks a mutex, ignoring poisoning (the data stays consistent: every critical section is a plain
/// field update).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The error a handler returns to make hyper close the connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped on purpose")]
pub(crate) struct DropConnection;

/// A response body: a complete buffer, or chunks sent through a channel (an `Err` chunk aborts the
/// connection mid-body).
pub(crate) enum FakeBody {
    Full(Option<Bytes>),
    Channel(mpsc::Receiver<Result<Bytes, io::Error>>),
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            FakeBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            FakeBody::Channel(rx) => rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, FakeBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FakeBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            FakeBody::Full(None) => SizeHint::with_exact(0),
            FakeBody::Channel(_) => SizeHint::default(),
        }
    }
}

pub(crate) type Resp = Response<FakeBody>;

pub(crate) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Resp {
    let mut r = Response::new(FakeBody::Full(Some(body.into())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub(crate) fn json_response(status: StatusCode, v: &Value) -> Resp {
    respond(status, "application/json", v.to_string())
}

pub(crate) fn error_response(status: StatusCode, message: &str) -> Resp {
    let kind = match status.as_u16() {
        400 | 413 | 422 => "BadRequestError",
        404 => "NotFoundError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        _ => "InternalServerError",
    };
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "code": status.as_u16()}}),
    )
}
