//! What a templated chat costs the gateway: `Manifest::shape` rendering a 10-message
//! conversation through the built-in ChatML template into a completion request (the template
//! parsed once, when the manifest is built; each request renders it).
//!
//! `cargo bench -p horos-manifest --bench shape`

#![allow(missing_docs, clippy::unwrap_used)] // a bench: a failed step is a failed run

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use horos_manifest::{Attempt, Endpoint, Manifest, ModelManifest};
use serde_json::{Map, Value, json};

fn chat() -> Map<String, Value> {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a helpful assistant. Be brief."})];
    for i in 0..9 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({
            "role": role,
            "content": format!("Message {i}: what is the capital of France, and why is it Paris? ")
                .repeat(3),
        }));
    }
    let Value::Object(body) = json!({"model": "m", "max_tokens": 64, "messages": messages}) else {
        unreachable!("a JSON object literal");
    };
    body
}

fn shape(c: &mut Criterion) {
    let entry = ModelManifest {
        template: Some("chatml".into()),
        ..ModelManifest::default()
    };
    let manifest = Manifest::new(&BTreeMap::from([("m".to_owned(), entry)])).unwrap();
    let body = chat();
    let attempt = Attempt {
        model: "m",
        endpoint: Endpoint::CHAT,
        thinking: None,
        template: None,
        id: 1,
    };
    c.bench_function("shape_chatml_10_messages", |b| {
        b.iter(|| {
            black_box(
                manifest
                    .shape(black_box(&attempt), black_box(&body))
                    .unwrap(),
            )
        })
    });
}

criterion_group!(benches, shape);
criterion_main!(benches);
