//! [`SseStream`]: typed items from server-sent events, read as the bytes arrive.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Incoming};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::de;
use crate::error::{self, Error, TimeoutPhase};
use crate::types::{ChatChunk, CompletionResponse, Usage};
use horos_sse::{SseEvent, SseParser};

/// After `[DONE]`, how long a stream waits for the end of the body (to reuse the connection).
const DRAIN_AFTER_DONE: Duration = Duration::from_millis(50);

/// An item of an event stream that may carry an in-band error (`{"error": ...}`).
pub trait StreamItem: DeserializeOwned {
    /// The error object, if this event is an error report rather than an item.
    fn error(&self) -> Option<&Value>;

    /// Decodes one event's data (by default `serde_json::from_str`).
    fn from_event_data(data: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(data)
    }
}

impl StreamItem for ChatChunk {
    fn error(&self) -> Option<&Value> {
        self.extra.get("error")
    }

    /// The crate's fast decoder: `serde_json`'s result, at lower cost.
    fn from_event_data(data: &str) -> Result<Self, serde_json::Error> {
        de::from_str(data)
    }
}

/// Any server-sent events of JSON objects (`POST /v1/answers`' events, say): an event with an
/// `error` member is an error report.
impl StreamItem for Value {
    fn error(&self) -> Option<&Value> {
        self.get("error")
    }
}

impl StreamItem for CompletionResponse {
    fn error(&self) -> Option<&Value> {
        self.extra.get("error")
    }

    /// The crate's fast decoder: `serde_json`'s result, at lower cost.
    fn from_event_data(data: &str) -> Result<Self, serde_json::Error> {
        de::from_str(data)
    }
}

/// A stream of typed items parsed from server-sent events as the bytes arrive. It implements
/// [`futures_core::Stream`]; [`SseStream::next_item`] needs no extra crate. The stream ends after
/// `data: [DONE]`. Dropping it closes the connection, which cancels the request on the server, and
/// gives back its concurrency permit.
pub struct SseStream<T> {
    body: Incoming,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    total_ms: u64,
    done: bool,
    /// Set after `[DONE]`: how long to wait for the end of the body.
    drain: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: OwnedSemaphorePermit,
    _item: PhantomData<fn() -> T>,
}

/// A streamed chat answer.
pub type ChatStream = SseStream<ChatChunk>;

impl<T> std::fmt::Debug for SseStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseStream")
            .field("done", &self.done)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<T> SseStream<T> {
    /// A stream over `body`, whose events may be `max_event_bytes` long, ending by `deadline`
    /// (`total_ms` is said in the time-out error).
    pub(super) fn new(
        body: Incoming,
        max_event_bytes: usize,
        deadline: Instant,
        total_ms: u64,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        SseStream {
            body,
            parser: SseParser::new(max_event_bytes),
            pending: VecDeque::new(),
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            total_ms,
            done: false,
            drain: None,
            _permit: permit,
            _item: PhantomData,
        }
    }
}

impl<T: StreamItem> SseStream<T> {
    /// The next item; `None` at the end of the stream.
    pub async fn next_item(&mut self) -> Option<Result<T, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_item(cx)).await
    }

    fn event_to_item(&mut self, ev: SseEvent) -> Option<Result<T, Error>> {
        if ev.data.trim() == "[DONE]" {
            return None;
        }
        if ev.event.as_deref() == Some("error") {
            self.done = true;
            return Some(Err(Error::StreamError(ev.data)));
        }
        match T::from_event_data(&ev.data) {
            Ok(item) => {
                if let Some(e) = item.error() {
                    self.done = true;
                    return Some(Err(Error::StreamError(e.to_string())));
                }
                Some(Ok(item))
            }
            Err(e) => {
                self.done = true;
                Some(Err(Error::Decode {
                    message: format!("stream event: {e}"),
                    body: ev.data.chars().take(1024).collect(),
                }))
            }
        }
    }

    /// After `[DONE]`: waits a little for the end of the body, so that a completely read body lets
    /// the connection go back to the pool; `Ready` once done.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(_) => break,
                Poll::Pending => {
                    let expired = self
                        .drain
                        .as_mut()
                        .is_none_or(|t| t.as_mut().poll(cx).is_ready());
                    if !expired {
                        return Poll::Pending;
                    }
                    break;
                }
            }
        }
        self.drain = None;
        self.done = true;
        Poll::Ready(())
    }

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        loop {
            if self.drain.is_some() {
                return self.poll_drain(cx).map(|()| None);
            }
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(ev) = self.pending.pop_front() {
                match self.event_to_item(ev) {
                    Some(item) => return Poll::Ready(Some(item)),
                    None => {
                        self.drain = Some(Box::pin(tokio::time::sleep(DRAIN_AFTER_DONE)));
                        continue;
                    }
                }
            }
            if self.deadline.as_mut().poll(cx).is_ready() {
                self.done = true;
                return Poll::Ready(Some(Err(Error::Timeout {
                    phase: TimeoutPhase::Total,
                    millis: self.total_ms,
                })));
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    let mut pending = std::mem::take(&mut self.pending);
                    let finished = self.parser.finish(&mut pending);
                    self.pending = pending;
                    if let Err(e) = finished {
                        self.done = true;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                    if self.pending.is_empty() {
                        // A clean end without `[DONE]`: accepted.
                        self.done = true;
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(error::from_body(e))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        let mut pending = std::mem::take(&mut self.pending);
                        let pushed = self.parser.push(data, &mut pending);
                        self.pending = pending;
                        if let Err(e) = pushed {
                            self.done = true;
                            return Poll::Ready(Some(Err(e.into())));
                        }
                    }
                }
            }
        }
    }
}

impl<T: StreamItem> futures_core::Stream for SseStream<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_item(cx)
    }
}

/// A streamed chat answer put together.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatStreamSummary {
    /// The first choice's text, all deltas joined.
    pub text: String,
    /// The first choice's finish reason.
    pub finish_reason: Option<String>,
    /// The usage chunk's counts.
    pub usage: Option<Usage>,
    /// Chunks received.
    pub chunks: usize,
}

impl ChatStream {
    /// Reads the stream to its end and joins it.
    pub async fn collect_text(mut self) -> Result<ChatStreamSummary, Error> {
        let mut s = ChatStreamSummary::default();
        while let Some(chunk) = self.next_item().await {
            let chunk = chunk?;
            s.chunks += 1;
            if let Some(c) = chunk.content() {
                s.text.push_str(c);
            }
            if let Some(f) = chunk.finish_reason() {
                s.finish_reason = Some(f.to_owned());
            }
            if chunk.usage.is_some() {
                s.usage = chunk.usage;
            }
        }
        Ok(s)
    }
}
