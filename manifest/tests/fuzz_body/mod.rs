//! The body of the fuzz target `template_parse` (`fuzz/fuzz_targets/template_parse.rs`, nightly
//! and cargo-fuzz), also run on stable by the property test `the_fuzz_body_holds_on_any_input`
//! (`tests/properties.rs`): one body, two drivers.

use std::collections::BTreeMap;

use horos_manifest::Template;
use horos_manifest::template::{Context, TValue};

/// Longest text the body renders a parsed template to.
const MAX_RENDER: usize = 4096;

/// Parses `data` as a template: never a panic; an error names a place inside the text and says
/// what is wrong; a template that parses renders within its bound. The context has one message,
/// so that nested loops cost what the template's length costs (loops over a long conversation
/// multiply: a bound on the configured template, not on this body).
pub fn check(data: &[u8]) {
    let src = String::from_utf8_lossy(data);
    match Template::parse(&src) {
        Ok(t) => {
            if let Some(out) = t.render(&context(), MAX_RENDER) {
                assert!(out.len() <= MAX_RENDER, "rendered past its bound");
            }
        }
        Err(e) => {
            assert!(e.at <= src.len(), "error at {} past the text's end", e.at);
            assert!(!e.message.is_empty(), "an error says what is wrong");
        }
    }
}

fn context() -> Context {
    let message = TValue::Map(BTreeMap::from([
        ("role".to_owned(), TValue::Str("user".to_owned())),
        ("content".to_owned(), TValue::Str(" hé ".to_owned())),
    ]));
    BTreeMap::from([
        ("messages".to_owned(), TValue::List(vec![message])),
        ("add_generation_prompt".to_owned(), TValue::Bool(true)),
        ("thinking".to_owned(), TValue::Bool(true)),
        ("bos_token".to_owned(), TValue::Str("<s>".to_owned())),
    ])
}
