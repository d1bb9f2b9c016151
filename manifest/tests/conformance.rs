//! Conformance with the reference: real chat templates (`tests/fixtures/templates/`: SmolLM2's,
//! from its GGUF; Qwen2.5 with tools; Llama 3.1 and 3.2 with tools, `{% set %}`, `namespace` and
//! `strftime_now`; Mistral Nemo with `raise_exception`; Qwen3 and DeepSeek-R1 with thinking)
//! rendered over conversations (system, multi-turn, tools, thinking, a refused one) by this
//! crate and by Python's jinja2 configured as transformers' `apply_chat_template`
//! (`tests/jinja_reference.py`): the same bytes, or the same refusal.
//!
//! Needs the Python of `scripts/setup_py_e2e.sh` (with jinja2; `HOROS_PY_E2E_PYTHON` names
//! another): skips without it unless `HOROS_REQUIRE_PY_E2E=1`.

#![allow(clippy::unwrap_used)] // a test: a failed step is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use horos_manifest::{
    Attempt, Context, Endpoint, Manifest, ModelManifest, Payload, Template, TemplateError,
};
use serde_json::{Map, Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates")
}

/// Every fixture template: (file name, text).
fn templates() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(out.len() >= 7, "the fixtures are there: {out:?}");
    out
}

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city, now.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["city"]
            }
        }
    })
}

