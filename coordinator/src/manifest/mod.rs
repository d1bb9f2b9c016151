//! The model manifest: what the coordinator does per model besides routing to it.
//!
//! `[coordinator.manifest."MODEL"]` ([`ModelManifest`]) may give a model
//!
//! - a **chat template** (`template = "chatml" | "alpaca" | "raw"`, or `template_file`): its
//!   `/v1/chat/completions` requests are rendered into one prompt here and sent to the server's
//!   completion endpoint (`completion_api = "openai"`: `/v1/completions`; `"llama"`:
//!   llama-server's `/completion`), and the answer is shaped back into a chat completion,
//!   streams included — for models whose server has no chat template of their own, or the wrong
//!   one;
//! - a **thinking mode** (`thinking = true | false`): the template's `thinking` flag, a system
//!   instruction, or `chat_template_kwargs.enable_thinking` for servers that take it; a request
//!   may override it with `x_thinking`;
//! - **reasoning separated from the answer**: `<think>…</think>` in the content is moved to
//!   `reasoning_content`, in whole answers and in streams;
//! - **vision** (`vision = true`): the model reads images (OpenAI `image_url` content parts), so
//!   `POST /v1/answers` gives it the retrieved pages' images beside their text
//!   ([`crate::answers`]).
//!
//! Templates are parsed once, when the coordinator starts; a request is shaped per attempt,
//! since the rungs of a task's ladder may be different models.

mod reasoning;
mod shape_request;
mod shape_response;
pub mod template;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::InvalidConfig;

pub use reasoning::{Split, ThinkSplitter};
pub(crate) use shape_response::Reshaper;
use template::Template;

/// Which completion endpoint a templated model's prompt goes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionApi {
    /// OpenAI's `POST /v1/completions` (vLLM, llama-server, most servers).
    #[default]
    Openai,
    /// llama-server's native `POST /completion` (`n_predict`, `content`, `stop_type`).
    Llama,
}

impl CompletionApi {
    /// The path a rendered chat is sent to.
    pub fn path(self) -> &'static str {
        match self {
            CompletionApi::Openai => "/v1/completions",
            CompletionApi::Llama => "/completion",
        }
    }
}

/// How a model's thinking mode is switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingVia {
    /// `chat_template_kwargs: {enable_thinking: …}` in the request, for servers that render the
    /// model's own chat template (vLLM, llama-server with `--jinja`). The default of models
    /// without a template here.
    Kwargs,
    /// A system instruction: `thinking_on_text` or `thinking_off_text` is added to the system
    /// message (one is inserted if there is none), e.g. Qwen3's `/think` and `/no_think`.
    System,
    /// Only the template's `thinking` variable (`{% if thinking %}…{% endif %}`). The default
    /// of models with a template here.
    Template,
}

/// One model's entry in the manifest: `[coordinator.manifest."MODEL"]`. Every key is optional;
/// a model without an entry is forwarded as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelManifest {
    /// A built-in chat template rendered here: `chatml` (`<|im_start|>role …<|im_end|>`),
    /// `alpaca` (`### Instruction:` / `### Response:`) or `raw` (the messages' text, one
    /// paragraph each). Chat requests then go to the completion endpoint.
    pub template: Option<String>,
    /// A template file in the Jinja-like subset of [`template`], instead of a built-in one
    /// (relative paths: to the working directory; horos-ref makes them relative to its
    /// configuration file).
    pub template_file: Option<PathBuf>,
    /// The completion endpoint of a templated model (`openai` or `llama`).
    pub completion_api: CompletionApi,
    /// Stop strings sent with a templated model's prompt, after the template's own (ChatML's
    /// `<|im_end|>`, Alpaca's `### Instruction:`) and the request's.
    pub stop: Vec<String>,
    /// The model's thinking mode by default (`None`: left to the model and the request).
    pub thinking: Option<bool>,
    /// How thinking is switched (default: `kwargs`, or `template` for a templated model).
    pub thinking_via: Option<ThinkingVia>,
    /// The system instruction that turns thinking on, for `thinking_via = "system"`.
    pub thinking_on_text: String,
    /// The system instruction that turns thinking off, for `thinking_via = "system"`.
    pub thinking_off_text: String,
    /// Move `<think>…</think>` from the answer's content to `reasoning_content` (default: on
    /// when `thinking` is set).
    pub split_reasoning: Option<bool>,
    /// The tags around the reasoning (default `["<think>", "</think>"]`).
    pub reasoning_tags: Option<[String; 2]>,
    /// The model reads images (a vision-language model): `POST /v1/answers` sends it the
    /// supporting pages' images as well as their text. Default false.
    pub vision: bool,
}

