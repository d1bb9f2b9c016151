//! The manifest's errors: an entry that cannot be used ([`EntryError`], found when the manifest
//! is read) and a request a model's manifest cannot carry ([`ShapeError`], found per request).
//! A template's syntax error is the template module's own ([`TemplateError`]), the source of an
//! [`EntryError::BadTemplateFile`].

use std::fmt;
use std::path::PathBuf;

use crate::template::TemplateError;

/// A manifest entry that cannot be used, named by its key (`manifest.MODEL.KEY`, as in a
/// configuration file) so that the message points at what to change.
///
/// Its text is `KEY = VALUE: EXPECTED` ([`EntryError::key`], [`EntryError::value`],
/// [`EntryError::expected`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// `template` and `template_file` are both given.
    BothTemplates {
        /// The model, by the name clients use.
        model: String,
    },
    /// `template` names no built-in template.
    UnknownTemplate {
        /// The model.
        model: String,
        /// The name given.
        name: String,
    },
    /// `template_file` is empty.
    EmptyTemplateFile {
        /// The model.
        model: String,
    },
    /// `template_file` cannot be read (or is not UTF-8 text, or is too long).
    UnreadableTemplateFile {
        /// The model.
        model: String,
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: std::io::Error,
    },
    /// `template_file` is not a Jinja template, or holds none (a GGUF without
    /// `tokenizer.chat_template`, a `tokenizer_config.json` without `chat_template`).
    BadTemplateFile {
        /// The model.
        model: String,
        /// The file.
        path: PathBuf,
        /// The syntax error, with its line, or why the file holds no template.
        #[source]
        source: TemplateError,
    },
    /// `template = "model"` for a model whose weights are not known
    /// ([`ModelManifest::with_weights`](crate::ModelManifest::with_weights) was not called).
    NoModelWeights {
        /// The model.
        model: String,
    },
    /// `template = "model"`, and the model's weights hold no template that can be read (a GGUF
    /// without `tokenizer.chat_template`, a directory without `chat_template.jinja`,
    /// `chat_template.json` or a `tokenizer_config.json` with `chat_template`, weights that are
    /// neither a GGUF nor a directory, or that cannot be read).
    NoModelTemplate {
        /// The model.
        model: String,
        /// Its weights.
        weights: PathBuf,
        /// Why no template was read from them.
        #[source]
        source: std::io::Error,
    },
    /// `template = "model"`, and the template in the model's weights is not a Jinja template.
    BadModelTemplate {
        /// The model.
        model: String,
        /// Its weights.
        weights: PathBuf,
        /// The syntax error, with its line.
        #[source]
        source: TemplateError,
    },
    /// `thinking_via = "kwargs"` for a model whose template is rendered here (its server never
    /// sees the kwargs).
    KwargsWithTemplate {
        /// The model.
        model: String,
    },
    /// `thinking_via = "template"` for a model without a template here.
    TemplateWithoutTemplate {
        /// The model.
        model: String,
    },
    /// `vision = true` for a model whose template is rendered here (a prompt is text only).
    VisionWithTemplate {
        /// The model.
        model: String,
    },
    /// A reasoning tag is empty.
    EmptyReasoningTag {
        /// The model.
        model: String,
        /// The tags given.
        tags: [String; 2],
    },
}

impl EntryError {
    fn model(&self) -> &str {
        match self {
            EntryError::BothTemplates { model }
            | EntryError::UnknownTemplate { model, .. }
            | EntryError::EmptyTemplateFile { model }
            | EntryError::UnreadableTemplateFile { model, .. }
            | EntryError::BadTemplateFile { model, .. }
            | EntryError::NoModelWeights { model }
            | EntryError::NoModelTemplate { model, .. }
            | EntryError::BadModelTemplate { model, .. }
            | EntryError::KwargsWithTemplate { model }
            | EntryError::TemplateWithoutTemplate { model }
            | EntryError::VisionWithTemplate { model }
            | EntryError::EmptyReasoningTag { model, .. } => model,
        }
    }

