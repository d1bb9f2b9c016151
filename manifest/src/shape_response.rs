//! Answers shaped back: a completion endpoint's answer (OpenAI's `text_completion` or
//! llama-server's `/completion`) as a chat completion, and reasoning moved out of a chat
//! answer's content. Whole answers are read to their end (bounded) and rewritten; streams are
//! rewritten event by event as they arrive, never buffered whole.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use horos_sse::{SseFrame, SseParser};

use crate::reasoning::{Split, ThinkSplitter};
use crate::settings::CompletionApi;

/// Largest whole answer rewritten; a bigger one (or a bigger stream event) is passed on as it
/// is.
const MAX_BUFFER: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A completion endpoint's answer becomes a chat completion.
    TextToChat(CompletionApi),
    /// A chat answer whose reasoning is moved to `reasoning_content`.
    SplitChat,
}

/// Rewrites an answer's body as it passes: [`Reshaper::push`] each piece, then
/// [`Reshaper::finish`]. Never fails: a body that is not what was expected (not JSON, an error,
/// an event or answer beyond 32 MiB) is passed on as it is.
#[derive(Debug)]
pub struct Reshaper {
    mode: Mode,
    stream: bool,
    model: String,
    id: String,
    created: u64,
    /// The reasoning tags and whether the text starts inside them; `None`: no split.
    split: Option<(String, String, bool)>,
    splitters: BTreeMap<u64, ThinkSplitter>,
    /// Choices that were sent their `role`.
    started: std::collections::BTreeSet<u64>,
    /// A whole (not streamed) answer so far.
    buf: Vec<u8>,
    /// A streamed answer's events, framed with their bytes (one held at most [`MAX_BUFFER`]).
    events: SseParser,
    /// A whole answer past the buffer's limit: everything passes as it is.
    raw: bool,
    done: bool,
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// llama-server's reason to stop, as OpenAI's `finish_reason`.
fn llama_finish(v: &Value) -> &'static str {
    if v["stop_type"] == "limit" || v["stopped_limit"] == true {
        "length"
    } else {
        "stop"
    }
}

/// llama-server's token counts as OpenAI's `usage`.
fn llama_usage(v: &Value) -> Option<Value> {
    let p = v["tokens_evaluated"].as_u64();
    let c = v["tokens_predicted"].as_u64();
    (p.is_some() || c.is_some()).then(|| {
        let (p, c) = (p.unwrap_or(0), c.unwrap_or(0));
        json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
    })
}

impl Reshaper {
    /// For a completion endpoint's answer (`api`'s) to a chat request for `model`: the answer
    /// becomes a chat completion named `chatcmpl-horos-{id:x}`; `split`: the reasoning tags and
    /// whether the text starts inside them (the prompt ended with the opening tag), to move the
    /// reasoning to `reasoning_content`.
    pub fn text_to_chat(
        api: CompletionApi,
        stream: bool,
        model: &str,
        id: u64,
        split: Option<(&[String; 2], bool)>,
    ) -> Self {
        Self::new(Mode::TextToChat(api), stream, model, id, split)
    }

    /// For a chat answer whose reasoning, between `tags`, goes to `reasoning_content`
    /// (`inside`: the text starts inside them); `stream`: the answer is a server-sent event
    /// stream.
    pub fn split_chat(stream: bool, tags: &[String; 2], inside: bool) -> Self {
        Self::new(Mode::SplitChat, stream, "", 0, Some((tags, inside)))
    }

    fn new(
        mode: Mode,
        stream: bool,
        model: &str,
        id: u64,
        split: Option<(&[String; 2], bool)>,
    ) -> Self {
        Self {
            mode,
            stream,
            model: model.to_owned(),
            id: format!("chatcmpl-horos-{id:x}"),
            created: now_s(),
            split: split.map(|([o, c], inside)| (o.clone(), c.clone(), inside)),
            splitters: BTreeMap::new(),
            started: Default::default(),
            buf: Vec::new(),
            events: SseParser::passthrough(MAX_BUFFER),
            raw: false,
            done: false,
        }
    }