/// A template's built-in source and stop strings.
fn builtin(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    match name {
        "chatml" => Some((
            "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
             {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            &["<|im_end|>"],
        )),
        "alpaca" => Some((
            "{%- for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n\n\
             {% elif m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n\
             {% else %}### Response:\n{{ m.content }}\n\n{% endif %}{% endfor %}\
             {% if add_generation_prompt %}### Response:\n{% endif %}",
            &["### Instruction:"],
        )),
        "raw" | "plain" => Some((
            "{%- for m in messages %}{{ m.content }}{% if not loop.last %}\n\n{% endif %}\
             {% endfor %}",
            &[],
        )),
        _ => None,
    }
}

/// Whether `name` is a built-in template.
pub(crate) fn is_builtin(name: &str) -> bool {
    builtin(name).is_some()
}

/// The built-in template `name`, parsed once for the whole process (a profile's template is
/// applied to each of its caller's chats).
fn parsed_builtin(name: &str) -> Option<&'static Template> {
    static PARSED: std::sync::LazyLock<BTreeMap<&'static str, Template>> =
        std::sync::LazyLock::new(|| {
            ["chatml", "alpaca", "raw", "plain"]
                .into_iter()
                .filter_map(|n| Some((n, Template::parse(builtin(n)?.0).ok()?)))
                .collect()
        });
    PARSED.get(name)
}

impl ModelPlan {
    /// This plan with the built-in template `name` instead of its own (its stop strings added to
    /// the plan's), for a caller whose profile names one; `None` for an unknown name.
    pub(crate) fn with_builtin(&self, name: &str) -> Option<ModelPlan> {
        let (_, stops) = builtin(name)?;
        let template = parsed_builtin(name)?.clone();
        let mut stop: Vec<String> = stops.iter().map(|s| (*s).to_owned()).collect();
        stop.extend(
            self.stop
                .iter()
                .filter(|s| !stop.contains(s))
                .cloned()
                .collect::<Vec<_>>(),
        );
        Some(ModelPlan {
            template: Some(template),
            stop,
            ..self.clone()
        })
    }
}

/// A model's manifest, resolved: its template parsed, its defaults settled.
#[derive(Debug, Clone)]
pub(crate) struct ModelPlan {
    pub template: Option<Template>,
    pub stop: Vec<String>,
    pub api: CompletionApi,
    pub thinking: Option<bool>,
    pub via: ThinkingVia,
    pub on_text: String,
    pub off_text: String,
    pub split: bool,
    pub tags: [String; 2],
    pub vision: bool,
}

/// Every model's plan, by the name clients use.
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    plans: BTreeMap<String, Arc<ModelPlan>>,
    /// The plan of a model without an entry (a request's `x_thinking` as template kwargs).
    default: Arc<ModelPlan>,
}

