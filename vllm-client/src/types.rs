//! Request and response types of the OpenAI API, as vLLM and llama-server speak it.
//!
//! Every type has an `extra` map, flattened into the JSON object (responses are decoded by
//! [`crate::de`], without serde's buffering of flattened structs): in requests it carries fields this
//! crate does not name (vLLM's `guided_json`, `structured_outputs`, `top_k`, `repetition_penalty`,
//! `chat_template_kwargs`, ...), in responses it keeps the fields a server adds (`reasoning_content`,
//! `timings`, `prompt_logprobs`, ...). Unknown response fields are never an error.

use std::path::Path;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::de::deserialize_with_extra;
use crate::error::Error;

/// A JSON object of extra fields.
pub type Extra = Map<String, Value>;

/// A chat message's role.
pub mod role {
    /// The system prompt.
    pub const SYSTEM: &str = "system";
    /// The user.
    pub const USER: &str = "user";
    /// The model.
    pub const ASSISTANT: &str = "assistant";
    /// A tool's answer.
    pub const TOOL: &str = "tool";
}

/// A message in a chat request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool` (see [`role`]).
    pub role: String,
    /// The content: text, or a list of parts (text and images).
    pub content: MessageContent,
    /// An optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Other fields (`tool_calls`, `tool_call_id`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

impl ChatMessage {
    /// A message with text content.
    pub fn new(role: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: MessageContent::Text(text.into()),
            name: None,
            extra: Extra::new(),
        }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(role::SYSTEM, text)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(role::USER, text)
    }

    /// An assistant message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(role::ASSISTANT, text)
    }

    /// A user message made of parts (text and images).
    pub fn user_parts(parts: Vec<ContentPart>) -> Self {
        Self {
            role: role::USER.to_owned(),
            content: MessageContent::Parts(parts),
            name: None,
            extra: Extra::new(),
        }
    }
}

/// A message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// A list of parts.
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The text of the content (the text parts joined by newlines).
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(t) => t.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A part of a multi-part message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL (`http(s)://` or a `data:` URL).
    ImageUrl {
        /// The image.
        image_url: ImageUrl,
    },
}

/// An image reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// `http(s)://...` or `data:<mime>;base64,<data>`.
    pub url: String,
    /// `low`, `high` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    /// An image part pointing at a URL.
    pub fn image_url(url: impl Into<String>) -> Self {
        ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: url.into(),
                detail: None,
            },
        }
    }

    /// An image part carrying the image's bytes as a `data:` URL. `mime` is e.g. `image/png`; `None`
    /// guesses it from the bytes (PNG, JPEG, GIF, WebP, BMP; else `application/octet-stream`).
    pub fn image_bytes(bytes: &[u8], mime: Option<&str>) -> Self {
        let mime = mime.unwrap_or_else(|| sniff_image_mime(bytes));
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        Self::image_url(format!("data:{mime};base64,{data}"))
    }

    /// An image part read from a file, as a `data:` URL (the type is guessed from the bytes, then
    /// from the extension). The file is read on tokio's blocking pool.
    pub async fn image_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let bytes = tokio::fs::read(path).await.map_err(|source| Error::File {
            path: path.display().to_string(),
            source,
        })?;
        let mut mime = sniff_image_mime(&bytes);
        if mime == "application/octet-stream" {
            mime = mime_from_extension(path);
        }
        Ok(Self::image_bytes(&bytes, Some(mime)))
    }
}

/// The MIME type of an image from its first bytes.
pub fn sniff_image_mime(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        "image/jpeg"
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        "image/gif"
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        "image/webp"
    } else if bytes.starts_with(b"BM") {
        "image/bmp"
    } else {
        "application/octet-stream"
    }
}

fn mime_from_extension(path: &Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("bmp") => "image/bmp",
        Some("tif" | "tiff") => "image/tiff",
        _ => "application/octet-stream",
    }
}