/// The conversations: (name, context).
fn conversations() -> Vec<(&'static str, Context)> {
    let chat = |messages: Vec<Value>| Context {
        messages,
        add_generation_prompt: true,
        bos_token: "<s>".to_owned(),
        eos_token: "</s>".to_owned(),
        ..Context::default()
    };
    let with = |mut c: Context, key: &str, v: Value| {
        c.extra.insert(key.to_owned(), v);
        c
    };
    let system = chat(vec![
        json!({"role": "system", "content": "You are brief. Answer in French."}),
        json!({"role": "user", "content": "What is the capital of Italy? Say \"é\" too."}),
    ]);
    let multi = chat(vec![
        json!({"role": "system", "content": "Be kind."}),
        json!({"role": "user", "content": "Hello!"}),
        json!({"role": "assistant", "content": "Hi! How can I help?"}),
        json!({"role": "user", "content": "  Count to three.\n"}),
    ]);
    let no_system = chat(vec![
        json!({"role": "user", "content": "2+2?"}),
        json!({"role": "assistant", "content": "4"}),
        json!({"role": "user", "content": "And 3+3?"}),
    ]);
    let mut finished = no_system.clone();
    finished.messages.truncate(2);
    finished.add_generation_prompt = false;
    let mut tools = chat(vec![
        json!({"role": "system", "content": "You may call tools."}),
        json!({"role": "user", "content": "Weather in Paris?"}),
        json!({"role": "assistant", "content": "", "tool_calls": [{
            "id": "call12345",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
        }]}),
        json!({"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}),
        json!({"role": "assistant", "content": "21 °C and clear."}),
        json!({"role": "user", "content": "Thanks. And Lyon?"}),
    ]);
    tools.tools = Some(vec![weather_tool()]);
    let mut tools_only = system.clone();
    tools_only.tools = Some(vec![weather_tool()]);
    let thinking = chat(vec![
        json!({"role": "user", "content": "Is 7 prime?"}),
        json!({"role": "assistant", "content": "<think>\n7 has no divisor but 1 and 7.\n</think>\n\nYes."}),
        json!({"role": "user", "content": "And 9?"}),
    ]);
    let alternating = chat(vec![
        json!({"role": "user", "content": "one"}),
        json!({"role": "user", "content": "two"}),
    ]);
    vec![
        ("system", system),
        ("multi-turn", multi.clone()),
        ("no-system", no_system),
        ("no-generation-prompt", finished),
        ("tools", tools),
        ("tools-declared", tools_only),
        ("thinking", thinking.clone()),
        (
            "thinking-on",
            with(thinking.clone(), "enable_thinking", json!(true)),
        ),
        (
            "thinking-off",
            with(thinking, "enable_thinking", json!(false)),
        ),
        (
            "thinking-off-multi",
            with(multi, "enable_thinking", json!(false)),
        ),
        ("user-user", alternating),
    ]
}

/// A render's result as the reference writes it.
fn outcome(r: Result<String, TemplateError>) -> Value {
    match r {
        Ok(text) => json!({"ok": text}),
        Err(TemplateError::Raised { message }) => json!({"raised": message}),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// The context as the variables transformers renders with.
fn variables(c: &Context) -> Value {
    let mut v: Map<String, Value> = c.extra.clone();
    v.insert("messages".into(), Value::Array(c.messages.clone()));
    v.insert(
        "tools".into(),
        c.tools.clone().map_or(Value::Null, Value::Array),
    );
    v.insert(
        "documents".into(),
        c.documents.clone().map_or(Value::Null, Value::Array),
    );
    v.insert(
        "add_generation_prompt".into(),
        Value::Bool(c.add_generation_prompt),
    );
    v.insert("bos_token".into(), Value::String(c.bos_token.clone()));
    v.insert("eos_token".into(), Value::String(c.eos_token.clone()));
    Value::Object(v)
}

/// The reference's results for `cases`, or `None` (skipped) without its Python.
fn reference(cases: &[Value]) -> Option<Vec<Value>> {
    let py = match horos_testkit::py_e2e_python("jinja2") {
        Ok(py) => py,
        Err(e) => {
            horos_testkit::skip_or_fail(
                "HOROS_REQUIRE_PY_E2E",
                &format!("no python with jinja2 (scripts/setup_py_e2e.sh): {e}"),
            );
            return None;
        }
    };
    let dir =
        std::env::temp_dir().join(format!("horos-manifest-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("cases.json");
    std::fs::write(&input, serde_json::to_vec(cases).unwrap()).unwrap();
    let mut cmd = Command::new(py);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jinja_reference.py"))
        .arg(&input)
        // strftime_now: Python's local time, this crate's UTC.
        .env("TZ", "UTC");
    let ran = horos_testkit::run_limited(cmd, Duration::from_secs(120)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ran.code, Some(0), "the reference failed: {}", ran.stderr);
    Some(serde_json::from_str(&ran.stdout).unwrap())
}

#[test]
fn real_templates_render_as_transformers_renders_them() {
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    let mut names = Vec::new();
    for (file, text) in templates() {
        let t = Template::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for (name, ctx) in conversations() {
            cases.push(json!({"template": text, "context": variables(&ctx)}));
            ours.push(outcome(t.render(&ctx, 1 << 20)));
            names.push(format!("{file} × {name}"));
        }
    }
    let Some(theirs) = reference(&cases) else {
        return;
    };
    assert_eq!(theirs.len(), ours.len());
    let mut rendered = 0;
    let mut raised = 0;
    let mut failures = Vec::new();
    for ((name, ours), theirs) in names.iter().zip(&ours).zip(&theirs) {
        match (ours.get("error"), theirs.get("error")) {
            // Both fail to render (an attribute of an undefined value, …): the messages differ
            // between the engines.
            (Some(_), Some(_)) => {}
            _ if ours == theirs => {
                rendered += usize::from(ours.get("ok").is_some());
                raised += usize::from(ours.get("raised").is_some());
            }
            _ => failures.push(format!("{name}:\n  ours:   {ours}\n  theirs: {theirs}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        ours.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} cases: {rendered} rendered byte for byte as transformers does, {raised} refused \
         alike",
        ours.len()
    );
    // The comparison compared something: most cases render, some are refused.
    assert!(
        rendered >= ours.len() * 2 / 3,
        "{rendered} of {}",
        ours.len()
    );
    assert!(raised >= 1, "Mistral refuses two user turns in a row");
}

#[test]
fn a_models_own_template_is_read_from_its_gguf() {
    let Ok(gguf) = std::env::var("HOROS_SMOLLM2_GGUF") else {
        horos_testkit::skip_or_fail(
            "HOROS_REQUIRE_LLAMA",
            "no SmolLM2 GGUF (scripts/setup_llama.sh, then source its env file)",
        );
        return;
    };
    // Named as a template file, or as the model's own (`template = "model"`) from its weights.
    let as_file = ModelManifest {
        template_file: Some(PathBuf::from(&gguf)),
        ..ModelManifest::default()
    };
    let as_model = ModelManifest {
        template: Some(horos_manifest::MODEL_TEMPLATE.to_owned()),
        ..ModelManifest::default()
    }
    .with_weights(Path::new(&gguf));
    for entry in [as_file, as_model] {
        let manifest = Manifest::new(&BTreeMap::from([("smollm2".to_owned(), entry)])).unwrap();
        let Value::Object(body) = json!({"model": "smollm2", "messages": [
            {"role": "user", "content": "Hi"}
        ]}) else {
            unreachable!("a JSON object literal");
        };
        let attempt = Attempt {
            model: "smollm2",
            endpoint: Endpoint::CHAT,
            thinking: None,
            template: None,
            id: 1,
        };
        let shaped = manifest.shape(&attempt, &body).unwrap();
        let Payload::Rendered(bytes) = shaped.payload else {
            panic!("a chat through the model's own template is rendered");
        };
        let sent: Value = serde_json::from_slice(&bytes).unwrap();
        // The GGUF's template is the fixture's (taken from that GGUF).
        assert_eq!(
            sent["prompt"],
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
