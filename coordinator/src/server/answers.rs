//! `POST /v1/answers` ([`crate::data::answers`]): the pages from the searcher (with their images for a
//! vision model), the model through the coordinator's own dispatch (the caller's key, allowed
//! models, priority, budget and limits apply as to its chat call), the claims attributed to the
//! pages; one JSON answer, or server-sent events.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use horos_sse::{SseError, SseParser};
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::App;
use super::admission::Admission;
use super::data::body_object;
use crate::data::answers::{self, AnswerRequest};
use crate::data::core::Call;
use crate::data::proxy::{self, RespBody, Tracker, UpstreamBody, json_response};
use crate::data::request::{RawObject, take_meta};
use crate::data::route::Route;
use crate::error::ApiError;
use horos_server_control::Passage;

/// The most bytes of a model's whole (not streamed) answer read back.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Answers the admitted question (see [`crate::data::answers`]).
pub(super) async fn answer(app: &Arc<App>, a: Admission) -> Result<Response<RespBody>, ApiError> {
    let Some(searcher) = &app.searcher else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "this coordinator has no search index to answer from",
        )
        .code("unknown_url"));
    };
    let mut body = body_object(&a)?;
    let mut req = AnswerRequest::from_body(&body)?;
    // The pages come from the caller's collections only (its key's, never the body's).
    req.passages.collections = app.core.callers().gate().collections(&a.caller);
    let meta = take_meta(&mut body)?;
    // The caller may call the model: checked before anything is searched.
    let probe = req.chat_request(&[]);
    let models =
        app.core
            .call_models(Route::Chat, &RawObject::from_map(&probe)?, &meta, &a.caller)?;
    // The pages' images for a vision model: every model the call may try must read them (a
    // task's fallback to a text model would be sent images it cannot read). A model reads them
    // when its manifest entry says `vision = true` or the pool serves it as `category = "vision"`.
    let (manifest, upstream) = (app.core.manifest(), app.core.upstream());
    let reads = |m: &String| manifest.reads_images(m) || upstream.reads_images(m) == Some(true);
    req.with_images(!models.is_empty() && models.iter().all(reads));
    let passages = searcher
        .passages(&req.passages)
        .await
        .map_err(crate::data::search::error)?;
    if passages.is_empty() {
        let mut unsupported = answers::unsupported(&req);
        if !req.stream {
            return Ok(json_response(StatusCode::OK, &unsupported));
        }
        unsupported["object"] = json!("answer.done");
        let sources = json!({"object": "answer.sources", "model": req.model, "citations": []});
        return Ok(events_now(&[sources, unsupported]));
    }
    let core = &app.core;
    let mut tracker = Tracker::new(Arc::clone(core.metrics()), Route::Chat, a.received);
    tracker.admitted = a.place;
    tracker.caller = Some((a.caller.clone(), Arc::clone(core.callers().gate())));
    let call = Call {
        route: Route::Chat,
        body: RawObject::from_map(&req.chat_request(&passages))?,
        meta,
        received: a.received,
        default_budget_s: core.cfg().default_budget_s,
        caller: a.caller,
    };
    let up = match core.dispatch(call, &mut tracker).await {
        Ok(up) => up,
        Err(e) => {
            tracker.status = e.status.as_u16();
            return Err(e);
        }
    };
    tracker.status = up.status().as_u16();
    if !up.status().is_success() {
        // The model's refusal, as its chat call would have had it.
        return Ok(proxy::pass_through(up, Box::new(tracker)));
    }
    if req.stream {
        return Ok(stream(req, passages, up, tracker));
    }
    let mut answer = read_whole(up.into_body(), &mut tracker).await?;
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (cited, claims) = answers::attribute(&text, &passages);
    Ok(json_response(
        StatusCode::OK,
        &json!({"object": "answer", "model": req.model, "answer": cited, "supported": true,
                "citations": answers::citations(&passages),
                "claims": answers::claims_json(&claims), "usage": answer["usage"].take()}),
    ))
}

/// The model's whole answer as JSON, its bytes shown to `tracker` (its usage is counted).
async fn read_whole(mut body: UpstreamBody, tracker: &mut Tracker) -> Result<Value, ApiError> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| upstream_broke(&e.to_string()))?;
        if let Some(d) = frame.data_ref() {
            tracker.tail.push(d);
            bytes.extend_from_slice(d);
            if bytes.len() > MAX_ANSWER_BYTES {
                return Err(upstream_broke("the model's answer is too large"));
            }
        }
    }
    serde_json::from_slice(&bytes).map_err(|e| upstream_broke(&format!("not JSON: {e}")))
}