/// Options of a streamed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Ask for a last chunk carrying the token usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// A `/v1/chat/completions` request.
///
/// ```
/// use horos_vllm_client::{ChatMessage, ChatRequest};
/// let mut req = ChatRequest::new("smollm2", vec![ChatMessage::user("Hello")]);
/// req.max_tokens = Some(16);
/// // a vLLM extra, passed through as is
/// req.extra.insert("guided_choice".into(), serde_json::json!(["yes", "no"]));
/// let json = serde_json::to_value(&req).unwrap();
/// assert_eq!(json["guided_choice"][0], "yes");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The model name as served.
    pub model: String,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Structured output (`{"type": "json_object"}` or `{"type": "json_schema", ...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// Set by the client: `true` for [`crate::Client::chat_stream`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Stream options (the client asks for usage when streaming unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Any other field, passed through (vLLM sampling extras, guided decoding, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

impl ChatRequest {
    /// A request with default sampling.
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        Self {
            model: model.into(),
            messages,
            max_tokens: None,
            temperature: None,
            top_p: None,
            stop: None,
            seed: None,
            response_format: None,
            stream: None,
            stream_options: None,
            extra: Extra::new(),
        }
    }

    /// Sets `max_tokens`.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets `temperature`.
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Adds an extra body field, passed through as is.
    pub fn extra_field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }
}

/// Token counts.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Both.
    #[serde(default)]
    pub total_tokens: u64,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(Usage {
    prompt_tokens,
    completion_tokens,
    total_tokens
});

/// A message in a chat answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AssistantMessage {
    /// Usually `assistant`.
    #[serde(default)]
    pub role: String,
    /// The text (absent for pure tool calls).
    #[serde(default)]
    pub content: Option<String>,
    /// Other fields (`tool_calls`, `reasoning_content`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(AssistantMessage { role, content });

/// One choice of a chat answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ChatChoice {
    /// The choice's index.
    #[serde(default)]
    pub index: u32,
    /// The message.
    #[serde(default)]
    pub message: AssistantMessage,
    /// `stop`, `length`, `tool_calls`, ...
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Other fields (`logprobs`, `stop_reason`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ChatChoice {
    index,
    message,
    finish_reason
});

/// A `/v1/chat/completions` answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ChatResponse {
    /// The answer's id.
    #[serde(default)]
    pub id: String,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// Creation time (Unix seconds).
    #[serde(default)]
    pub created: u64,
    /// The choices.
    #[serde(default)]
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Other fields (`object`, `system_fingerprint`, `timings`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ChatResponse {
    id,
    model,
    created,
    choices,
    usage
});

impl ChatResponse {
    /// Decodes a `/v1/chat/completions` answer from JSON: the same result, value or error, as `serde_json::from_slice`,
    /// with the faster decoder the client uses (see the crate's `README`, "Benchmark").
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        crate::de::from_slice(bytes)
    }

    /// The first choice's text (empty when absent).
    pub fn text(&self) -> &str {
        self.choices
            .first()
            .and_then(|c| c.message.content.as_deref())
            .unwrap_or("")
    }

    /// The first choice's finish reason.
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices
            .first()
            .and_then(|c| c.finish_reason.as_deref())
    }
}

/// The change carried by a stream chunk.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Delta {
    /// Set on the first chunk.
    #[serde(default)]
    pub role: Option<String>,
    /// New text.
    #[serde(default)]
    pub content: Option<String>,
    /// Other fields (`tool_calls`, `reasoning_content`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(Delta { role, content });

/// One choice of a stream chunk.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ChunkChoice {
    /// The choice's index.
    #[serde(default)]
    pub index: u32,
    /// The change.
    #[serde(default)]
    pub delta: Delta,
    /// Set on the choice's last chunk.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ChunkChoice {
    index,
    delta,
    finish_reason
});

/// A chunk of a streamed chat answer (one server-sent event).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ChatChunk {
    /// The answer's id.
    #[serde(default)]
    pub id: String,
    /// The model that answers.
    #[serde(default)]
    pub model: String,
    /// Creation time (Unix seconds).
    #[serde(default)]
    pub created: u64,
    /// The choices' changes (empty in a usage-only chunk).
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Token counts (the last chunk, with `stream_options.include_usage`).
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ChatChunk {
    id,
    model,
    created,
    choices,
    usage
});

impl ChatChunk {
    /// Decodes one event's data of a streamed chat answer from JSON: the same result, value or error, as `serde_json::from_slice`,
    /// with the faster decoder the client uses (see the crate's `README`, "Benchmark").
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        crate::de::from_slice(bytes)
    }

    /// The first choice's new text, if any.
    pub fn content(&self) -> Option<&str> {
        self.choices
            .first()
            .and_then(|c| c.delta.content.as_deref())
    }

    /// The first choice's finish reason, if this chunk ends it.
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices
            .first()
            .and_then(|c| c.finish_reason.as_deref())
    }
}

/// A prompt: one text or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One text.
    One(String),
    /// Several texts.
    Many(Vec<String>),
}

impl From<&str> for Prompt {
    fn from(s: &str) -> Self {
        Prompt::One(s.to_owned())
    }
}

impl From<String> for Prompt {
    fn from(s: String) -> Self {
        Prompt::One(s)
    }
}

impl From<Vec<String>> for Prompt {
    fn from(v: Vec<String>) -> Self {
        Prompt::Many(v)
    }
}

/// A `/v1/completions` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// The model name as served.
    pub model: String,
    /// The prompt.
    pub prompt: Prompt,
    /// Most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Set by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Stream options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Any other field, passed through.
    #[serde(flatten)]
    pub extra: Extra,
}

impl CompletionRequest {
    /// A request with default sampling.
    pub fn new(model: impl Into<String>, prompt: impl Into<Prompt>) -> Self {
        Self {
            model: model.into(),
            prompt: prompt.into(),
            max_tokens: None,
            temperature: None,
            stop: None,
            seed: None,
            stream: None,
            stream_options: None,
            extra: Extra::new(),
        }
    }
}

/// One choice of a completion answer (or of a streamed completion chunk).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CompletionChoice {
    /// The choice's index.
    #[serde(default)]
    pub index: u32,
    /// The text (in a stream chunk: the new text).
    #[serde(default)]
    pub text: String,
    /// `stop`, `length`, ...
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(CompletionChoice {
    index,
    text,
    finish_reason
});

/// A `/v1/completions` answer, or one chunk of a streamed one.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CompletionResponse {
    /// The answer's id.
    #[serde(default)]
    pub id: String,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// Creation time (Unix seconds).
    #[serde(default)]
    pub created: u64,
    /// The choices.
    #[serde(default)]
    pub choices: Vec<CompletionChoice>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(CompletionResponse {
    id,
    model,
    created,
    choices,
    usage
});

impl CompletionResponse {
    /// Decodes a `/v1/completions` answer (or one event's data of a streamed one) from JSON: the same result, value or error, as `serde_json::from_slice`,
    /// with the faster decoder the client uses (see the crate's `README`, "Benchmark").
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        crate::de::from_slice(bytes)
    }

    /// The first choice's text.
    pub fn text(&self) -> &str {
        self.choices.first().map(|c| c.text.as_str()).unwrap_or("")
    }
}

/// An embedding input: one text or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    One(String),
    /// Several texts.
    Many(Vec<String>),
}

impl From<&str> for EmbeddingInput {
    fn from(s: &str) -> Self {
        EmbeddingInput::One(s.to_owned())
    }
}

impl From<String> for EmbeddingInput {
    fn from(s: String) -> Self {
        EmbeddingInput::One(s)
    }
}

impl From<Vec<String>> for EmbeddingInput {
    fn from(v: Vec<String>) -> Self {
        EmbeddingInput::Many(v)
    }
}

impl From<Vec<&str>> for EmbeddingInput {
    fn from(v: Vec<&str>) -> Self {
        EmbeddingInput::Many(v.into_iter().map(str::to_owned).collect())
    }
}

/// A `/v1/embeddings` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRequest {
    /// The model name as served.
    pub model: String,
    /// The texts.
    pub input: EmbeddingInput,
    /// Any other field (`dimensions`, `truncate_prompt_tokens`, ...), passed through.
    #[serde(flatten)]
    pub extra: Extra,
}

impl EmbeddingRequest {
    /// A request.
    pub fn new(model: impl Into<String>, input: impl Into<EmbeddingInput>) -> Self {
        Self {
            model: model.into(),
            input: input.into(),
            extra: Extra::new(),
        }
    }
}

/// One embedding.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Embedding {
    /// The input's index.
    #[serde(default)]
    pub index: u32,
    /// The vector.
    #[serde(default)]
    pub embedding: Vec<f32>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(Embedding { index, embedding });

/// A `/v1/embeddings` answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct EmbeddingResponse {
    /// The embeddings.
    #[serde(default)]
    pub data: Vec<Embedding>,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(EmbeddingResponse { data, model, usage });

impl EmbeddingResponse {
    /// The vectors in input order.
    pub fn vectors(&self) -> Vec<&[f32]> {
        let mut data: Vec<&Embedding> = self.data.iter().collect();
        data.sort_by_key(|e| e.index);
        data.into_iter().map(|e| e.embedding.as_slice()).collect()
    }
}

/// A served model.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ModelInfo {
    /// The model name to put in requests.
    #[serde(default)]
    pub id: String,
    /// The owner.
    #[serde(default)]
    pub owned_by: Option<String>,
    /// Creation time.
    #[serde(default)]
    pub created: Option<u64>,
    /// Other fields (`max_model_len`, `meta`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ModelInfo {
    id,
    owned_by,
    created
});

/// A `/v1/models` answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ModelList {
    /// The models.
    #[serde(default)]
    pub data: Vec<ModelInfo>,
    /// Other fields (llama-server adds `models`).
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ModelList { data });

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_request_serializes_extras_flat_and_skips_unset() {
        let req = ChatRequest::new("m", vec![ChatMessage::user("hi")])
            .max_tokens(5)
            .extra_field("top_k", json!(3));
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 5, "top_k": 3})
        );
    }

    #[test]
    fn image_parts_are_data_urls() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        let part = ContentPart::image_bytes(png, None);
        let v = serde_json::to_value(&part).unwrap();
        assert_eq!(v["type"], "image_url");
        let url = v["image_url"]["url"].as_str().unwrap();
        assert!(url.starts_with("data:image/png;base64,"), "{url}");
        let data = base64::engine::general_purpose::STANDARD
            .decode(url.split_once(',').unwrap().1)
            .unwrap();
        assert_eq!(data, png);
        assert_eq!(sniff_image_mime(&[0xff, 0xd8, 0xff, 0xe0]), "image/jpeg");
        assert_eq!(sniff_image_mime(b"RIFF\0\0\0\0WEBPVP8"), "image/webp");
        assert_eq!(sniff_image_mime(b"hello"), "application/octet-stream");
    }

    #[test]
    fn responses_tolerate_unknown_and_missing_fields() {
        let r: ChatResponse = serde_json::from_value(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hey",
                         "reasoning_content": "hmm"}, "finish_reason": "stop", "stop_reason": null}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                      "prompt_tokens_details": null},
            "timings": {"predicted_ms": 1.5}
        }))
        .unwrap();
        assert_eq!(r.text(), "hey");
        assert_eq!(r.finish_reason(), Some("stop"));
        assert_eq!(r.choices[0].message.extra["reasoning_content"], "hmm");
        assert_eq!(r.extra["timings"]["predicted_ms"], 1.5);
        assert_eq!(r.usage.unwrap().total_tokens, 3);
        let empty: ChatResponse = serde_json::from_value(json!({})).unwrap();
        assert_eq!(empty.text(), "");
    }

    #[test]
    fn embedding_vectors_follow_input_order() {
        let r: EmbeddingResponse = serde_json::from_value(json!({
            "data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]
        }))
        .unwrap();
        assert_eq!(r.vectors(), vec![&[1.0f32][..], &[2.0f32][..]]);
    }
}