    /// Takes the next piece of the upstream's body; the bytes to send on now.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        if self.raw {
            return data.to_vec();
        }
        if !self.stream {
            if self.buf.len() + data.len() > MAX_BUFFER {
                self.raw = true;
                let mut out = std::mem::take(&mut self.buf);
                out.extend_from_slice(data);
                return out;
            }
            self.buf.extend_from_slice(data);
            return Vec::new();
        }
        let mut frames = Vec::new();
        // A pass-through parser refuses nothing: an event too large or not UTF-8 passes as it is.
        let _ = self.events.push_frames(data, &mut frames);
        let mut out = Vec::new();
        for f in frames {
            self.frame(f, &mut out);
        }
        out
    }

    /// The upstream's body ended; the last bytes to send.
    pub fn finish(&mut self) -> Vec<u8> {
        if self.raw {
            return Vec::new();
        }
        let rest = std::mem::take(&mut self.buf);
        if !self.stream {
            return self.whole(rest);
        }
        let mut out = Vec::new();
        let mut frames = Vec::new();
        let _ = self.events.finish_frames(&mut frames);
        for f in frames {
            self.frame(f, &mut out);
        }
        if !self.done {
            self.flush_splitters(&mut out);
            out.extend_from_slice(b"data: [DONE]\n\n");
            self.done = true;
        }
        out
    }

    fn splitter(&mut self, index: u64) -> Option<&mut ThinkSplitter> {
        let (open, close, inside) = self.split.as_ref()?;
        Some(
            self.splitters
                .entry(index)
                .or_insert_with(|| ThinkSplitter::new(open, close, *inside)),
        )
    }

    /// A whole answer rewritten (as it was when it is not what was expected).
    fn whole(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
            return bytes;
        };
        let shaped = match self.mode {
            Mode::TextToChat(api) => self.whole_text(api, &v),
            Mode::SplitChat => self.whole_chat(v),
        };
        match shaped {
            Some(s) => serde_json::to_vec(&s).unwrap_or(bytes),
            None => bytes,
        }
    }

    fn message(&self, text: &str) -> Value {
        let mut msg = json!({"role": "assistant", "content": text});
        if let Some((open, close, inside)) = &self.split {
            let s = ThinkSplitter::split_all(open, close, *inside, text);
            msg["content"] = Value::String(s.content);
            if !s.reasoning.is_empty() {
                msg["reasoning_content"] = Value::String(s.reasoning);
            }
        }
        msg
    }

    fn whole_text(&self, api: CompletionApi, v: &Value) -> Option<Value> {
        let (choices, usage) = match api {
            CompletionApi::Llama => {
                let text = v["content"].as_str()?;
                let choice = json!({"index": 0, "message": self.message(text),
                    "finish_reason": llama_finish(v), "logprobs": null});
                (vec![choice], llama_usage(v))
            }
            CompletionApi::Openai => {
                let choices = v["choices"]
                    .as_array()?
                    .iter()
                    .map(|c| {
                        json!({"index": c["index"].as_u64().unwrap_or(0),
                            "message": self.message(c["text"].as_str().unwrap_or("")),
                            "finish_reason": c["finish_reason"].clone(), "logprobs": null})
                    })
                    .collect();
                (choices, v.get("usage").cloned())
            }
        };
        let mut out = json!({"id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.model, "choices": choices});
        if let Some(u) = usage {
            out["usage"] = u;
        }
        Some(out)
    }

    fn whole_chat(&self, mut v: Value) -> Option<Value> {
        let Some((open, close, inside)) = &self.split else {
            return Some(v);
        };
        for c in v.get_mut("choices")?.as_array_mut()? {
            let Some(msg) = c.get_mut("message").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(text) = msg.get("content").and_then(Value::as_str) else {
                continue;
            };
            if msg.get("reasoning_content").is_some_and(|r| !r.is_null()) {
                continue;
            }
            let s = ThinkSplitter::split_all(open, close, *inside, text);
            if !s.reasoning.is_empty() {
                msg.insert("content".into(), Value::String(s.content));
                msg.insert("reasoning_content".into(), Value::String(s.reasoning));
            }
        }
        Some(v)
    }

    /// One piece of the stream: an event rewritten, anything else (a comment, an event that is
    /// not JSON or too large) passed on as it came.
    fn frame(&mut self, frame: SseFrame, out: &mut Vec<u8>) {
        let Some(event) = frame.event else {
            out.extend_from_slice(&frame.raw);
            return;
        };
        if event.data.trim() == "[DONE]" {
            if !self.done {
                self.flush_splitters(out);
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.done = true;
            }
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            out.extend_from_slice(&frame.raw);
            return;
        };
        let chunk = match self.mode {
            Mode::TextToChat(CompletionApi::Llama) => self.llama_chunk(&v),
            Mode::TextToChat(CompletionApi::Openai) => self.openai_chunk(&v),
            Mode::SplitChat => self.chat_chunk(v),
        };
        send(out, &chunk);
    }

    /// The delta of `text` for choice `index` (its role on the first), reasoning split off;
    /// `last`: the choice ends here (held-back text is flushed).
    fn delta(&mut self, index: u64, text: &str, last: bool) -> Value {
        let mut delta = Map::new();
        if self.mode != Mode::SplitChat && self.started.insert(index) {
            delta.insert("role".into(), json!("assistant"));
        }
        let s = match self.splitter(index) {
            Some(sp) => {
                let mut s = sp.push(text);
                if last {
                    let f = sp.finish();
                    s.reasoning.push_str(&f.reasoning);
                    s.content.push_str(&f.content);
                }
                s
            }
            None => Split {
                reasoning: String::new(),
                content: text.to_owned(),
            },
        };
        if !s.reasoning.is_empty() {
            delta.insert("reasoning_content".into(), Value::String(s.reasoning));
        }
        if !s.content.is_empty() || (delta.is_empty() && !last) {
            delta.insert("content".into(), Value::String(s.content));
        }
        Value::Object(delta)
    }

    fn chunk(&self, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut c = json!({"id": self.id, "object": "chat.completion.chunk",
            "created": self.created, "model": self.model, "choices": choices});
        if let Some(u) = usage {
            c["usage"] = u;
        }
        c
    }

    fn llama_chunk(&mut self, v: &Value) -> Value {
        let last = v["stop"] == true;
        let delta = self.delta(0, v["content"].as_str().unwrap_or(""), last);
        let finish = if last {
            Value::from(llama_finish(v))
        } else {
            Value::Null
        };
        let choice = json!({"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null});
        let usage = if last { llama_usage(v) } else { None };
        self.chunk(vec![choice], usage)
    }

    fn openai_chunk(&mut self, v: &Value) -> Value {
        let mut choices = Vec::new();
        for c in v["choices"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let index = c["index"].as_u64().unwrap_or(0);
            let finish = c["finish_reason"].clone();
            let delta = self.delta(index, c["text"].as_str().unwrap_or(""), !finish.is_null());
            choices.push(
                json!({"index": index, "delta": delta, "finish_reason": finish, "logprobs": null}),
            );
        }
        self.chunk(choices, v.get("usage").filter(|u| !u.is_null()).cloned())
    }

    fn chat_chunk(&mut self, mut v: Value) -> Value {
        let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut) else {
            return v;
        };
        for c in choices.iter_mut() {
            let Some(c) = c.as_object_mut() else {
                continue;
            };
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            let last = c.get("finish_reason").is_some_and(|f| !f.is_null());
            let Some(delta) = c.get_mut("delta").and_then(Value::as_object_mut) else {
                continue;
            };
            if delta.get("reasoning_content").is_some_and(|r| !r.is_null()) {
                continue;
            }
            let text = delta
                .get("content")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let Some(text) = text else {
                if last && let Some(sp) = self.splitter(index) {
                    put_split(delta, sp.finish());
                }
                continue;
            };
            if let Value::Object(d) = self.delta(index, &text, last) {
                delta.remove("content");
                delta.extend(d);
            }
        }
        v
    }

    /// Held-back text of every choice, sent before the stream's end.
    fn flush_splitters(&mut self, out: &mut Vec<u8>) {
        let mut choices = Vec::new();
        for (index, sp) in &mut self.splitters {
            let f = sp.finish();
            if f.reasoning.is_empty() && f.content.is_empty() {
                continue;
            }
            let mut delta = Map::new();
            put_split(&mut delta, f);
            choices.push(json!({"index": index, "delta": delta, "finish_reason": null}));
        }
        if !choices.is_empty() {
            let c = self.chunk(choices, None);
            send(out, &c);
        }
    }
}

fn put_split(delta: &mut Map<String, Value>, s: Split) {
    if !s.reasoning.is_empty() {
        delta.insert("reasoning_content".into(), Value::String(s.reasoning));
    }
    if !s.content.is_empty() {
        delta.insert("content".into(), Value::String(s.content));
    }
}

fn send(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    // A Value always serializes.
    let _ = serde_json::to_writer(&mut *out, v);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tags() -> [String; 2] {
        ["<think>".to_owned(), "</think>".to_owned()]
    }

    fn events(bytes: &[u8]) -> Vec<Value> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn a_llama_answer_becomes_a_chat_completion() {
        let mut r =
            Reshaper::text_to_chat(CompletionApi::Llama, false, "m", 7, Some((&tags(), false)));
        let body = br#"{"content":"<think>why</think>Hello","stop":true,"stop_type":"limit","tokens_predicted":4,"tokens_evaluated":9}"#;
        assert!(r.push(&body[..10]).is_empty());
        assert!(r.push(&body[10..]).is_empty());
        let v: Value = serde_json::from_slice(&r.finish()).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "m");
        assert_eq!(v["choices"][0]["message"]["content"], "Hello");
        assert_eq!(v["choices"][0]["message"]["reasoning_content"], "why");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["prompt_tokens"], 9);
        assert_eq!(v["usage"]["completion_tokens"], 4);
    }

    #[test]
    fn an_openai_text_stream_becomes_chat_chunks_cut_anywhere() {
        let stream = "data: {\"choices\":[{\"index\":0,\"text\":\"<thi\",\"finish_reason\":null}]}\n\n\
            data: {\"choices\":[{\"index\":0,\"text\":\"nk>r</think>Hi\",\"finish_reason\":null}]}\r\n\r\n\
            data: {\"choices\":[{\"index\":0,\"text\":\" there\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n\
            data: [DONE]\n\n";
        for cut in [1, 7, 50, 100, stream.len() - 3] {
            let mut r =
                Reshaper::text_to_chat(CompletionApi::Openai, true, "m", 1, Some((&tags(), false)));
            let mut out = r.push(&stream.as_bytes()[..cut]);
            out.extend(r.push(&stream.as_bytes()[cut..]));
            out.extend(r.finish());
            let text = String::from_utf8(out.clone()).unwrap();
            assert_eq!(text.matches("[DONE]").count(), 1, "{text}");
            let ev = events(&out);
            assert_eq!(ev[0]["object"], "chat.completion.chunk");
            assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
            let join = |k: &str| -> String {
                ev.iter()
                    .filter_map(|e| e["choices"][0]["delta"][k].as_str())
                    .collect()
            };
            assert_eq!(join("content"), "Hi there", "cut {cut}: {text}");
            assert_eq!(join("reasoning_content"), "r");
            let last = ev.last().unwrap();
            assert_eq!(last["choices"][0]["finish_reason"], "stop");
            assert_eq!(last["usage"]["completion_tokens"], 2);
        }
    }

    #[test]
    fn a_llama_stream_without_done_is_ended() {
        let mut r = Reshaper::text_to_chat(CompletionApi::Llama, true, "m", 1, None);
        let mut out = r.push(b"data: {\"content\":\"a\",\"stop\":false}\n\ndata: {\"content\":\"\",\"stop\":true,\"stop_type\":\"eos\",\"tokens_predicted\":1,\"tokens_evaluated\":2}\n\n");
        out.extend(r.finish());
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        let ev = events(&out);
        assert_eq!(ev[0]["choices"][0]["delta"]["content"], "a");
        assert_eq!(ev[1]["choices"][0]["finish_reason"], "stop");
        assert_eq!(ev[1]["usage"]["total_tokens"], 3);
    }

    #[test]
    fn chat_answers_get_their_reasoning_split() {
        let mut r = Reshaper::split_chat(false, &tags(), false);
        r.push(br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"<think>x</think>y"}}]}"#);
        let v: Value = serde_json::from_slice(&r.finish()).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "y");
        assert_eq!(v["choices"][0]["message"]["reasoning_content"], "x");
        let mut r = Reshaper::split_chat(true, &tags(), false);
        let mut out = r.push(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"<think>x</th\"},\"finish_reason\":null}]}\n\n");
        out.extend(r.push(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ink>y\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"));
        out.extend(r.finish());
        let ev = events(&out);
        assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(ev[0]["choices"][0]["delta"]["reasoning_content"], "x");
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], "y");
        // Not JSON: passed on untouched.
        let mut r = Reshaper::split_chat(false, &tags(), false);
        r.push(b"oops");
        assert_eq!(r.finish(), b"oops");
    }
}
