//! The client's JSON work per chat call, timed alone: encoding the benchmark's request (with
//! `serde_json`, and with the client's own encoder, `ChatRequest::to_json`), decoding its answer
//! into a `ChatResponse` (with `serde_json` after one UTF-8 check of the body, `from_str`; with the
//! client's decoder, `ChatResponse::from_json`; and with `from_slice`), a stream event's chunk both
//! ways, and, for comparison, parsing the answer into a `serde_json::Value` or skipping it.
//!
//! `cargo run --release -p horos-vllm-client --example bench_json [-- ITERATIONS [CASE]]` (default
//! 300 000; two passes, the second is the one to read). A second argument times only the cases whose
//! name contains it, e.g. `-- 20000 from_json` under `valgrind --tool=callgrind` for instruction
//! counts (run it with two iteration counts and divide the difference).

use std::hint::black_box;
use std::time::Instant;

use horos_vllm_client::{ChatChunk, ChatMessage, ChatRequest, ChatResponse};

/// The answer `bench_client`'s server sends.
const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21},"system_fingerprint":"bench"}"#;

/// A stream event's data as vLLM sends it (one per generated token).
const CHUNK: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":" today"},"logprobs":null,"finish_reason":null}]}"#;

type BoxError = Box<dyn std::error::Error>;

fn time(
    only: Option<&str>,
    name: &str,
    n: usize,
    mut f: impl FnMut() -> Result<(), BoxError>,
) -> Result<(), BoxError> {
    if only.is_some_and(|o| !name.contains(o)) {
        return Ok(());
    }
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
    let only = std::env::args().nth(2);
    let only = only.as_deref();
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
        time(only, "encode request (to_vec)", n, || {
            black_box(serde_json::to_vec(black_box(&request))?);
            Ok(())
        })?;
        time(only, "encode request (sized buffer)", n, || {
            let mut buf = Vec::with_capacity(1024);
            serde_json::to_writer(&mut buf, black_box(&request))?;
            black_box(buf);
            Ok(())
        })?;
        time(only, "encode request (client, to_json)", n, || {
            black_box(black_box(&request).to_json()?);
            Ok(())
        })?;
        time(only, "decode ChatResponse (from_str)", n, || {
            let text = std::str::from_utf8(black_box(answer))?;
            black_box(serde_json::from_str::<ChatResponse>(text)?);
            Ok(())
        })?;
        time(only, "decode ChatResponse (from_json)", n, || {
            black_box(ChatResponse::from_json(black_box(answer))?);
            Ok(())
        })?;
        time(only, "decode ChatResponse (from_slice)", n, || {
            black_box(serde_json::from_slice::<ChatResponse>(black_box(answer))?);
            Ok(())
        })?;
        time(only, "decode ChatChunk (from_str)", n, || {
            black_box(serde_json::from_str::<ChatChunk>(black_box(CHUNK))?);
            Ok(())
        })?;
        time(only, "decode ChatChunk (from_json)", n, || {
            black_box(ChatChunk::from_json(black_box(CHUNK.as_bytes()))?);
            Ok(())
        })?;
        time(only, "parse serde_json::Value", n, || {
            black_box(serde_json::from_slice::<serde_json::Value>(black_box(
                answer,
            ))?);
            Ok(())
        })?;
        time(only, "skip (IgnoredAny)", n, || {
            black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(
                answer,
            ))?);
            Ok(())
        })?;
    }
    Ok(())
}
