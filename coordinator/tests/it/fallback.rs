//! Fallback and retry over real HTTP, with fakeai's faults: a refused connection, 503, 429 with
//! `Retry-After`, a stall before the first byte, a crash mid-stream. Each attempt shows in the
//! decision log and in `/metrics`.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use bytes::Bytes;
use horos_coordinator::{CoordinatorConfig, StaticUpstream, TaskSpec};
use horos_fakeai::{FakeConfig, FakeServer, Fault};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

async fn fake() -> FakeServer {
    FakeServer::start(FakeConfig {
        reply: horos_fakeai::Reply::Fixed("from the fake".into()),
        ..FakeConfig::default()
    })
    .await
    .expect("fake upstream")
}

/// A port where nothing listens.
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

fn with_task(mut cfg: CoordinatorConfig, ladder: &[&str]) -> CoordinatorConfig {
    cfg.tasks.insert(
        "t".into(),
        TaskSpec {
            models: ladder.iter().map(|m| m.to_string()).collect(),
            ..TaskSpec::default()
        },
    );
    cfg
}

async fn decisions(url: &str) -> Vec<Value> {
    let a = get(&format!("{url}/api/v1/status")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    a.json()["decisions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn metrics(url: &str) -> String {
    get(&format!("{url}/metrics")).await.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_rung_falls_back_to_the_next_and_says_so() {
    let b = fake().await;
    let cfg = with_task(config(), &["a", "b"]);
    let up = StaticUpstream::new()
        .with("a", dead_url())
        .with("b", b.url());
    let c = start(cfg, Arc::new(up)).await;
    let a = post(
        &format!("{}/v1/chat/completions", c.url()),
        &chat("task:t", "hi"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "from the fake"
    );
    let sent: Value = serde_json::from_str(&b.requests()[0].body).unwrap();
    assert_eq!(sent["model"], "b", "the body names the rung that serves");

    wait_until("the fallback in the decision log", || async {
        decisions(&c.url()).await.iter().any(|d| {
            d["action"] == "fallback"
                && d["model"] == "b"
                && d["reason"].as_str().unwrap_or("").contains("a failed")
        })
    })
    .await;
    let m = metrics(&c.url()).await;
    assert_eq!(
        metric(&m, "horos_coordinator_fallbacks_total{model=\"a\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_attempt_failures_total{model=\"a\",reason=\"connect\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_requests_total{route=\"chat\",model=\"b\",status=\"2xx\"}"
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_on_the_same_model_after_a_back_off() {
    let up = fake().await;
    up.set_fault(Fault::Status(503), Some(2));
    let cfg = CoordinatorConfig {
        retry_backoff_s: 0.05,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let a = post(&format!("{}/v1/chat/completions", c.url()), &chat("m", "x")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(up.requests().len(), 3, "two failures, then the answer");
    let m = metrics(&c.url()).await;
    assert_eq!(
        metric(&m, "horos_coordinator_retries_total{model=\"m\"}"),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_attempt_failures_total{model=\"m\",reason=\"status_5xx\"}"
        ),
        Some(2.0)
    );
    wait_until("the retries in the decision log", || async {
        decisions(&c.url())
            .await
            .iter()
            .filter(|d| d["action"] == "retry")
            .count()
            == 2
    })
    .await;

    // Attempts are bounded: the last failure is passed through as the upstream gave it.
    up.set_fault(Fault::Status(503), Some(3));
    let a = post(&format!("{}/v1/chat/completions", c.url()), &chat("m", "y")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.json()["error"]["message"], "injected error");
    assert_eq!(up.requests().len(), 6);

    // With one attempt, nothing is retried.
    let c1 = start(
        CoordinatorConfig {
            max_attempts: 1,
            ..config()
        },
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .await;
    up.set_fault(Fault::Status(500), Some(1));
    let a = post(
        &format!("{}/v1/chat/completions", c1.url()),
        &chat("m", "z"),
    )
    .await;
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(up.requests().len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_after_its_retry_after_or_passed_back_when_that_is_too_late() {
    let up = fake().await;
    let cfg = CoordinatorConfig {
        retry_backoff_s: 0.01,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let url = format!("{}/v1/chat/completions", c.url());

    up.set_fault(Fault::RateLimited(1), Some(1));
    let t = Instant::now();
    let a = post(&url, &chat("m", "x")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "retried before the upstream's Retry-After: {:?}",
        t.elapsed()
    );
    assert_eq!(up.requests().len(), 2);

    // A Retry-After beyond the request's budget: the 429 goes back at once, with its header,
    // for the client to decide.
    up.set_fault(Fault::RateLimited(30), Some(1));
    let mut body = chat("m", "y");
    body["x_timeout_s"] = json!(5);
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.headers["retry-after"], "30");
    assert_eq!(up.requests().len(), 3);
    let m = metrics(&c.url()).await;
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_attempt_failures_total{model=\"m\",reason=\"status_429\"}"
        ),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_or_no_first_chunk_in_time_falls_back() {
    let (a, b) = (fake().await, fake().await);
    let cfg = CoordinatorConfig {
        upstream_timeout_s: 0.5,
        ..with_task(config(), &["a", "b"])
    };
    let up = StaticUpstream::new().with("a", a.url()).with("b", b.url());
    let c = start(cfg, Arc::new(up)).await;
    let url = format!("{}/v1/chat/completions", c.url());

    // No response headers at all.
    a.set_fault(Fault::Hang, Some(1));
    let r = post(&url, &chat("task:t", "x")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));

    // Headers, then silence before the first chunk of a stream.
    a.set_fault(Fault::StallMidStream(0), Some(1));
    let mut body = chat("task:t", "y");
    body["stream"] = json!(true);
    let r = post(&url, &body).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text().contains("\"fake\""), "{}", r.text());
    assert!(
        r.text().trim_end().ends_with("data: [DONE]"),
        "{}",
        r.text()
    );
    assert_eq!((a.requests().len(), b.requests().len()), (2, 2));

    let m = metrics(&c.url()).await;
    for reason in ["timeout", "first_byte"] {
        assert_eq!(
            metric(
                &m,
                &format!(
                    "horos_coordinator_attempt_failures_total{{model=\"a\",reason=\"{reason}\"}}"
                )
            ),
            Some(1.0),
            "{reason}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_falls_back_before_its_first_chunk_and_is_never_replayed_after() {
    let (a, b) = (fake().await, fake().await);
    let cfg = with_task(config(), &["a", "b"]);
    let up = StaticUpstream::new().with("a", a.url()).with("b", b.url());
    let c = start(cfg, Arc::new(up)).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let mut body = chat("task:t", "one two three four");
    body["stream"] = json!(true);

    // The upstream dies after its headers, before any chunk: the next rung answers.
    a.set_fault(Fault::DropMidStream(0), Some(1));
    let r = post(&url, &body).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.text().trim_end().ends_with("data: [DONE]"),
        "{}",
        r.text()
    );
    assert_eq!(b.requests().len(), 1);

    // It dies after two chunks: the client has them and sees the break; nothing is replayed.
    a.set_fault(Fault::DropMidStream(2), Some(1));
    let req = Request::builder()
        .method(Method::POST)
        .uri(&url)
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let resp = http().request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut got = String::new();
    let mut body = resp.into_body();
    let broke = loop {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    got.push_str(&String::from_utf8_lossy(&d));
                }
            }
            Some(Err(_)) => break true,
            None => break false,
        }
    };
    assert!(broke, "a cut stream must not look complete: {got}");
    assert_eq!(got.matches("data: {").count(), 2, "{got}");
    assert!(!got.contains("[DONE]"));
    assert_eq!(b.requests().len(), 1, "a started answer is never replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_routed_like_chat() {
    let up = fake().await;
    let c = start(
        config(),
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .await;
    let a = post(
        &format!("{}/v1/completions", c.url()),
        &json!({"model": "m", "prompt": "Once upon", "max_tokens": 4, "x_client_id": "c"}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["object"], "text_completion");
    assert_eq!(a.json()["choices"][0]["text"], "from the fake");
    let rec = up.requests();
    assert_eq!(rec[0].path, "/v1/completions");
    let sent: Value = serde_json::from_str(&rec[0].body).unwrap();
    assert!(sent.get("x_client_id").is_none());
    let m = metrics(&c.url()).await;
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_requests_total{route=\"completions\",model=\"m\",status=\"2xx\"}"
        ),
        Some(1.0)
    );
    let a = call(
        Method::GET,
        &format!("{}/v1/completions", c.url()),
        None,
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
}
