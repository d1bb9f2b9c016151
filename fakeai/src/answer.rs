//! What an inference request asks for and the answer it gets: chat, completion or embeddings,
//! the reply's pieces, token counts, the JSON bodies and stream events.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::config::{FakeConfig, Reply};
use crate::vectors::embed;

pub(crate) enum Kind {
    Chat,
    Completion,
    Embedding,
    /// vLLM's `/pooling`: each input's tokens, pooled per token or to one vector.
    Pooling(crate::pooling::Pooling, Vec<Vec<String>>),
}

/// A parsed inference request.
pub(crate) struct Job {
    pub(crate) kind: Kind,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// The answer's pieces (words with their trailing space) and the finish reason.
    pub(crate) pieces: Vec<String>,
    pub(crate) finish_reason: &'static str,
    pub(crate) prompt_tokens: u64,
    /// Embedding inputs.
    pub(crate) inputs: Vec<String>,
}

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

/// The text of a chat message's content: a string, or the text parts of a list of parts, with a
/// `[image MIME]` note for each image part.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            out.push(t.to_owned());
                        }
                    }
                    Some("image_url") => {
                        let url = p
                            .get("image_url")
                            .and_then(|u| u.get("url"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        let mime = url
                            .strip_prefix("data:")
                            .and_then(|r| r.split(';').next())
                            .unwrap_or("url");
                        out.push(format!("[image {mime}]"));
                    }
                    _ => {}
                }
            }
            out.join(" ")
        }
        _ => String::new(),
    }
}

impl Job {
    pub(crate) fn parse(config: &FakeConfig, path: &str, json: &Value) -> Result<Job, String> {
        let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let include_usage = json
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let max_tokens = json
            .get("max_tokens")
            .or_else(|| json.get("max_completion_tokens"))
            .and_then(Value::as_u64);
        let (kind, prompt, prompt_tokens, inputs) = match path {
            "/v1/chat/completions" => {
                let messages = json
                    .get("messages")
                    .and_then(Value::as_array)
                    .filter(|m| !m.is_empty())
                    .ok_or("`messages` must be a non-empty array")?;
                let mut prompt_tokens = 0;
                let mut last_user = String::new();
                for m in messages {
                    let text = m.get("content").map(content_text).unwrap_or_default();
                    prompt_tokens += words(&text);
                    if m.get("role").and_then(Value::as_str) == Some("user") {
                        last_user = text;
                    }
                }
                (Kind::Chat, last_user, prompt_tokens, Vec::new())
            }
            "/v1/completions" => {
                let prompt = match json.get("prompt") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(a)) if !a.is_empty() => a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => return Err("`prompt` must be a string or a non-empty array".into()),
                };
                let n = words(&prompt);
                (Kind::Completion, prompt, n, Vec::new())
            }
            "/pooling" => {
                let (pooling, tokens) = crate::pooling::parse(json)?;
                let n = tokens.iter().map(|t| t.len() as u64).sum();
                (Kind::Pooling(pooling, tokens), String::new(), n, Vec::new())
            }
            _ => {
                let inputs: Vec<String> = match json.get("input") {
                    Some(Value::String(s)) => vec![s.clone()],
                    Some(Value::Array(a)) if !a.is_empty() => a
                        .iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                        .collect(),
                    _ => return Err("`input` must be a string or a non-empty array".into()),
                };
                let n = inputs.iter().map(|s| words(s).max(1)).sum();
                (Kind::Embedding, String::new(), n, inputs)
            }
        };
        let answer = match &config.reply {
            Reply::Echo => prompt,
            Reply::Fixed(t) => t.clone(),
        };
        let mut pieces: Vec<String> = answer.split_inclusive(' ').map(str::to_owned).collect();
        let mut finish_reason = "stop";
        if let Some(max) = max_tokens
            && pieces.len() as u64 > max
        {
            pieces.truncate(max as usize);
            finish_reason = "length";
        }
        Ok(Job {
            kind,
            stream,
            include_usage,
            pieces,
            finish_reason,
            prompt_tokens,
            inputs,
        })
    }

    pub(crate) fn usage(&self) -> Value {
        let completion = self.pieces.len() as u64;
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    pub(crate) fn full_answer(&self, config: &FakeConfig, id: u64) -> Value {
        let model = &config.model;
        let text: String = self.pieces.concat();
        match self.kind {
            Kind::Chat => json!({
                "id": format!("chatcmpl-fake-{id}"), "object": "chat.completion",
                "created": now_s(), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": self.finish_reason, "logprobs": null}],
                "usage": self.usage(),
                "system_fingerprint": "horos-fakeai",
            }),
            Kind::Completion => json!({
                "id": format!("cmpl-fake-{id}"), "object": "text_completion",
                "created": now_s(), "model": model,
                "choices": [{"index": 0, "text": text, "finish_reason": self.finish_reason,
                             "logprobs": null}],
                "usage": self.usage(),
            }),
            Kind::Embedding => {
                let data: Vec<Value> = self
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        json!({"object": "embedding", "index": i,
                               "embedding": embed(s, config.embedding_dim)})
                    })
                    .collect();
                json!({
                    "object": "list", "model": model, "data": data,
                    "usage": {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens},
                })
            }
            Kind::Pooling(ref pooling, ref tokens) => {
                let data: Vec<Value> = tokens
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        json!({"index": i, "object": "pooling",
                               "data": crate::pooling::pooled(pooling, t, config.embedding_dim)})
                    })
                    .collect();
                json!({
                    "id": format!("pool-fake-{id}"), "object": "list", "created": now_s(),
                    "model": model, "data": data,
                    "usage": {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens,
                              "completion_tokens": 0},
                })
            }
        }
    }

    /// The SSE events of a streamed answer, `[DONE]` included.
    pub(crate) fn stream_events(&self, config: &FakeConfig, id: u64) -> Vec<Bytes> {
        let model = &config.model;
        let created = now_s();
        let event = |v: Value| Bytes::from(format!("data: {v}\n\n"));
        let mut out = Vec::with_capacity(self.pieces.len() + 4);
        match self.kind {
            Kind::Chat | Kind::Embedding | Kind::Pooling(..) => {
                let id = format!("chatcmpl-fake-{id}");
                let chunk = |delta: Value, finish: Option<&str>| {
                    json!({"id": id, "object": "chat.completion.chunk", "created": created,
                           "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                out.push(event(chunk(
                    json!({"role": "assistant", "content": ""}),
                    None,
                )));
                for p in &self.pieces {
                    out.push(event(chunk(json!({"content": p}), None)));
                }
                out.push(event(chunk(json!({}), Some(self.finish_reason))));
                if self.include_usage {
                    out.push(event(json!({"id": id, "object": "chat.completion.chunk",
                        "created": created, "model": model, "choices": [], "usage": self.usage()})));
                }
            }
            Kind::Completion => {
                let id = format!("cmpl-fake-{id}");
                let chunk = |text: &str, finish: Option<&str>| {
                    json!({"id": id, "object": "text_completion", "created": created, "model": model,
                           "choices": [{"index": 0, "text": text, "finish_reason": finish}]})
                };
                for p in &self.pieces {
                    out.push(event(chunk(p, None)));
                }
                out.push(event(chunk("", Some(self.finish_reason))));
                if self.include_usage {
                    out.push(event(json!({"id": id, "object": "text_completion",
                        "created": created, "model": model, "choices": [], "usage": self.usage()})));
                }
            }
        }
        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        out
    }
}

/// Seconds since the Unix epoch: the `created` of an answer.
fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