impl ModelManifest {
    /// The resolved plan; `read_files`: read and parse `template_file` (else it is only
    /// named, and a built-in template stands in for the checks).
    fn plan_with(&self, model: &str, read_files: bool) -> Result<ModelPlan, InvalidConfig> {
        let key = |k: &str| format!("manifest.{model}.{k}");
        let bad = |k: &str, value: String, expected: &'static str| InvalidConfig {
            key: key(k),
            value,
            expected,
        };
        let (template, mut stop) = match (&self.template, &self.template_file) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "template",
                    "both template and template_file".into(),
                    "one of template and template_file",
                ));
            }
            (Some(name), None) => {
                let (src, stops) = builtin(name).ok_or_else(|| {
                    bad(
                        "template",
                        name.clone(),
                        "chatml, alpaca or raw (or a template_file)",
                    )
                })?;
                let t = Template::parse(src).map_err(|_| {
                    bad("template", name.clone(), "a built-in template that parses")
                })?;
                (Some(t), stops.iter().map(|s| (*s).to_owned()).collect())
            }
            (None, Some(path)) if !read_files => {
                if path.as_os_str().is_empty() {
                    return Err(bad("template_file", String::new(), "a file name"));
                }
                let t = Template::parse("")
                    .map_err(|_| bad("template_file", String::new(), "a template"))?;
                (Some(t), Vec::new())
            }
            (None, Some(path)) => {
                let src = std::fs::read_to_string(path).map_err(|_| {
                    bad(
                        "template_file",
                        path.display().to_string(),
                        "a readable UTF-8 template file",
                    )
                })?;
                let t = Template::parse(&src).map_err(|e| {
                    bad(
                        "template_file",
                        format!("{}: {e}", path.display()),
                        "a template in the supported Jinja-like subset",
                    )
                })?;
                (Some(t), Vec::new())
            }
            (None, None) => (None, Vec::new()),
        };
        stop.extend(self.stop.iter().cloned());
        let via = self.thinking_via.unwrap_or(if template.is_some() {
            ThinkingVia::Template
        } else {
            ThinkingVia::Kwargs
        });
        match (via, template.is_some()) {
            (ThinkingVia::Kwargs, true) => {
                return Err(bad(
                    "thinking_via",
                    "kwargs".into(),
                    "template or system for a model whose template is rendered here",
                ));
            }
            (ThinkingVia::Template, false) => {
                return Err(bad(
                    "thinking_via",
                    "template".into(),
                    "kwargs or system for a model without a template here",
                ));
            }
            _ => {}
        }
        if self.vision && template.is_some() {
            // Image parts cannot be rendered into a text prompt.
            return Err(bad(
                "vision",
                "true".into(),
                "false for a model whose template is rendered here (its prompt is text only)",
            ));
        }
        let tags = self
            .reasoning_tags
            .clone()
            .unwrap_or_else(|| ["<think>".to_owned(), "</think>".to_owned()]);
        if tags.iter().any(String::is_empty) {
            return Err(bad(
                "reasoning_tags",
                format!("{tags:?}"),
                "two non-empty tags",
            ));
        }
        let text = |t: &str, default: &str| {
            if t.is_empty() {
                default.to_owned()
            } else {
                t.to_owned()
            }
        };
        Ok(ModelPlan {
            template,
            stop,
            api: self.completion_api,
            thinking: self.thinking,
            via,
            on_text: text(&self.thinking_on_text, "/think"),
            off_text: text(&self.thinking_off_text, "/no_think"),
            split: self.split_reasoning.unwrap_or(self.thinking.is_some()),
            tags,
            vision: self.vision,
        })
    }
}

impl ModelManifest {
    fn plan(&self, model: &str) -> Result<ModelPlan, InvalidConfig> {
        self.plan_with(model, true)
    }
}

impl Manifest {
    /// Resolves every entry (reads and parses template files); the error names the key.
    pub fn new(entries: &BTreeMap<String, ModelManifest>) -> Result<Self, InvalidConfig> {
        let mut plans = BTreeMap::new();
        for (model, m) in entries {
            plans.insert(model.clone(), Arc::new(m.plan(model)?));
        }
        let default = Arc::new(ModelManifest::default().plan("*")?);
        Ok(Self { plans, default })
    }

    /// The plan of a model without an entry.
    pub fn default_plan(&self) -> &Arc<ModelPlan> {
        &self.default
    }

    /// The plan of `model`, if its manifest entry asks for anything.
    pub fn plan(&self, model: &str) -> Option<&Arc<ModelPlan>> {
        self.plans.get(model)
    }

    /// Whether `model` reads images (its entry's `vision = true`).
    pub fn reads_images(&self, model: &str) -> bool {
        self.plan(model).is_some_and(|p| p.vision)
    }
}

/// Checks every entry's values; template files are read and parsed when the coordinator
/// starts (a configuration's relative paths may not be resolved yet).
pub fn validate(entries: &BTreeMap<String, ModelManifest>) -> Result<(), InvalidConfig> {
    for (model, m) in entries {
        m.plan_with(model, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn builtins_parse_and_bad_entries_are_named() {
        for name in ["chatml", "alpaca", "raw"] {
            let m = ModelManifest {
                template: Some(name.into()),
                ..ModelManifest::default()
            };
            let p = m.plan("m").unwrap();
            assert!(p.template.is_some());
            assert_eq!(p.via, ThinkingVia::Template);
            assert!(!p.split);
        }
        let e = ModelManifest {
            template: Some("vicuna".into()),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key, "manifest.m.template");
        let e = ModelManifest {
            template: Some("chatml".into()),
            thinking_via: Some(ThinkingVia::Kwargs),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key, "manifest.m.thinking_via");
        let e = ModelManifest {
            template_file: Some("/nonexistent/t.jinja".into()),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key, "manifest.m.template_file");
        let e = ModelManifest {
            template: Some("chatml".into()),
            vision: true,
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key, "manifest.m.vision");
        let p = ModelManifest {
            vision: true,
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap();
        assert!(p.vision && p.template.is_none() && !p.split);
        let p = ModelManifest {
            thinking: Some(false),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap();
        assert_eq!(p.via, ThinkingVia::Kwargs);
        assert!(p.split, "thinking set: reasoning split by default");
    }
}
