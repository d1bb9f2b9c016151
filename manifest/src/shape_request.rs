//! A request shaped for one model: a chat rendered through the model's template into a
//! completion request, or a chat with its thinking mode switched; and the reshaper its answer
//! will need.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::error::ShapeError;
use crate::plan::{Manifest, ModelPlan};
use crate::settings::{CompletionApi, ThinkingVia};
use crate::shape_response::Reshaper;
use crate::template::{Context, TemplateError};

/// A request body's members, read one at a time: a JSON object, or a body a gateway keeps as
/// its bytes (it implements this for its own type).
pub trait Fields {
    /// The value of member `key` (`None` when absent).
    fn field(&self, key: &str) -> Option<Value>;
}

impl Fields for Map<String, Value> {
    fn field(&self, key: &str) -> Option<Value> {
        self.get(key).cloned()
    }
}

/// Where a request goes when the manifest leaves it as it is, and whether the manifest may shape
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The upstream path of the request as it is (`/v1/chat/completions`, `/v1/embeddings`, …).
    pub path: &'static str,
    /// Whether its requests are chats (`messages`), which a model's manifest may shape.
    pub chat: bool,
}

impl Endpoint {
    /// OpenAI's `POST /v1/chat/completions`.
    pub const CHAT: Endpoint = Endpoint {
        path: "/v1/chat/completions",
        chat: true,
    };
}

/// One attempt of a request at one model: what the manifest needs besides the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt<'a> {
    /// The model, by the name clients use (its manifest entry's name).
    pub model: &'a str,
    /// The request's endpoint.
    pub endpoint: Endpoint,
    /// The request's own thinking mode (HOROS' `x_thinking`), over the model's.
    pub thinking: Option<bool>,
    /// A built-in template that renders the chat in place of the model's own, for a model whose
    /// template is rendered here (a caller's profile); an unknown name is ignored.
    pub template: Option<&'a str>,
    /// Names the answer (`chatcmpl-horos-{id:x}`) when a completion is shaped into a chat.
    pub id: u64,
}

/// What goes upstream for one attempt, and how its answer comes back.
#[derive(Debug)]
pub struct Shaped {
    /// The upstream path.
    pub path: &'static str,
    /// The body.
    pub payload: Payload,
    /// Applied to a successful answer's body; `None`: the answer passes as it is.
    pub reshaper: Option<Reshaper>,
}

/// The body of a shaped request.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// The request's own body with these members set, in order (a member replaced where it is,
    /// else appended); an empty list: the body as it is.
    Edited(Vec<(&'static str, Value)>),
    /// A new body: the completion request a chat was rendered into.
    Rendered(Bytes),
}

impl Payload {
    /// The bytes to send for `body`, a JSON object: its edits applied, or the rendered body.
    pub fn to_bytes(&self, body: &Map<String, Value>) -> Result<Bytes, ShapeError> {
        match self {
            Payload::Edited(edits) => {
                let mut body = body.clone();
                for (k, v) in edits {
                    body.insert((*k).to_owned(), v.clone());
                }
                Ok(Bytes::from(
                    serde_json::to_vec(&body).map_err(ShapeError::Encode)?,
                ))
            }
            Payload::Rendered(b) => Ok(b.clone()),
        }
    }
}

/// Longest prompt a template may render.
const MAX_PROMPT_BYTES: usize = 64 * 1024 * 1024;

/// Chat fields passed to a completion endpoint as they are.
const OPENAI_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
    // Sampling fields vLLM and llama-server take beside OpenAI's.
    "top_k",
    "min_p",
    "repetition_penalty",
];

/// Chat fields passed to llama-server's `/completion` as they are.
const LLAMA_FIELDS: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stream",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
];

fn text_of(content: &Value, i: usize) -> Result<String, ShapeError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                match (p["type"].as_str(), p["text"].as_str()) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    (kind, _) => {
                        return Err(ShapeError::PartNotText {
                            index: i,
                            kind: kind.unwrap_or("?").to_owned(),
                        });
                    }
                }
            }
            Ok(out)
        }
        _ => Err(ShapeError::ContentNotText { index: i }),
    }
}

