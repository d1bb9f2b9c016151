//! What reshaping a streamed answer costs the gateway: a chat answer of 2,000 events (reasoning
//! between `<think>` tags, then the answer), arriving in 128-byte pieces, through
//! `Reshaper::split_chat` (reasoning moved to `reasoning_content`) and through
//! `Reshaper::text_to_chat` (a llama-server `/completion` stream made a chat stream).
//!
//! `cargo bench -p horos-manifest --bench reshape_stream`

#![allow(missing_docs, clippy::unwrap_used)] // a bench: a failed step is a failed run

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use horos_manifest::{CompletionApi, Reshaper};
use serde_json::json;

const EVENTS: usize = 2000;

fn token(i: usize) -> String {
    match i {
        0 => "<think>".to_owned(),
        1000 => "</think>".to_owned(),
        _ => format!(" word{}", i % 97),
    }
}

fn chat_stream() -> Vec<u8> {
    let mut s = String::new();
    for i in 0..EVENTS {
        let finish = if i + 1 == EVENTS {
            json!("stop")
        } else {
            json!(null)
        };
        let ev = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": token(i)}, "finish_reason": finish}]});
        s.push_str(&format!("data: {ev}\n\n"));
    }
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn llama_stream() -> Vec<u8> {
    let mut s = String::new();
    for i in 0..EVENTS {
        let ev = json!({"content": token(i), "stop": i + 1 == EVENTS, "tokens_predicted": i});
        s.push_str(&format!("data: {ev}\n\n"));
    }
    s.into_bytes()
}

fn run(mut r: Reshaper, stream: &[u8]) -> usize {
    let mut n = 0;
    for piece in stream.chunks(128) {
        n += black_box(r.push(piece)).len();
    }
    n + r.finish().len()
}

fn reshape(c: &mut Criterion) {
    let tags = ["<think>".to_owned(), "</think>".to_owned()];
    let chat = chat_stream();
    let llama = llama_stream();
    let mut g = c.benchmark_group("reshape_stream");
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.bench_function("split_chat_2000_events", |b| {
        b.iter(|| run(Reshaper::split_chat(true, &tags, false), &chat))
    });
    g.bench_function("llama_to_chat_2000_events", |b| {
        b.iter(|| {
            run(
                Reshaper::text_to_chat(CompletionApi::Llama, true, "m", 1, Some((&tags, false))),
                &llama,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, reshape);
criterion_main!(benches);
