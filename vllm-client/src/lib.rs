//! An OpenAI-compatible HTTP client for vLLM and llama.cpp's llama-server, on hyper 1.
//!
//! - Chat completions (text, and images as content parts from bytes or files, sent as `data:` URLs),
//!   completions, embeddings, models, health, and the server's Prometheus `/metrics` parsed into
//!   requests running and waiting ([`ServerLoad`]).
//! - Streaming: server-sent events parsed incrementally into typed chunks ([`ChatStream`]); dropping
//!   the stream cancels the request; the body is never buffered whole.
//! - Connection reuse (a pool per client), a per-server concurrency limit, timeouts (connect, first
//!   byte, total: 120 s by default), typed errors carrying status and body, and a classification
//!   ([`Error::class`]): [`ErrorClass::Retryable`] (connection refused, 503, timeouts),
//!   [`ErrorClass::BadRequest`] (400, 413, 422: never retry), [`ErrorClass::ServerCrashed`] (the
//!   connection broke mid-request), [`ErrorClass::Fatal`].
//! - Extra body fields passed through (`extra` maps: structured / guided output, vLLM sampling
//!   extras); unknown response fields tolerated.
//!
//! ```no_run
//! use horos_vllm_client::{ChatMessage, ChatRequest, Client, ClientConfig, ErrorClass};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), horos_vllm_client::Error> {
//! let client = Client::with_config(
//!     ClientConfig::new("http://127.0.0.1:8000")
//!         .total_timeout(Duration::from_secs(60))
//!         .max_concurrency(8),
//! )?;
//! let req = ChatRequest::new("smollm2", vec![ChatMessage::user("Say hi")]).max_tokens(32);
//! match client.chat(&req).await {
//!     Ok(answer) => println!("{}", answer.text()),
//!     Err(e) if e.class() == ErrorClass::Retryable => println!("try again later: {e}"),
//!     Err(e) => println!("giving up: {e}"),
//! }
//! let mut stream = client.chat_stream(&req).await?;
//! while let Some(chunk) = stream.next_item().await {
//!     print!("{}", chunk?.content().unwrap_or(""));
//! }
//! let load = client.load().await?;
//! println!("running {} waiting {}", load.running, load.waiting);
//! # Ok(()) }
//! ```

mod client;
mod de;
mod enc;
mod error;
mod metrics;
mod types;

pub use client::{ChatStream, ChatStreamSummary, Client, ClientConfig, SseStream, StreamItem};
pub use error::{Error, ErrorClass, TimeoutPhase, classify_status};
pub use metrics::{Sample, ServerLoad, parse_prometheus};
pub use types::{
    AssistantMessage, ChatChoice, ChatChunk, ChatMessage, ChatRequest, ChatResponse, ChunkChoice,
    CompletionChoice, CompletionRequest, CompletionResponse, ContentPart, Delta, Embedding,
    EmbeddingInput, EmbeddingRequest, EmbeddingResponse, Extra, ImageUrl, MessageContent,
    ModelInfo, ModelList, Prompt, StreamOptions, Usage, role, sniff_image_mime,
};

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
