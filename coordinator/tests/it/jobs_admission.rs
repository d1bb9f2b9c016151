//! An async job is admitted as a synchronous request is: a model its key may not call is
//! refused at submission with the synchronous call's 403; its run holds a place under its key's
//! concurrency, so a synchronous call meanwhile gets the same 429 it would get behind another
//! synchronous call, and a second job waits (a submission, which runs nothing, is let in); its
//! answer's tokens count against its key's tokens per minute, which then refuse a synchronous
//! call, a submission and a queued job's run alike.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream, VirtualKey};
use horos_fakeai::{FakeConfig, FakeServer};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A coordinator with the key `team` (secret `sk-team`, `limits`), a state file, `workers` job
/// workers and a job budget of `budget_s`, serving `m` and `other` from one fake upstream that
/// answers after `latency`.
async fn team(
    limits: VirtualKey,
    workers: usize,
    budget_s: f64,
    latency: Duration,
) -> (FakeServer, Coordinator, tempfile::TempDir) {
    let up = FakeServer::start(FakeConfig {
        latency,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sha: String = Sha256::digest(b"sk-team")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        keys: BTreeMap::from([(
            "team".to_owned(),
            VirtualKey {
                key_sha256: Some(sha),
                ..limits
            },
        )]),
        job_workers: workers,
        job_budget_s: budget_s,
        ..config()
    };
    let upstream = StaticUpstream::new()
        .with("m", up.url())
        .with("other", up.url());
    let c = start(cfg, Arc::new(upstream)).await;
    (up, c, dir)
}

async fn as_team(method: Method, url: &str, body: Option<&Value>) -> Answer {
    call(
        method,
        url,
        body.map(|b| serde_json::to_vec(b).unwrap()),
        &[("authorization", "Bearer sk-team")],
    )
    .await
}

async fn submit(base: &str, request: Value) -> Answer {
    let job = json!({"kind": "chat", "request": request});
    as_team(Method::POST, &format!("{base}/v1/jobs"), Some(&job)).await
}

async fn submitted(base: &str, request: Value) -> i64 {
    let a = submit(base, request).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text());
    a.json()["id"].as_i64().unwrap()
}

async fn job(base: &str, id: i64) -> Value {
    as_team(Method::GET, &format!("{base}/v1/jobs/{id}"), None)
        .await
        .json()
}

async fn ended(base: &str, id: i64) -> Value {
    wait_until("the job ended", || async {
        matches!(
            job(base, id).await["state"].as_str(),
            Some("succeeded" | "failed")
        )
    })
    .await;
    job(base, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_for_a_model_its_key_may_not_call_is_refused_at_submission_as_its_call_is() {
    let limits = VirtualKey {
        models: vec!["m".into()],
        ..VirtualKey::default()
    };
    let (up, c, _dir) = team(limits, 1, 60.0, Duration::ZERO).await;
    let base = c.url();
    let sync = as_team(
        Method::POST,
        &format!("{base}/v1/chat/completions"),
        Some(&chat("other", "x")),
    )
    .await;
    let queued = submit(&base, chat("other", "x")).await;
    for a in [&sync, &queued] {
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text());
        assert_eq!(a.json()["error"]["code"], "model_not_allowed");
    }
    assert_eq!(sync.json()["error"], queued.json()["error"]);
    // The model it may call is queued and run.
    let id = submitted(&base, chat("m", "allowed")).await;
    assert_eq!(ended(&base, id).await["state"], "succeeded");
    assert_eq!(
        up.requests().len(),
        1,
        "only the allowed job reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_holds_its_keys_place_as_a_synchronous_request_does() {
    let limits = VirtualKey {
        max_concurrency: Some(1),
        ..VirtualKey::default()
    };
    // Two workers: only the key's limit keeps the second job from running beside the first.
    let (up, c, _dir) = team(limits, 2, 60.0, Duration::from_millis(1500)).await;
    let base = c.url();
    let first = submitted(&base, chat("m", "first")).await;
    let second = submitted(&base, chat("m", "second")).await;
    wait_until("a job upstream", || async { up.requests().len() == 1 }).await;
    // The running job holds the key's one place: a synchronous call gets the 429 it would get
    // behind a synchronous call.
    let a = as_team(
        Method::POST,
        &format!("{base}/v1/chat/completions"),
        Some(&chat("m", "now")),
    )
    .await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text());
    assert_eq!(a.headers["retry-after"], "1");
    let e = &a.json()["error"];
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert!(
        e["message"].as_str().unwrap().contains("concurrency"),
        "{e}"
    );
    // A submission runs nothing: it is let in while the key's place is held.
    let third = submitted(&base, chat("m", "third")).await;
    // And the other jobs wait for it, without losing an attempt.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.requests().len(), 1, "two jobs of the key ran at once");
    for id in [first, second, third] {
        assert_eq!(ended(&base, id).await["state"], "succeeded");
    }
    assert_eq!(up.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_tokens_count_against_its_key_and_a_key_over_them_is_refused_alike() {
    let limits = VirtualKey {
        tpm: Some(5),
        ..VirtualKey::default()
    };
    // One worker, and a budget short enough that a job waiting a minute for tokens fails.
    let (up, c, _dir) = team(limits, 1, 3.0, Duration::from_millis(500)).await;
    let base = c.url();
    // Both submitted while the key has tokens; the first to run overdraws them (fakeai counts
    // ten prompt words), so the second is refused when it runs.
    let ten = "one two three four five six seven eight nine ten";
    let ids = [
        submitted(&base, chat("m", ten)).await,
        submitted(&base, chat("m", ten)).await,
    ];
    let mut states = Vec::new();
    for id in ids {
        states.push(ended(&base, id).await);
    }
    let failed: Vec<&Value> = states.iter().filter(|v| v["state"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{states:?}");
    let why = failed[0]["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("tokens-per-minute") && why.contains("job budget"),
        "{why}"
    );
    assert_eq!(
        up.requests().len(),
        1,
        "the refused job reached the upstream"
    );
    // Over its tokens, the key is refused alike: a synchronous call and a submission.
    let sync = as_team(
        Method::POST,
        &format!("{base}/v1/chat/completions"),
        Some(&chat("m", "x")),
    )
    .await;
    let queued = submit(&base, chat("m", "x")).await;
    for a in [&sync, &queued] {
        assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text());
        let e = &a.json()["error"];
        assert_eq!(e["code"], "rate_limit_exceeded");
        assert!(
            e["message"].as_str().unwrap().contains("tokens-per-minute"),
            "{e}"
        );
    }
}