    /// The key to change: `manifest.MODEL.KEY`.
    pub fn key(&self) -> String {
        let key = match self {
            EntryError::BothTemplates { .. }
            | EntryError::UnknownTemplate { .. }
            | EntryError::NoModelWeights { .. }
            | EntryError::NoModelTemplate { .. }
            | EntryError::BadModelTemplate { .. } => "template",
            EntryError::EmptyTemplateFile { .. }
            | EntryError::UnreadableTemplateFile { .. }
            | EntryError::BadTemplateFile { .. } => "template_file",
            EntryError::KwargsWithTemplate { .. } | EntryError::TemplateWithoutTemplate { .. } => {
                "thinking_via"
            }
            EntryError::VisionWithTemplate { .. } => "vision",
            EntryError::EmptyReasoningTag { .. } => "reasoning_tags",
        };
        format!("manifest.{}.{key}", self.model())
    }

    /// Its value as given.
    pub fn value(&self) -> String {
        match self {
            EntryError::BothTemplates { .. } => "both template and template_file".to_owned(),
            EntryError::UnknownTemplate { name, .. } => name.clone(),
            EntryError::EmptyTemplateFile { .. } => String::new(),
            EntryError::UnreadableTemplateFile { path, .. } => path.display().to_string(),
            EntryError::BadTemplateFile { path, source, .. } => {
                format!("{}: {source}", path.display())
            }
            EntryError::NoModelWeights { .. } => crate::MODEL_TEMPLATE.to_owned(),
            EntryError::NoModelTemplate {
                weights, source, ..
            } => format!(
                "{} ({}: {source})",
                crate::MODEL_TEMPLATE,
                weights.display()
            ),
            EntryError::BadModelTemplate {
                weights, source, ..
            } => format!(
                "{} ({}: {source})",
                crate::MODEL_TEMPLATE,
                weights.display()
            ),
            EntryError::KwargsWithTemplate { .. } => "kwargs".to_owned(),
            EntryError::TemplateWithoutTemplate { .. } => "template".to_owned(),
            EntryError::VisionWithTemplate { .. } => "true".to_owned(),
            EntryError::EmptyReasoningTag { tags, .. } => format!("{tags:?}"),
        }
    }

    /// What it must be.
    pub fn expected(&self) -> &'static str {
        match self {
            EntryError::BothTemplates { .. } => "one of template and template_file",
            EntryError::UnknownTemplate { .. } => {
                "chatml, alpaca, raw or model (or a template_file)"
            }
            EntryError::NoModelWeights { .. } => {
                "a model whose weights are known (in HOROS: a [[coordinator.pool.model]] of this \
                 name with weights), or a built-in template or a template_file"
            }
            EntryError::NoModelTemplate { .. } => {
                "weights with a chat template: a GGUF with tokenizer.chat_template, or a model \
                 directory with chat_template.jinja, chat_template.json or a \
                 tokenizer_config.json with chat_template"
            }
            EntryError::BadModelTemplate { .. } => "a Jinja chat template in the model's weights",
            EntryError::EmptyTemplateFile { .. } => "a file name",
            EntryError::UnreadableTemplateFile { .. } => "a readable UTF-8 template file",
            EntryError::BadTemplateFile { .. } => {
                "a Jinja chat template, a GGUF or a tokenizer_config.json with one"
            }
            EntryError::KwargsWithTemplate { .. } => {
                "template or system for a model whose template is rendered here"
            }
            EntryError::TemplateWithoutTemplate { .. } => {
                "kwargs or system for a model without a template here"
            }
            EntryError::VisionWithTemplate { .. } => {
                "false for a model whose template is rendered here (its prompt is text only)"
            }
            EntryError::EmptyReasoningTag { .. } => "two non-empty tags",
        }
    }
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}: {}", self.key(), self.value(), self.expected())
    }
}

