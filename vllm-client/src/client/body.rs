//! Request bodies (encoded once, with the `stream` fields the call needs) and response bodies
//! (read within a size limit, decoded with one UTF-8 check).

use std::borrow::Cow;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::de::{self, Fast};
use crate::error::{self, Error};
use crate::types::{ChatRequest, CompletionRequest, StreamOptions};

/// First capacity of a request body's buffer: a short request fits.
const ENCODE_CAPACITY: usize = 1024;

/// Most bytes of an error body kept in [`Error::Status`].
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The request types whose `stream` fields the client sets itself (a plain call never streams,
/// a streamed one always asks for the final usage chunk unless told otherwise).
pub(super) trait StreamFields: Clone {
    fn stream_fields(&mut self) -> (&mut Option<bool>, &mut Option<StreamOptions>);
    fn asks_stream(&self) -> bool;
}

impl StreamFields for ChatRequest {
    fn stream_fields(&mut self) -> (&mut Option<bool>, &mut Option<StreamOptions>) {
        (&mut self.stream, &mut self.stream_options)
    }
    fn asks_stream(&self) -> bool {
        self.stream.unwrap_or(false) || self.stream_options.is_some()
    }
}

impl StreamFields for CompletionRequest {
    fn stream_fields(&mut self) -> (&mut Option<bool>, &mut Option<StreamOptions>) {
        (&mut self.stream, &mut self.stream_options)
    }
    fn asks_stream(&self) -> bool {
        self.stream.unwrap_or(false) || self.stream_options.is_some()
    }
}

/// `req` without its stream fields (borrowed when it has none: no copy on the hot path).
pub(super) fn without_stream<R: StreamFields>(req: &R) -> Cow<'_, R> {
    if !req.asks_stream() {
        return Cow::Borrowed(req);
    }
    let mut r = req.clone();
    let (stream, options) = r.stream_fields();
    *stream = None;
    *options = None;
    Cow::Owned(r)
}

/// `req` asking for a stream, with a final usage chunk unless `stream_options` is set.
pub(super) fn with_stream<R: StreamFields>(req: &R) -> R {
    let mut r = req.clone();
    let (stream, options) = r.stream_fields();
    *stream = Some(true);
    if options.is_none() {
        *options = Some(StreamOptions {
            include_usage: true,
        });
    }
    r
}

/// Serializes a request body into a buffer sized for a typical request, so that it is not regrown
/// from empty five or six times as `serde_json::to_vec` does.
pub(super) fn encode<B: Serialize + ?Sized>(body: &B) -> Result<Payload, Error> {
    let mut buf = Vec::with_capacity(ENCODE_CAPACITY);
    serde_json::to_writer(&mut buf, body).map_err(Error::Encode)?;
    Ok(Payload::new(buf))
}

/// Encodes a chat request with the hand-written encoder (`serde_json`'s bytes, cheaper), into a
/// buffer sized from the request's strings.
pub(super) fn encode_chat(req: &ChatRequest) -> Result<Payload, Error> {
    req.to_json().map(Payload::new).map_err(Error::Encode)
}

/// A request body: the encoded bytes, sent from the `Vec` they were written into (a `Bytes` made
/// from a `Vec` whose capacity is not its length allocates a shared header on top).
#[derive(Debug, Default)]
pub(super) struct Payload {
    buf: Vec<u8>,
    pos: usize,
}

impl Payload {
    fn new(buf: Vec<u8>) -> Self {
        Payload { buf, pos: 0 }
    }
}

impl Buf for Payload {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn chunk(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    fn advance(&mut self, cnt: usize) {
        self.pos = self.pos.saturating_add(cnt).min(self.buf.len());
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    decode_with(bytes, |text| serde_json::from_str(text))
}

/// [`decode`] with the fast decoder of [`crate::de`] (which falls back on `serde_json`).
pub(super) fn decode_fast<T: Fast + DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    decode_with(bytes, de::from_str)
}

pub(super) fn decode_with<T: DeserializeOwned>(
    bytes: &[u8],
    parse: fn(&str) -> Result<T, serde_json::Error>,
) -> Result<T, Error> {
    // One UTF-8 check of the whole body, then a parser that trusts it: `from_slice` checks every
    // string on its own, which costs a third more on a typical answer made of many short strings.
    let parsed = match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(_) => serde_json::from_slice(bytes), // fails, with the position of the bad byte
    };
    parsed.map_err(|e| Error::Decode {
        message: e.to_string(),
        body: String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).into_owned(),
    })
}

/// Reads a whole body, refusing more than `limit` bytes.
pub(super) async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, Error> {
    // The common case is a single data frame: no copy.
    let mut first: Option<Bytes> = None;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(error::from_body)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = first.as_ref().map_or(0, Bytes::len) + buf.len() + data.len();
        if total > limit {
            return Err(Error::TooLarge { limit });
        }
        match first.take() {
            None if buf.is_empty() => first = Some(data),
            Some(f) => {
                buf.extend_from_slice(&f);
                buf.extend_from_slice(&data);
            }
            None => buf.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(buf)))
}

/// Reads an error body (64 KiB at most, lossy UTF-8); a broken body yields what was read.
pub(super) async fn read_error_body(mut body: Incoming) -> String {
    let mut buf = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            let room = ERROR_BODY_LIMIT.saturating_sub(buf.len());
            buf.extend_from_slice(&data[..data.len().min(room)]);
            if room <= data.len() {
                break;
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}
