//! The client's JSON work per chat call, timed alone: encoding the benchmark's request, decoding
//! its answer into a `ChatResponse` (the client's way: one UTF-8 check, then `from_str`; and with
//! `from_slice`), and, for comparison, parsing the answer into a `serde_json::Value` or skipping it.
//!
//! `cargo run --release -p horos-vllm-client --example bench_json [-- ITERATIONS]` (default 300 000;
//! two passes, the second is the one to read).

use std::hint::black_box;
use std::time::Instant;

use horos_vllm_client::{ChatMessage, ChatRequest, ChatResponse};

/// The answer `bench_client`'s server sends.
const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21},"system_fingerprint":"bench"}"#;

type BoxError = Box<dyn std::error::Error>;

fn time(name: &str, n: usize, mut f: impl FnMut() -> Result<(), BoxError>) -> Result<(), BoxError> {
    for _ in 0..n / 10 {
        f()?;
    }
    let start = Instant::now();
    for _ in 0..n {
        f()?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{name:>32}: {us:.3} µs");
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(300_000);
    let request = ChatRequest::new(
        "bench",
        vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user("Say hello."),
        ],
    )
    .max_tokens(16);
    let answer = ANSWER.as_bytes();
    for pass in 1..=2 {
        println!("pass {pass}, {n} iterations, answer {} bytes", answer.len());
        time("encode request (to_vec)", n, || {
            black_box(serde_json::to_vec(black_box(&request))?);
            Ok(())
        })?;
        time("encode request (sized buffer)", n, || {
            let mut buf = Vec::with_capacity(1024);
            serde_json::to_writer(&mut buf, black_box(&request))?;
            black_box(buf);
            Ok(())
        })?;
        time("decode ChatResponse (client)", n, || {
            let text = std::str::from_utf8(black_box(answer))?;
            black_box(serde_json::from_str::<ChatResponse>(text)?);
            Ok(())
        })?;
        time("decode ChatResponse (from_slice)", n, || {
            black_box(serde_json::from_slice::<ChatResponse>(black_box(answer))?);
            Ok(())
        })?;
        time("parse serde_json::Value", n, || {
            black_box(serde_json::from_slice::<serde_json::Value>(black_box(
                answer,
            ))?);
            Ok(())
        })?;
        time("skip (IgnoredAny)", n, || {
            black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(
                answer,
            ))?);
            Ok(())
        })?;
    }
    Ok(())
}