/// A request that a model's manifest cannot carry: a client's mistake (HTTP 400), except
/// [`ShapeError::Encode`]. [`ShapeError::param`] names the request's field at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// `messages` is missing or not a list.
    #[error("`messages` must be a list")]
    MessagesNotAList,
    /// A message's `role` is not text.
    #[error("messages[{index}].role must be text")]
    RoleNotText {
        /// The message's place in the list.
        index: usize,
    },
    /// A message's `content` is neither text nor a list of parts.
    #[error("messages[{index}].content must be text or a list of text parts")]
    ContentNotText {
        /// The message's place in the list.
        index: usize,
    },
    /// A content part that is not text (an image) cannot be rendered into a text prompt.
    #[error("messages[{index}]: a `{kind}` part cannot go through a text template")]
    PartNotText {
        /// The message's place in the list.
        index: usize,
        /// The part's `type` (`?` when it has none).
        kind: String,
    },
    /// Tools were given for a model served through a text template, which has no tool calls.
    #[error("`{model}` is served through a text template here, which has no tool calls")]
    ToolsThroughTemplate {
        /// The model.
        model: String,
    },
    /// The template renders a prompt longer than the limit.
    #[error("the prompt `{model}`'s template renders is longer than {max_bytes} bytes")]
    PromptTooLong {
        /// The model.
        model: String,
        /// The limit.
        max_bytes: usize,
    },
    /// The model's template refused the conversation (`raise_exception`), ran out of fuel, or
    /// failed to render it.
    #[error("`{model}`'s chat template: {source}")]
    Template {
        /// The model.
        model: String,
        /// What the template did.
        #[source]
        source: TemplateError,
    },
    /// `n` above 1 for llama-server's `/completion`, which gives one answer.
    #[error("llama-server's /completion gives one answer: n must be 1")]
    SeveralAnswers,
    /// The shaped body could not be written as JSON (not the client's fault).
    #[error("the shaped request could not be written as JSON")]
    Encode(#[source] serde_json::Error),
}

impl ShapeError {
    /// The request's field at fault (`None` for [`ShapeError::Encode`]).
    pub fn param(&self) -> Option<&'static str> {
        match self {
            ShapeError::MessagesNotAList
            | ShapeError::RoleNotText { .. }
            | ShapeError::ContentNotText { .. }
            | ShapeError::PartNotText { .. }
            | ShapeError::PromptTooLong { .. } => Some("messages"),
            ShapeError::Template { source, .. } => match source {
                TemplateError::Render { .. } | TemplateError::Syntax { .. } => None,
                _ => Some("messages"),
            },
            ShapeError::ToolsThroughTemplate { .. } => Some("tools"),
            ShapeError::SeveralAnswers => Some("n"),
            ShapeError::Encode(_) => None,
        }
    }

    /// Whether the request is at fault (HTTP 400), not the crate or the configured template (a
    /// template that fails to render a conversation: an operator's template that does not
    /// handle it, though the message says what the conversation met).
    pub fn is_client_error(&self) -> bool {
        !matches!(
            self,
            ShapeError::Encode(_)
                | ShapeError::Template {
                    source: TemplateError::Render { .. } | TemplateError::Syntax { .. },
                    ..
                }
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_entry_error_reads_key_equals_value_colon_expected() {
        let e = EntryError::BadTemplateFile {
            model: "m".into(),
            path: "t.jinja".into(),
            source: crate::Template::parse("a\n{{ x").unwrap_err(),
        };
        assert_eq!(e.key(), "manifest.m.template_file");
        assert_eq!(
            e.to_string(),
            "manifest.m.template_file = t.jinja: chat template, line 2: syntax error: unexpected \
             end of input, expected end of variable block: a Jinja chat template, a GGUF or a \
             tokenizer_config.json with one"
        );
        assert!(std::error::Error::source(&e).is_some());
    }
}
