//! A model's manifest entry as a configuration gives it: [`ModelManifest`], with the choices it
//! names ([`CompletionApi`], [`ThinkingVia`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    /// Only the template's variables `thinking` and `enable_thinking` (Qwen3's), set to the
    /// mode (`{% if thinking %}…{% endif %}`; both undefined when it is not set). The default
    /// of models with a template here.
    Template,
}

/// One model's entry in the manifest (in HOROS: `[coordinator.manifest."MODEL"]`). Every key
/// is optional; a model without an entry is forwarded as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelManifest {
    /// A built-in chat template rendered here: `chatml` (`<|im_start|>role …<|im_end|>`),
    /// `alpaca` (`### Instruction:` / `### Response:`) or `raw` (the messages' text, one
    /// paragraph each); or `model` ([`MODEL_TEMPLATE`]): the model's own template, read from its
    /// [`weights`](ModelManifest::weights). Chat requests then go to the completion endpoint.
    pub template: Option<String>,
    /// A Jinja chat template ([`crate::template`]) instead of a built-in one: a template file,
    /// or the model's own template from its GGUF (`tokenizer.chat_template`) or its
    /// `tokenizer_config.json` (`chat_template`). Relative paths: to the working directory;
    /// horos-ref makes them relative to its configuration file.
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
    /// The model reads images (a vision-language model): a gateway may send it pages' images
    /// as well as their text (HOROS' `POST /v1/answers`). Default false.
    pub vision: bool,
    /// The model's weights, where `template = "model"` reads its template: a `.gguf` (its
    /// `tokenizer.chat_template`) or a model directory (its `chat_template.jinja`,
    /// `chat_template.json` or `tokenizer_config.json`, the first the directory has). Not a key
    /// of the entry: whoever serves the model sets it ([`ModelManifest::with_weights`]; horos-ref
    /// from the `weights` of the pooled model of the same name).
    #[serde(skip)]
    pub weights: Option<PathBuf>,
}

/// The `template` that names the model's own chat template, read from its weights.
pub const MODEL_TEMPLATE: &str = "model";

impl ModelManifest {
    /// Whether the entry renders the model's own template (`template = "model"`), which needs
    /// its [`weights`](ModelManifest::weights).
    pub fn wants_model_template(&self) -> bool {
        self.template.as_deref() == Some(MODEL_TEMPLATE)
    }

    /// This entry with the model's weights (a `.gguf` or a model directory): with
    /// `template = "model"` its template is read from them when the manifest is resolved
    /// ([`Manifest::new`](crate::Manifest::new); an [`EntryError`](crate::EntryError) on
    /// `template` when they hold none). Any other template is kept: the weights are not read.
    pub fn with_weights(self, weights: &Path) -> Self {
        Self {
            weights: Some(weights.to_path_buf()),
            ..self
        }
    }
}
