//! A request shaped for one model: a chat rendered through the model's template into a
//! completion request, or a chat with its thinking mode switched; and the reshaper its answer
//! will need.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::template::{Context, TValue};
use super::{CompletionApi, Manifest, ModelPlan, Reshaper, ThinkingVia};
use crate::error::ApiError;
use crate::request::{RawObject, RequestMeta};
use crate::route::Route;

/// What goes upstream for one attempt, and how its answer comes back.
#[derive(Debug)]
pub(crate) struct Shaped {
    /// The upstream path.
    pub path: &'static str,
    /// The body.
    pub payload: Bytes,
    /// Applied to a successful answer's body.
    pub reshaper: Option<Reshaper>,
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

fn text_of(content: &Value, i: usize) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                match (p["type"].as_str(), p["text"].as_str()) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::bad_request(format!(
                            "messages[{i}]: a `{}` part cannot go through a text template",
                            kind.unwrap_or("?")
                        ))
                        .param("messages"));
                    }
                }
            }
            Ok(out)
        }
        _ => Err(ApiError::bad_request(format!(
            "messages[{i}].content must be text or a list of text parts"
        ))
        .param("messages")),
    }
}

/// The request's messages as (role, text).
fn messages(body: &RawObject) -> Result<Vec<(String, String)>, ApiError> {
    let Some(Value::Array(list)) = body.get("messages") else {
        return Err(ApiError::bad_request("`messages` must be a list").param("messages"));
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m["role"].as_str().ok_or_else(|| {
                ApiError::bad_request(format!("messages[{i}].role must be text")).param("messages")
            })?;
            Ok((role.to_owned(), text_of(&m["content"], i)?))
        })
        .collect()
}

/// Adds the thinking instruction to the system message (a system message is inserted first
/// when there is none).
fn with_instruction(msgs: &mut Vec<(String, String)>, text: &str) {
    match msgs.iter_mut().find(|(r, _)| r == "system") {
        Some((_, c)) if c.is_empty() => text.clone_into(c),
        Some((_, c)) => {
            c.push('\n');
            c.push_str(text);
        }
        None => msgs.insert(0, ("system".to_owned(), text.to_owned())),
    }
}