fn upstream_broke(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        format!("the model's answer: {why}"),
    )
}

/// The answer as server-sent events: the sources first, the model's words as they come, then
/// the whole answer with its claims.
fn stream(
    req: AnswerRequest,
    passages: Vec<Passage>,
    up: Response<UpstreamBody>,
    mut tracker: Tracker,
) -> Response<RespBody> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let event = |v: Value| Bytes::from(format!("data: {v}\n\n"));
        let sources = json!({"object": "answer.sources", "model": req.model,
                             "citations": answers::citations(&passages)});
        if tx.send(event(sources)).await.is_err() {
            return;
        }
        let mut body = up.into_body();
        let (mut text, mut usage) = (String::new(), Value::Null);
        let mut parser = SseParser::new(MAX_ANSWER_BYTES);
        let mut ended = false;
        while !ended {
            // A client gone ends the answer at once: the model's stream is dropped with it.
            let frame = tokio::select! {
                () = tx.closed() => return,
                frame = body.frame() => frame,
            };
            let mut chunks = VecDeque::new();
            let parsed = match frame {
                // The end: an event not closed by a blank line still counts.
                None => {
                    ended = true;
                    parser.finish(&mut chunks)
                }
                Some(Ok(f)) => {
                    let Some(d) = f.data_ref() else { continue };
                    tracker.tail.push(d);
                    parser.push(d, &mut chunks)
                }
                Some(Err(e)) => {
                    let _ = tx
                        .send(event(error_event(&format!(
                            "the model's stream broke: {e}"
                        ))))
                        .await;
                    return;
                }
            };
            let why = match parsed {
                Err(SseError::TooLarge { .. }) => {
                    Some("the model's answer is too large".to_owned())
                }
                Err(e) => Some(format!("the model's stream: {e}")),
                Ok(()) if text.len() > MAX_ANSWER_BYTES => {
                    Some("the model's answer is too large".to_owned())
                }
                Ok(()) => None,
            };
            if let Some(why) = why {
                let _ = tx.send(event(error_event(&why))).await;
                return;
            }
            for e in chunks {
                if e.event.as_deref() == Some("error") {
                    let _ = tx.send(event(error_event(&e.data))).await;
                    return;
                }
                let Some(chunk) = event_json(&e.data) else {
                    continue;
                };
                if let Some(message) = chunk.get("error").map(|e| {
                    e["message"]
                        .as_str()
                        .map_or_else(|| e.to_string(), str::to_owned)
                }) {
                    let _ = tx.send(event(error_event(&message))).await;
                    return;
                }
                if !chunk["usage"].is_null() {
                    usage = chunk["usage"].clone();
                }
                if let Some(delta) = chunk["choices"][0]["delta"]["content"].as_str()
                    && !delta.is_empty()
                {
                    text.push_str(delta);
                    let v = json!({"object": "answer.delta", "delta": delta});
                    if tx.send(event(v)).await.is_err() {
                        return;
                    }
                }
            }
        }
        let (cited, claims) = answers::attribute(&text, &passages);
        let done = json!({"object": "answer.done", "model": req.model, "answer": cited,
                          "supported": true, "claims": answers::claims_json(&claims),
                          "usage": usage});
        if tx.send(event(done)).await.is_ok() {
            let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
        }
        drop(tracker);
    });
    let mut r = Response::new(RespBody::Events(rx));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The event that ends an answer the model did not finish (no `answer.done` follows).
fn error_event(message: &str) -> Value {
    json!({"object": "answer.error", "error": {"message": message, "type": "upstream_error"}})
}

/// `events`, then `[DONE]`, as a finished stream of server-sent events.
fn events_now(events: &[Value]) -> Response<RespBody> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(events.len() + 1);
    for e in events {
        let _ = tx.try_send(Bytes::from(format!("data: {e}\n\n")));
    }
    let _ = tx.try_send(Bytes::from_static(b"data: [DONE]\n\n"));
    event_stream(rx)
}

/// A response whose body is the events `rx` receives.
fn event_stream(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Events(rx));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// An event's JSON object (`None` for `[DONE]` and anything else).
fn event_json(data: &str) -> Option<Value> {
    serde_json::from_str::<Value>(data)
        .ok()
        .filter(Value::is_object)
}
