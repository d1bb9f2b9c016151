//! Backends on OpenAI-compatible servers (vLLM, llama-server), through `horos-vllm-client`:
//! [`OpenAiEmbedder`] (text embeddings from `/v1/embeddings`: BGE-M3 in production, MiniLM in
//! tests) and [`OpenAiVisionReader`] (a vision chat model such as Qwen2-VL reading a page image
//! with [`VISION_PROMPT`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use horos_vllm_client::{
    ChatMessage, ChatRequest, Client, ClientConfig, ContentPart, EmbeddingRequest, ErrorClass,
};

use crate::embed::{EmbedError, TextEmbedder};
use crate::vision::{Reading, VISION_PROMPT, VisionError, VisionReader, parse_vision_answer};

fn retryable(e: &horos_vllm_client::Error) -> bool {
    matches!(e.class(), ErrorClass::Retryable | ErrorClass::ServerCrashed)
}

/// Whether the server is down rather than busy or refusing this request: nothing listens, the
/// connection broke mid-request, or it answered 5xx.
fn server_down(e: &horos_vllm_client::Error) -> bool {
    matches!(
        e,
        horos_vllm_client::Error::Connect { .. } | horos_vllm_client::Error::ConnectionLost(_)
    ) || e.status().is_some_and(|s| (500..600).contains(&s))
}

/// The client both backends use: 120 s per call, 8 requests in flight per server.
fn inference_client(base_url: &str) -> Result<Client, horos_vllm_client::Error> {
    Client::with_config(
        ClientConfig::new(base_url)
            .total_timeout(Duration::from_secs(120))
            .max_concurrency(8),
    )
}

/// Text embeddings from an OpenAI-compatible `/v1/embeddings` endpoint.
#[derive(Clone)]
pub struct OpenAiEmbedder {
    client: Client,
    model: String,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("base_url", &self.client.base_url())
            .field("model", &self.model)
            .finish()
    }
}

impl OpenAiEmbedder {
    /// An embedder for `model` served at `base_url` (e.g. `http://127.0.0.1:18081`).
    pub fn new(base_url: &str, model: &str) -> Result<Self, EmbedError> {
        let client = inference_client(base_url).map_err(|e| EmbedError::Backend {
            message: e.to_string(),
            retryable: false,
        })?;
        Ok(Self {
            client,
            model: model.into(),
        })
    }

    /// Uses an existing client.
    pub fn with_client(client: Client, model: &str) -> Self {
        Self {
            client,
            model: model.into(),
        }
    }
}

impl TextEmbedder for OpenAiEmbedder {
    fn name(&self) -> &str {
        &self.model
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let n = texts.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let req = EmbeddingRequest::new(self.model.clone(), texts);
        let resp = self
            .client
            .embeddings(&req)
            .await
            .map_err(|e| EmbedError::Backend {
                retryable: retryable(&e),
                message: e.to_string(),
            })?;
        if resp.data.len() != n {
            return Err(EmbedError::Shape(format!(
                "{} embeddings for {n} inputs",
                resp.data.len()
            )));
        }
        let mut out = vec![Vec::new(); n];
        for (pos, e) in resp.data.into_iter().enumerate() {
            let i = e.index as usize;
            // Servers give `index`; fall back to the position when it is out of range.
            let slot = if i < n && out[i].is_empty() { i } else { pos };
            out[slot] = e.embedding;
        }
        if out.iter().any(Vec::is_empty) {
            return Err(EmbedError::Shape("empty embedding".into()));
        }
        Ok(out)
    }
}

/// A vision chat model reading page images (text, tables as JSON, figure descriptions).
#[derive(Clone)]
pub struct OpenAiVisionReader {
    client: Client,
    model: String,
    max_tokens: u32,
}

impl std::fmt::Debug for OpenAiVisionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiVisionReader")
            .field("base_url", &self.client.base_url())
            .field("model", &self.model)
            .finish()
    }
}

impl OpenAiVisionReader {
    /// A reader using `model` served at `base_url` (e.g. `http://127.0.0.1:8001` for vLLM with
    /// Qwen2-VL-7B-Instruct).
    pub fn new(base_url: &str, model: &str) -> Result<Self, VisionError> {
        let client = inference_client(base_url).map_err(|e| VisionError::Model {
            message: e.to_string(),
            retryable: false,
        })?;
        Ok(Self {
            client,
            model: model.into(),
            max_tokens: 4096,
        })
    }

    /// Uses an existing client.
    pub fn with_client(client: Client, model: &str) -> Self {
        Self {
            client,
            model: model.into(),
            max_tokens: 4096,
        }
    }

    /// Sets the answer's token limit (default 4096).
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }

    /// The request sent for one PNG image.
    pub fn request(&self, png: &[u8]) -> ChatRequest {
        let parts = vec![
            ContentPart::image_bytes(png, Some("image/png")),
            ContentPart::text(VISION_PROMPT),
        ];
        ChatRequest::new(self.model.clone(), vec![ChatMessage::user_parts(parts)])
            .max_tokens(self.max_tokens)
            .temperature(0.0)
    }
}

impl VisionReader for OpenAiVisionReader {
    fn name(&self) -> &str {
        &self.model
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        let started = Instant::now();
        let req = self.request(&png);
        let resp = self.client.chat(&req).await.map_err(|e| {
            if server_down(&e) {
                VisionError::Unavailable(e.to_string())
            } else {
                VisionError::Model {
                    retryable: retryable(&e),
                    message: e.to_string(),
                }
            }
        })?;
        let mut reading = parse_vision_answer(resp.text());
        reading.inference_seconds = started.elapsed().as_secs_f64();
        Ok(reading)
    }
}