/// The request's messages as a template reads them: each message as it is (`tool_calls`,
/// `name`, … included), its `content` as text (text parts joined, none as `""`).
fn messages(body: &impl Fields) -> Result<Vec<Value>, ShapeError> {
    let Some(Value::Array(list)) = body.field("messages") else {
        return Err(ShapeError::MessagesNotAList);
    };
    list.into_iter()
        .enumerate()
        .map(|(i, m)| {
            if !m["role"].is_string() {
                return Err(ShapeError::RoleNotText { index: i });
            }
            let text = text_of(&m["content"], i)?;
            let mut m = match m {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            m.insert("content".into(), Value::String(text));
            Ok(Value::Object(m))
        })
        .collect()
}

/// Adds the thinking instruction to the system message's text (a system message is inserted
/// first when there is none).
fn with_instruction(msgs: &mut Vec<Value>, text: &str) {
    match msgs.iter_mut().find(|m| m["role"] == "system") {
        Some(m) => {
            let before = m["content"].as_str().unwrap_or_default();
            m["content"] = Value::String(if before.is_empty() {
                text.to_owned()
            } else {
                format!("{before}\n{text}")
            });
        }
        None => msgs.insert(0, json!({"role": "system", "content": text})),
    }
}

/// The request's stop strings (`stop`: text or list) and then `extra`.
fn stops(body: &impl Fields, extra: &[String]) -> Vec<Value> {
    let mut out: Vec<Value> = match body.field("stop") {
        Some(Value::String(s)) => vec![Value::String(s)],
        Some(Value::Array(a)) => a.into_iter().filter(Value::is_string).collect(),
        _ => Vec::new(),
    };
    for s in extra {
        let v = Value::String(s.clone());
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

fn is_stream(body: &impl Fields) -> bool {
    body.field("stream") == Some(Value::Bool(true))
}

impl Manifest {
    /// The path a request at `endpoint` is sent to for `model`: its completion endpoint for a
    /// chat the manifest renders through a template, else the endpoint's own.
    pub fn upstream_path(&self, endpoint: Endpoint, model: &str) -> &'static str {
        match self.plan(model) {
            Some(plan) if endpoint.chat && plan.template.is_some() => plan.api.path(),
            _ => endpoint.path,
        }
    }

    /// Shapes `body` (its `model` already set to the upstream's name) for one attempt: a chat
    /// rendered through the model's template into a completion request, or its thinking mode
    /// switched, or the body as it is. A request the model's manifest cannot carry (tools or
    /// image parts through a text template, …) is a [`ShapeError`].
    pub fn shape(&self, attempt: &Attempt<'_>, body: &impl Fields) -> Result<Shaped, ShapeError> {
        let Attempt {
            model,
            endpoint,
            id,
            ..
        } = *attempt;
        // A model without an entry still takes a request's x_thinking, as template kwargs.
        let plan = match self.plan(model) {
            Some(p) => Some(p),
            None if attempt.thinking.is_some() => Some(self.default_plan()),
            None => None,
        }
        .filter(|_| endpoint.chat);
        let Some(plan) = plan else {
            return Ok(Shaped {
                path: endpoint.path,
                payload: Payload::Edited(Vec::new()),
                reshaper: None,
            });
        };
        let thinking = attempt.thinking.or(plan.thinking);
        if plan.template.is_some() {
            // The caller's profile may render its chats with another built-in template.
            if let Some(own) = attempt.template.and_then(|t| plan.with_builtin(t)) {
                return templated(&own, model, body, thinking, id);
            }
            return templated(plan, model, body, thinking, id);
        }
        let mut edits = Vec::new();
        match (thinking, plan.via) {
            (Some(on), ThinkingVia::Kwargs) => {
                let mut kwargs = match body.field("chat_template_kwargs") {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                // A request's own kwargs win over the manifest (x_thinking is applied above).
                if attempt.thinking.is_some() || !kwargs.contains_key("enable_thinking") {
                    kwargs.insert("enable_thinking".into(), Value::Bool(on));
                }
                edits.push(("chat_template_kwargs", Value::Object(kwargs)));
            }
            (Some(on), ThinkingVia::System) => {
                let Some(Value::Array(mut list)) = body.field("messages") else {
                    return Err(ShapeError::MessagesNotAList);
                };
                let text = if on { &plan.on_text } else { &plan.off_text };
                match list.iter_mut().find(|m| m["role"] == "system") {
                    Some(m) => {
                        let before = text_of(&m["content"], 0)?;
                        m["content"] = Value::String(if before.is_empty() {
                            text.clone()
                        } else {
                            format!("{before}\n{text}")
                        });
                    }
                    None => list.insert(0, json!({"role": "system", "content": text})),
                }
                edits.push(("messages", Value::Array(list)));
            }
            _ => {}
        }
        let reshaper = plan
            .split
            .then(|| Reshaper::split_chat(is_stream(body), &plan.tags, false));
        Ok(Shaped {
            path: endpoint.path,
            payload: Payload::Edited(edits),
            reshaper,
        })
    }
}

/// A chat rendered through the model's template into a completion request.
fn templated(
    plan: &ModelPlan,
    model: &str,
    body: &impl Fields,
    thinking: Option<bool>,
    id: u64,
) -> Result<Shaped, ShapeError> {
    if body
        .field("tools")
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
    {
        return Err(ShapeError::ToolsThroughTemplate {
            model: model.to_owned(),
        });
    }
    let mut msgs = messages(body)?;
    if let (Some(on), ThinkingVia::System) = (thinking, plan.via) {
        with_instruction(&mut msgs, if on { &plan.on_text } else { &plan.off_text });
    }
    let mut extra = Map::new();
    if let Some(on) = thinking {
        // This crate's own flag, and the one the templates models ship read (Qwen3's).
        extra.insert("thinking".into(), Value::Bool(on));
        extra.insert("enable_thinking".into(), Value::Bool(on));
    }
    let ctx = Context {
        messages: msgs,
        add_generation_prompt: true,
        extra,
        ..Context::default()
    };
    let prompt = match &plan.template {
        Some(t) => t
            .render(&ctx, MAX_PROMPT_BYTES)
            .map_err(|source| match source {
                TemplateError::TooLong { max_bytes } => ShapeError::PromptTooLong {
                    model: model.to_owned(),
                    max_bytes,
                },
                source => ShapeError::Template {
                    model: model.to_owned(),
                    source,
                },
            })?,
        None => String::new(),
    };
    let stream = is_stream(body);
    let max_tokens = body
        .field("max_completion_tokens")
        .or_else(|| body.field("max_tokens"))
        .filter(|v| !v.is_null());
    let stop = stops(body, &plan.stop);
    let mut out = Map::new();
    let path = plan.api.path();
    let fields = match plan.api {
        CompletionApi::Openai => OPENAI_FIELDS,
        CompletionApi::Llama => {
            if body
                .field("n")
                .and_then(|n| n.as_u64())
                .is_some_and(|n| n > 1)
            {
                return Err(ShapeError::SeveralAnswers);
            }
            LLAMA_FIELDS
        }
    };
    for k in fields {
        if let Some(v) = body.field(k) {
            out.insert((*k).to_owned(), v);
        }
    }
    out.insert("prompt".into(), Value::String(prompt.clone()));
    if !stop.is_empty() {
        out.insert("stop".into(), Value::Array(stop));
    }
    if let Some(m) = max_tokens {
        let key = match plan.api {
            CompletionApi::Openai => "max_tokens",
            CompletionApi::Llama => "n_predict",
        };
        out.insert(key.into(), m);
    }
    let inside = prompt.trim_end().ends_with(plan.tags[0].as_str());
    let reshaper = Reshaper::text_to_chat(
        plan.api,
        stream,
        model,
        id,
        plan.split.then_some((&plan.tags, inside)),
    );
    let payload = serde_json::to_vec(&out).map_err(ShapeError::Encode)?;
    Ok(Shaped {
        path,
        payload: Payload::Rendered(Bytes::from(payload)),
        reshaper: Some(reshaper),
    })
}
