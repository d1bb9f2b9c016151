//! A chat request's JSON, written by hand: the same bytes as `serde_json::to_writer` with the
//! derived `Serialize` (checked by the tests below), at a fraction of the cost.
//!
//! `serde_json` escapes a string by looking every byte up in a table and writes each piece through
//! `io::Write`; most of a chat request is strings that need no escaping, which are copied here in
//! one piece after a check that vectorizes. The object keys are written as literals. Everything
//! else (numbers, `stop`, `response_format`, image parts, `extra` values, strings that need
//! escaping) goes through `serde_json`, so that its output is `serde_json`'s by construction.

use serde::Serialize;

use crate::types::{ChatMessage, ChatRequest, Extra, MessageContent};

impl ChatRequest {
    /// The request as JSON: the same bytes as `serde_json::to_vec(self)`, written by a cheaper
    /// encoder (the one [`crate::Client::chat`] uses) into a buffer sized from the request's strings.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut buf = Vec::with_capacity(chat_request_size(self));
        chat_request(self, &mut buf)?;
        Ok(buf)
    }
}

/// A first capacity for the request's buffer: its strings plus room for keys and punctuation, so
/// that the buffer is never regrown for a text-only request (an estimate; a miss only regrows).
pub(crate) fn chat_request_size(req: &ChatRequest) -> usize {
    let messages: usize = req
        .messages
        .iter()
        .map(|m| {
            let content = match &m.content {
                MessageContent::Text(t) => t.len(),
                MessageContent::Parts(parts) => parts.len() * 256,
            };
            48 + m.role.len() + content + m.extra.len() * 64
        })
        .sum();
    192 + req.model.len() + messages + req.extra.len() * 64
}

/// Appends `req` as JSON to `out`, byte for byte what `serde_json::to_writer(out, req)` writes.
pub(crate) fn chat_request(req: &ChatRequest, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b"{\"model\":");
    string(&req.model, out)?;
    out.extend_from_slice(b",\"messages\":[");
    for (i, m) in req.messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        message(m, out)?;
    }
    out.push(b']');
    if let Some(v) = &req.max_tokens {
        field(b",\"max_tokens\":", v, out)?;
    }
    if let Some(v) = &req.temperature {
        field(b",\"temperature\":", v, out)?;
    }
    if let Some(v) = &req.top_p {
        field(b",\"top_p\":", v, out)?;
    }
    if let Some(v) = &req.stop {
        field(b",\"stop\":", v, out)?;
    }
    if let Some(v) = &req.seed {
        field(b",\"seed\":", v, out)?;
    }
    if let Some(v) = &req.response_format {
        field(b",\"response_format\":", v, out)?;
    }
    if let Some(v) = &req.stream {
        out.extend_from_slice(b",\"stream\":");
        out.extend_from_slice(if *v { b"true" } else { b"false" });
    }
    if let Some(v) = &req.stream_options {
        field(b",\"stream_options\":", v, out)?;
    }
    extra(&req.extra, out)?;
    out.push(b'}');
    Ok(())
}

fn message(m: &ChatMessage, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b"{\"role\":");
    string(&m.role, out)?;
    out.extend_from_slice(b",\"content\":");
    match &m.content {
        MessageContent::Text(t) => string(t, out)?,
        MessageContent::Parts(parts) => serde_json::to_writer(&mut *out, parts)?,
    }
    if let Some(name) = &m.name {
        out.extend_from_slice(b",\"name\":");
        string(name, out)?;
    }
    extra(&m.extra, out)?;
    out.push(b'}');
    Ok(())
}

/// The entries of a flattened `extra` map, each preceded by a comma (the object is never empty
/// before them: `model` or `role` comes first).
fn extra(extra: &Extra, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    for (k, v) in extra {
        out.push(b',');
        string(k, out)?;
        out.push(b':');
        serde_json::to_writer(&mut *out, v)?;
    }
    Ok(())
}

fn field<T: Serialize + ?Sized>(
    key: &[u8],
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    out.extend_from_slice(key);
    serde_json::to_writer(&mut *out, value)
}

/// A JSON string: copied in one piece when nothing in it needs escaping (`serde_json` escapes the
/// control characters, `"` and `\` only), else escaped by `serde_json`.
fn string(s: &str, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    let bytes = s.as_bytes();
    // `fold` rather than `any`: no early exit, so the loop vectorizes.
    let plain = bytes
        .iter()
        .fold(true, |ok, &b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'));
    if plain {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ContentPart, StreamOptions};
    use serde_json::json;

    fn same_as_serde(req: &ChatRequest) {
        let mut fast = Vec::new();
        chat_request(req, &mut fast).unwrap();
        let serde = serde_json::to_vec(req).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&serde)
        );
    }

    #[test]
    fn writes_what_serde_writes() {
        let plain = ChatRequest::new(
            "bench",
            vec![
                ChatMessage::system("You are a helpful assistant."),
                ChatMessage::user("Say hello."),
            ],
        )
        .max_tokens(16);
        same_as_serde(&plain);
        same_as_serde(&ChatRequest::new("m", vec![]));

        let mut all = ChatRequest::new(
            "mo\"del\\",
            vec![
                ChatMessage::user("tab\there, newline\n, quote \", backslash \\, nul \0, \u{1f}"),
                ChatMessage::assistant("été ✓ 日本 \u{7f} / </script> 🎉"),
                ChatMessage::user_parts(vec![
                    ContentPart::text("look"),
                    ContentPart::image_url("data:image/png;base64,AAAA"),
                ]),
            ],
        )
        .max_tokens(u32::MAX)
        .temperature(0.7)
        .extra_field("top_k", json!(3))
        .extra_field("model", json!("duplicate key, kept as serde writes it"))
        .extra_field("k\"ey", json!({"nested": [1, 2.5, null, "x\ny"]}));
        all.messages[0].name = Some("na\"me".into());
        all.messages[1]
            .extra
            .insert("tool_calls".into(), json!([{"id": "t"}]));
        all.top_p = Some(1e-7);
        all.stop = Some(vec!["\n\n".into(), "END".into()]);
        all.seed = Some(u64::MAX);
        all.response_format = Some(json!({"type": "json_object"}));
        all.stream = Some(true);
        all.stream_options = Some(StreamOptions {
            include_usage: true,
        });
        same_as_serde(&all);
        all.stream = Some(false);
        all.temperature = Some(f32::NAN); // serde_json writes `null`
        same_as_serde(&all);
        for s in ["", "\"", "\\", "a\u{0}", "\u{1f}\u{20}", &"x".repeat(1000)] {
            same_as_serde(&ChatRequest::new(s, vec![ChatMessage::user(s)]));
        }
    }

    #[test]
    fn the_size_estimate_holds_a_text_request() {
        let req = ChatRequest::new(
            "m",
            vec![
                ChatMessage::system("s".repeat(3000)),
                ChatMessage::user("u"),
            ],
        )
        .max_tokens(16)
        .temperature(0.5);
        let mut out = Vec::new();
        chat_request(&req, &mut out).unwrap();
        assert!(out.len() <= chat_request_size(&req), "{}", out.len());
    }
}
