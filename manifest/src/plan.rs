//! A manifest resolved: every model's [`ModelManifest`] checked and its template parsed into a
//! plan ([`Manifest`]), once, before the first request.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::EntryError;
use crate::settings::{CompletionApi, MODEL_TEMPLATE, ModelManifest, ThinkingVia};
use crate::template::Template;

/// A template's built-in source and stop strings (rendered with trim_blocks and lstrip_blocks,
/// as every template is: no newline right after a block tag).
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
            // trim_blocks drops a newline right after a tag: the separator is an expression.
            "{%- for m in messages %}{{ m.content }}{% if not loop.last %}{{ '\\n\\n' }}\
             {% endif %}{% endfor %}",
            &[],
        )),
        _ => None,
    }
}

/// Whether `name` is a built-in template (`chatml`, `alpaca`, `raw` or its other name
/// `plain`).
pub fn is_builtin(name: &str) -> bool {
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

/// Every model's plan, by the name clients use: the manifest resolved, its templates parsed.
/// Requests are shaped by [`Manifest::shape`].
#[derive(Debug, Clone)]
pub struct Manifest {
    plans: BTreeMap<String, Arc<ModelPlan>>,
    /// The plan of a model without an entry (a request's `x_thinking` as template kwargs).
    default: Arc<ModelPlan>,
}

impl ModelManifest {
    /// The resolved plan; `read_files`: read and parse `template_file`, or the model's weights
    /// for `template = "model"` (else they are only named, and an empty template stands in for
    /// the checks).
    fn plan_with(&self, model: &str, read_files: bool) -> Result<ModelPlan, EntryError> {
        let model_name = || model.to_owned();
        let (template, mut stop) = match (&self.template, &self.template_file) {
            (Some(_), Some(_)) => {
                return Err(EntryError::BothTemplates {
                    model: model_name(),
                });
            }
            (Some(name), None) if name == MODEL_TEMPLATE => {
                let Some(weights) = &self.weights else {
                    return Err(EntryError::NoModelWeights {
                        model: model_name(),
                    });
                };
                if read_files {
                    let src = crate::template_file::read_model(weights).map_err(|source| {
                        EntryError::NoModelTemplate {
                            model: model_name(),
                            weights: weights.clone(),
                            source,
                        }
                    })?;
                    let t =
                        Template::parse(&src).map_err(|source| EntryError::BadModelTemplate {
                            model: model_name(),
                            weights: weights.clone(),
                            source,
                        })?;
                    (Some(t), Vec::new())
                } else {
                    (Some(Template::empty()), Vec::new())
                }
            }
            (Some(name), None) => {
                let unknown = || EntryError::UnknownTemplate {
                    model: model_name(),
                    name: name.clone(),
                };
                let (_, stops) = builtin(name).ok_or_else(unknown)?;
                let t = parsed_builtin(name).ok_or_else(unknown)?.clone();
                (Some(t), stops.iter().map(|s| (*s).to_owned()).collect())
            }
            (None, Some(path)) if !read_files => {
                if path.as_os_str().is_empty() {
                    return Err(EntryError::EmptyTemplateFile {
                        model: model_name(),
                    });
                }
                (Some(Template::empty()), Vec::new())
            }
            (None, Some(path)) => {
                let src = crate::template_file::read(path).map_err(|source| {
                    EntryError::UnreadableTemplateFile {
                        model: model_name(),
                        path: path.clone(),
                        source,
                    }
                })?;
                let t = Template::parse(&src).map_err(|source| EntryError::BadTemplateFile {
                    model: model_name(),
                    path: path.clone(),
                    source,
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
                return Err(EntryError::KwargsWithTemplate {
                    model: model_name(),
                });
            }
            (ThinkingVia::Template, false) => {
                return Err(EntryError::TemplateWithoutTemplate {
                    model: model_name(),
                });
            }
            _ => {}
        }
        if self.vision && template.is_some() {
            // Image parts cannot be rendered into a text prompt.
            return Err(EntryError::VisionWithTemplate {
                model: model_name(),
            });
        }
        let tags = self
            .reasoning_tags
            .clone()
            .unwrap_or_else(|| ["<think>".to_owned(), "</think>".to_owned()]);
        if tags.iter().any(String::is_empty) {
            return Err(EntryError::EmptyReasoningTag {
                model: model_name(),
                tags,
            });
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

    fn plan(&self, model: &str) -> Result<ModelPlan, EntryError> {
        self.plan_with(model, true)
    }
}

impl Manifest {
    /// Resolves every entry, by the model name clients use (reads and parses template files);
    /// the error names the key at fault.
    pub fn new(entries: &BTreeMap<String, ModelManifest>) -> Result<Self, EntryError> {
        let mut plans = BTreeMap::new();
        for (model, m) in entries {
            plans.insert(model.clone(), Arc::new(m.plan(model)?));
        }
        let default = Arc::new(ModelManifest::default().plan("*")?);
        Ok(Self { plans, default })
    }

    /// The plan of a model without an entry.
    pub(crate) fn default_plan(&self) -> &Arc<ModelPlan> {
        &self.default
    }

    /// The plan of `model`, if it has an entry.
    pub(crate) fn plan(&self, model: &str) -> Option<&Arc<ModelPlan>> {
        self.plans.get(model)
    }

    /// Whether `model` has an entry (its requests may be shaped, or refused by
    /// [`Manifest::shape`], even without an `x_thinking`).
    pub fn has_entry(&self, model: &str) -> bool {
        self.plans.contains_key(model)
    }

    /// Whether `model` reads images (its entry's `vision = true`).
    pub fn reads_images(&self, model: &str) -> bool {
        self.plan(model).is_some_and(|p| p.vision)
    }
}

/// Checks every entry's values without reading template files (a configuration's relative
/// paths may not be resolved yet); [`Manifest::new`] reads and parses them.
pub fn validate(entries: &BTreeMap<String, ModelManifest>) -> Result<(), EntryError> {
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
        for name in ["chatml", "alpaca", "raw", "plain"] {
            assert!(is_builtin(name) && parsed_builtin(name).is_some(), "{name}");
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
        assert_eq!(e.key(), "manifest.m.template");
        let e = ModelManifest {
            template: Some("chatml".into()),
            thinking_via: Some(ThinkingVia::Kwargs),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key(), "manifest.m.thinking_via");
        let e = ModelManifest {
            template_file: Some("/nonexistent/t.jinja".into()),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key(), "manifest.m.template_file");
        assert!(matches!(e, EntryError::UnreadableTemplateFile { .. }));
        assert!(
            std::error::Error::source(&e).is_some(),
            "the io error is its source"
        );
        let e = ModelManifest {
            template: Some("chatml".into()),
            template_file: Some("t.jinja".into()),
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest.m.template = both template and template_file: one of template and \
             template_file"
        );
        let e = ModelManifest {
            template: Some("chatml".into()),
            vision: true,
            ..ModelManifest::default()
        }
        .plan("m")
        .unwrap_err();
        assert_eq!(e.key(), "manifest.m.vision");
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

    /// A GGUF header whose metadata is `tokenizer.chat_template` = `template`.
    fn gguf_with(template: &str) -> Vec<u8> {
        let key = "tokenizer.chat_template";
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend((key.len() as u64).to_le_bytes());
        b.extend(key.as_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend((template.len() as u64).to_le_bytes());
        b.extend(template.as_bytes());
        b
    }

    #[test]
    fn template_model_reads_the_models_weights_and_names_the_key_when_they_hold_none() {
        let dir = std::env::temp_dir().join(format!("horos-manifest-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let model = ModelManifest {
            template: Some("model".into()),
            ..ModelManifest::default()
        };
        assert!(model.wants_model_template());
        // Without weights: refused on `template`, when checked as when resolved.
        for e in [
            validate(&BTreeMap::from([("m".to_owned(), model.clone())])).unwrap_err(),
            model.plan("m").unwrap_err(),
        ] {
            assert!(matches!(e, EntryError::NoModelWeights { .. }), "{e}");
            assert_eq!(e.key(), "manifest.m.template");
        }
        // A GGUF's template, rendered as the model's own.
        let gguf = dir.join("m.gguf");
        std::fs::write(
            &gguf,
            gguf_with("{% for m in messages %}<{{ m.content }}>{% endfor %}"),
        )
        .unwrap();
        let entry = model.clone().with_weights(&gguf);
        assert_eq!(entry.weights.as_deref(), Some(gguf.as_path()));
        let p = entry.plan("m").unwrap();
        let chat = crate::Context {
            messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
            ..crate::Context::default()
        };
        assert_eq!(p.template.unwrap().render(&chat, 1024).unwrap(), "<hi>");
        assert_eq!(p.via, ThinkingVia::Template);
        // A model directory's tokenizer_config.json.
        let hf = dir.join("hf");
        std::fs::create_dir_all(&hf).unwrap();
        std::fs::write(
            hf.join("tokenizer_config.json"),
            r#"{"chat_template": "[{{ messages|length }}]"}"#,
        )
        .unwrap();
        let p = model.clone().with_weights(&hf).plan("m").unwrap();
        assert_eq!(p.template.unwrap().render(&chat, 1024).unwrap(), "[1]");
        // Weights without a template: a typed error on `template`, the weights named.
        let none = [&b"GGUF"[..], &3u32.to_le_bytes(), &[0u8; 16]].concat(); // no metadata
        std::fs::write(&gguf, none).unwrap();
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        for weights in [&gguf, &empty] {
            let e = model.clone().with_weights(weights).plan("m").unwrap_err();
            assert!(matches!(e, EntryError::NoModelTemplate { .. }), "{e}");
            assert_eq!(e.key(), "manifest.m.template");
            assert!(e.value().contains(&weights.display().to_string()), "{e}");
            // Checking alone does not read the weights.
            let entries = BTreeMap::from([("m".to_owned(), model.clone().with_weights(weights))]);
            validate(&entries).unwrap();
        }
        std::fs::write(hf.join("chat_template.jinja"), "{% if %}").unwrap();
        let e = model.clone().with_weights(&hf).plan("m").unwrap_err();
        assert!(matches!(e, EntryError::BadModelTemplate { .. }), "{e}");
        assert_eq!(e.key(), "manifest.m.template");
        // With template_file too: refused; another template keeps the weights unread.
        let e = ModelManifest {
            template_file: Some("t.jinja".into()),
            ..model.clone().with_weights(&hf)
        }
        .plan("m")
        .unwrap_err();
        assert!(matches!(e, EntryError::BothTemplates { .. }), "{e}");
        let p = ModelManifest {
            template: Some("chatml".into()),
            ..model.with_weights(&empty)
        }
        .plan("m")
        .unwrap();
        assert_eq!(p.stop, ["<|im_end|>"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
