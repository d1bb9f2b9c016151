//! Answers that cite their pages: a question asked of a running coordinator's `POST
//! /v1/answers` ([`Remote::ask`], [`Remote::ask_streaming`]), with the caller's data-plane key.
//! The coordinator retrieves the supporting pages, asks the chat model through its own
//! admission, priorities, pool and budgets, and attributes each claim to a page; with no
//! supporting page it says so without calling a model.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::OpsError;
use crate::remote::Remote;

/// A question for [`Remote::ask`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"question": "What was the 2024 revenue?", "model": "qwen3-8b"}))]
#[schemars(example = serde_json::json!({"question": "Who signed the lease?", "model": "qwen3-vl", "k": 2, "document": 3, "min_similarity": 0.5, "max_tokens": 400, "temperature": 0, "images": true}))]
pub struct AskArgs {
    /// The question.
    pub question: String,
    /// The chat model that writes the answer.
    pub model: String,
    /// At most this many pages (1 to 20; the coordinator's default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20))]
    pub k: Option<usize>,
    /// Only this document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<i64>,
    /// A page found by meaning only supports the question from this cosine up (0 to 1; the
    /// coordinator's default 0.35).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub min_similarity: Option<f64>,
    /// Most tokens the model writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// The model's sampling temperature (0 to 2; 0: the same answer each time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Give the model the best pages' images (true) or only their text (false); default: images
    /// for a vision model (its manifest's `vision = true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
}

/// A page an answer cites: `[n]` in its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Citation {
    /// Its number in the answer's text.
    pub n: usize,
    /// The document.
    pub document: i64,
    /// The page.
    pub page: u32,
    /// How well it matched the question.
    pub score: f64,
    /// The start of the text the model was given.
    pub excerpt: String,
}

/// One sentence of an answer and the pages it cites (numbers of [`Answer::citations`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The sentence.
    pub text: String,
    /// The pages it cites (`[n]`).
    pub sources: Vec<usize>,
}

/// The coordinator's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The model that wrote it.
    pub model: String,
    /// Its text, `[n]` after each claim that cites a page.
    pub answer: String,
    /// Whether any page supported the question (false: no model was called).
    pub supported: bool,
    /// The pages it was written from.
    pub citations: Vec<Citation>,
    /// Its sentences and their pages.
    pub claims: Vec<Claim>,
    /// The model's token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

impl Answer {
    /// The citation numbered `n`.
    pub fn citation(&self, n: usize) -> Option<&Citation> {
        self.citations.iter().find(|c| c.n == n)
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, OpsError> {
    let body = v.to_string();
    serde_json::from_value(v).map_err(|e| {
        OpsError::Client(horos_vllm_client::Error::Decode {
            message: format!("/v1/answers {what}: {e}"),
            body,
        })
    })
}

impl Remote {
    /// The answer to `args.question`, whole.
    pub async fn ask(&self, args: &AskArgs) -> Result<Answer, OpsError> {
        let v: Value = self.client().post("/v1/answers", args).await?;
        decode(v, "answer")
    }

    /// The answer to `args.question`, its words handed to `on_words` as the model writes
    /// them; the whole answer at the end.
    pub async fn ask_streaming(
        &self,
        args: &AskArgs,
        mut on_words: impl FnMut(&str),
    ) -> Result<Answer, OpsError> {
        let mut body = json!(args);
        body["stream"] = json!(true);
        let mut events = self
            .client()
            .post_events::<_, Value>("/v1/answers", &body)
            .await?;
        let mut citations: Vec<Citation> = Vec::new();
        while let Some(event) = events.next_item().await {
            let mut event = event?;
            match event["object"].as_str() {
                Some("answer.sources") => {
                    citations = decode(event["citations"].take(), "sources")?;
                }
                Some("answer.delta") => on_words(event["delta"].as_str().unwrap_or_default()),
                Some("answer.error") => {
                    let why = event["error"]["message"].as_str().unwrap_or("unknown");
                    return Err(OpsError::Client(horos_vllm_client::Error::StreamError(
                        format!("/v1/answers: {why}"),
                    )));
                }
                Some("answer.done") => {
                    event["citations"] = json!(citations);
                    return decode(event, "done");
                }
                _ => {}
            }
        }
        Err(OpsError::Client(horos_vllm_client::Error::Decode {
            message: "/v1/answers: the events ended before the answer".into(),
            body: String::new(),
        }))
    }
}
