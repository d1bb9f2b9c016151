//! The body of the fuzz target `template_parse` (`fuzz/fuzz_targets/template_parse.rs`, nightly
//! and cargo-fuzz), also run on stable by the property test `the_fuzz_body_holds_on_any_input`
//! (`tests/properties.rs`): one body, two drivers.

use horos_manifest::{Context, Template, TemplateError};
use serde_json::{Map, Value, json};

/// Longest text the body renders a parsed template to.
const MAX_RENDER: usize = 4096;

/// Parses `data` as a template: never a panic; a syntax error names a place inside the text and
/// says what is wrong; a template that parses renders within its bound of text (and of fuel), or
/// fails with a typed error.
pub fn check(data: &[u8]) {
    let src = String::from_utf8_lossy(data);
    match Template::parse(&src) {
        Ok(t) => match t.render(&context(), MAX_RENDER) {
            Ok(out) => assert!(out.len() <= MAX_RENDER, "rendered past its bound"),
            Err(e) => assert!(!e.to_string().is_empty(), "an error says what is wrong"),
        },
        Err(TemplateError::Syntax { line, message, .. }) => {
            if let Some(line) = line {
                assert!(
                    line <= src.lines().count() + 1,
                    "error on line {line} past the end"
                );
            }
            assert!(!message.is_empty(), "an error says what is wrong");
        }
        Err(e) => panic!("parsing fails with a syntax error only, not {e:?}"),
    }
}

fn context() -> Context {
    Context {
        messages: vec![json!({"role": "user", "content": " hé "})],
        add_generation_prompt: true,
        bos_token: "<s>".to_owned(),
        extra: Map::from_iter([("thinking".to_owned(), Value::Bool(true))]),
        ..Context::default()
    }
}