/// The request's stop strings (`stop`: text or list) and then `extra`.
fn stops(body: &RawObject, extra: &[String]) -> Vec<Value> {
    let mut out: Vec<Value> = match body.get("stop") {
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

fn is_stream(body: &RawObject) -> bool {
    body.get("stream") == Some(Value::Bool(true))
}

impl Manifest {
    /// The path a request on `route` is sent to for `model`: its completion endpoint for a chat
    /// the manifest renders through a template, else the route's own.
    pub(crate) fn upstream_path(&self, route: Route, model: &str) -> &'static str {
        match self.plan(model) {
            Some(plan) if route.is_chat() && plan.template.is_some() => plan.api.path(),
            _ => route.path(),
        }
    }

    /// Shapes `body` (its `model` already set to the upstream's name) for `model` on `route`;
    /// `id` names the answer (`chatcmpl-…`).
    pub(crate) fn shape(
        &self,
        route: Route,
        model: &str,
        body: &RawObject,
        meta: &RequestMeta,
        id: u64,
    ) -> Result<Shaped, ApiError> {
        // A model without an entry still takes a request's x_thinking, as template kwargs.
        let plan = match self.plan(model) {
            Some(p) => Some(p),
            None if meta.thinking.is_some() => Some(self.default_plan()),
            None => None,
        }
        .filter(|_| route.is_chat());
        let Some(plan) = plan else {
            return Ok(Shaped {
                path: route.path(),
                payload: Bytes::from(body.to_vec()),
                reshaper: None,
            });
        };
        let thinking = meta.thinking.or(plan.thinking);
        if plan.template.is_some() {
            // The caller's profile may render its chats with another built-in template.
            if let Some(own) = meta.template.as_deref().and_then(|t| plan.with_builtin(t)) {
                return templated(&own, model, body, thinking, id);
            }
            return templated(plan, model, body, thinking, id);
        }
        let mut body = body.clone();
        match (thinking, plan.via) {
            (Some(on), ThinkingVia::Kwargs) => {
                let mut kwargs = match body.get("chat_template_kwargs") {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                // A request's own kwargs win over the manifest (x_thinking is applied above).
                if meta.thinking.is_some() || !kwargs.contains_key("enable_thinking") {
                    kwargs.insert("enable_thinking".into(), Value::Bool(on));
                }
                body.set("chat_template_kwargs", &kwargs)?;
            }
            (Some(on), ThinkingVia::System) => {
                let Some(Value::Array(mut list)) = body.get("messages") else {
                    return Err(
                        ApiError::bad_request("`messages` must be a list").param("messages")
                    );
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
                body.set("messages", &list)?;
            }
            _ => {}
        }
        let reshaper = plan
            .split
            .then(|| Reshaper::split_chat(is_stream(&body), &plan.tags, false));
        Ok(Shaped {
            path: route.path(),
            payload: Bytes::from(body.to_vec()),
            reshaper,
        })
    }
}

/// A chat rendered through the model's template into a completion request.
fn templated(
    plan: &ModelPlan,
    model: &str,
    body: &RawObject,
    thinking: Option<bool>,
    id: u64,
) -> Result<Shaped, ApiError> {
    if body
        .get("tools")
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
    {
        return Err(ApiError::bad_request(format!(
            "`{model}` is served through a text template here, which has no tool calls"
        ))
        .param("tools"));
    }
    let mut msgs = messages(body)?;
    if let (Some(on), ThinkingVia::System) = (thinking, plan.via) {
        with_instruction(&mut msgs, if on { &plan.on_text } else { &plan.off_text });
    }
    let list = msgs
        .into_iter()
        .map(|(role, content)| {
            TValue::Map(BTreeMap::from([
                ("role".to_owned(), TValue::Str(role)),
                ("content".to_owned(), TValue::Str(content)),
            ]))
        })
        .collect();
    let ctx: Context = BTreeMap::from([
        ("messages".to_owned(), TValue::List(list)),
        ("add_generation_prompt".to_owned(), TValue::Bool(true)),
        (
            "thinking".to_owned(),
            thinking.map_or(TValue::None, TValue::Bool),
        ),
        ("bos_token".to_owned(), TValue::Str(String::new())),
        ("eos_token".to_owned(), TValue::Str(String::new())),
    ]);
    let prompt = match &plan.template {
        Some(t) => t.render(&ctx, MAX_PROMPT_BYTES).ok_or_else(|| {
            ApiError::bad_request(format!(
                "the prompt `{model}`'s template renders is longer than {MAX_PROMPT_BYTES} bytes"
            ))
            .param("messages")
        })?,
        None => String::new(),
    };
    let stream = is_stream(body);
    let max_tokens = body
        .get("max_completion_tokens")
        .or_else(|| body.get("max_tokens"))
        .filter(|v| !v.is_null());
    let stop = stops(body, &plan.stop);
    let mut out = Map::new();
    let path = plan.api.path();
    let fields = match plan.api {
        CompletionApi::Openai => OPENAI_FIELDS,
        CompletionApi::Llama => {
            if body
                .get("n")
                .and_then(|n| n.as_u64())
                .is_some_and(|n| n > 1)
            {
                return Err(ApiError::bad_request(
                    "llama-server's /completion gives one answer: n must be 1",
                )
                .param("n"));
            }
            LLAMA_FIELDS
        }
    };
    for k in fields {
        if let Some(v) = body.get(k) {
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
    let payload = serde_json::to_vec(&out).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Shaped {
        path,
        payload: Bytes::from(payload),
        reshaper: Some(reshaper),
    })
}
