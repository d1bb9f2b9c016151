//! # horos-manifest — chat templates, thinking mode and reasoning split for OpenAI requests
//!
//! What a gateway does per model besides routing to it, as pure JSON transforms. A model's
//! [`ModelManifest`] may give it
//!
//! - a **chat template** (`template = "chatml" | "alpaca" | "raw"`, or `template_file`: a Jinja
//!   template as models ship them, or the model's own from its GGUF or `tokenizer_config.json`;
//!   or `template = "model"`: the model's own, read from its weights, a GGUF or a model
//!   directory, which its server gives ([`ModelManifest::with_weights`])):
//!   its `/v1/chat/completions` requests are rendered into one prompt ([`template`]) and sent to
//!   the server's completion endpoint (`completion_api = "openai"`: `/v1/completions`;
//!   `"llama"`: llama-server's `/completion`), and the answer is shaped back into a chat
//!   completion ([`Reshaper`]), streams included — for models whose server has no chat template
//!   of its own, or the wrong one;
//! - a **thinking mode** (`thinking = true | false`): the template's `thinking` and
//!   `enable_thinking` flags, a system instruction, or `chat_template_kwargs.enable_thinking` for
//!   servers that take it; a request may override it ([`Attempt::thinking`]);
//! - **reasoning separated from the answer**: `<think>…</think>` in the content is moved to
//!   `reasoning_content`, in whole answers and in streams ([`ThinkSplitter`]);
//! - **vision** (`vision = true`): the model reads images ([`Manifest::reads_images`]).
//!
//! [`Manifest::new`] resolves every entry once (templates parsed, template files read; an
//! [`EntryError`] names the key at fault); [`Manifest::shape`] shapes one attempt of a request
//! at one model ([`Shaped`]: the path, the body, the [`Reshaper`] of its answer), since the
//! rungs of a fallback ladder may be different models. A request the model's manifest cannot
//! carry is a [`ShapeError`]; nothing here panics on a request, an answer or a template.
//!
//! The crate depends on serde, serde_json, bytes and thiserror, and on minijinja (with
//! minijinja-contrib's Python methods) for the templates. See the README for a runnable example.

mod error;
mod plan;
mod reasoning;
mod settings;
mod shape_request;
mod shape_response;
pub mod template;
mod template_file;

pub use error::{EntryError, ShapeError};
pub use plan::{Manifest, is_builtin, validate};
pub use reasoning::{Split, ThinkSplitter};
pub use settings::{CompletionApi, MODEL_TEMPLATE, ModelManifest, ThinkingVia};
pub use shape_request::{Attempt, Endpoint, Fields, Payload, Shaped};
pub use shape_response::Reshaper;
pub use template::{Context, Template, TemplateError};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
