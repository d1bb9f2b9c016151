//! Async jobs for an operator: the list with its filters, cancel of a queued job (it never
//! runs) and of a running one (abandoned, its answer discarded, the next job goes on), and
//! results kept for `job_result_retention_s`.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{CoordinatorConfig, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer};
use http::{Method, StatusCode};
use serde_json::{Value, json};

const KEY: &str = "ops";

async fn admin(method: Method, url: &str) -> Answer {
    call(method, url, None, &[("authorization", "Bearer ops")]).await
}

async fn submit(base: &str, client: &str, text: &str) -> i64 {
    let a = post(
        &format!("{base}/v1/jobs"),
        &json!({"kind": "chat", "request": {"model": "m", "x_client_id": client,
            "messages": [{"role": "user", "content": text}]}}),
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text());
    a.json()["id"].as_i64().unwrap()
}

async fn job(base: &str, id: i64) -> Value {
    get(&format!("{base}/v1/jobs/{id}")).await.json()
}

async fn ids(base: &str, query: &str) -> Vec<i64> {
    let a = admin(Method::GET, &format!("{base}/api/v1/jobs{query}")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    a.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_and_cancels_queued_and_running_jobs() {
    let up = FakeServer::start(FakeConfig {
        latency: Duration::from_millis(1500),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_workers: 1,
        api_key: Some(KEY.into()),
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();

    let first = submit(&base, "alice", "first").await;
    wait_until("the first job running", || async {
        job(&base, first).await["state"] == "running"
    })
    .await;
    let second = submit(&base, "bob", "second").await;
    let third = submit(&base, "alice", "third").await;

    // The list, newest first, and its filters; behind the admin key.
    assert_eq!(ids(&base, "").await, [third, second, first]);
    assert_eq!(ids(&base, "?client=alice").await, [third, first]);
    assert_eq!(ids(&base, "?state=running").await, [first]);
    assert_eq!(ids(&base, "?state=queued&model=m").await, [third, second]);
    assert_eq!(ids(&base, "?kind=embeddings").await, Vec::<i64>::new());
    assert_eq!(
        get(&format!("{base}/api/v1/jobs")).await.status,
        StatusCode::UNAUTHORIZED
    );
    let a = admin(Method::GET, &format!("{base}/api/v1/jobs?state=lost")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);

    // A queued job, cancelled, never runs.
    let a = admin(Method::POST, &format!("{base}/api/v1/jobs/{second}/cancel")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["was"], "queued");
    assert_eq!(job(&base, second).await["state"], "cancelled");

    // The running one, cancelled (through the data plane's route): abandoned, and its answer,
    // when the upstream sends it, discarded.
    let a = post(&format!("{base}/v1/jobs/{first}/cancel"), &json!({})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["was"], "running");
    assert_eq!(job(&base, first).await["state"], "cancelled");

    // The worker goes on with the next job.
    wait_until("the third job done", || async {
        job(&base, third).await["state"] == "succeeded"
    })
    .await;
    let v = job(&base, first).await;
    assert_eq!(v["state"], "cancelled", "{v}");
    assert!(v.get("result").is_none(), "{v}");
    let prompts: Vec<String> = up.requests().into_iter().map(|r| r.body).collect();
    assert!(
        !prompts.iter().any(|b| b.contains("second")),
        "a cancelled queued job ran: {prompts:?}"
    );
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert_eq!(ids(&base, "?state=cancelled").await, [second, first]);
    assert_eq!(ids(&base, "?state=succeeded").await, [third]);

    // Finished: a cancel changes nothing; an unknown job is a 404.
    let a = admin(Method::POST, &format!("{base}/api/v1/jobs/{third}/cancel")).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.text());
    assert_eq!(job(&base, third).await["state"], "succeeded");
    let a = admin(Method::POST, &format!("{base}/api/v1/jobs/987654/cancel")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);

    // One job through the admin API: the data plane's answer, behind the admin key.
    let a = admin(Method::GET, &format!("{base}/api/v1/jobs/{third}")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json(), job(&base, third).await);
    assert_eq!(
        get(&format!("{base}/api/v1/jobs/{third}")).await.status,
        StatusCode::UNAUTHORIZED
    );
    for missing in ["987654", "x"] {
        let a = admin(Method::GET, &format!("{base}/api/v1/jobs/{missing}")).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{missing}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_are_kept_for_the_retention_time_then_deleted() {
    let up = FakeServer::start(FakeConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        job_result_retention_s: 2.0,
        api_key: Some(KEY.into()),
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    let id = submit(&base, "alice", "kept a while").await;
    wait_until("the job done", || async {
        job(&base, id).await["state"] == "succeeded"
    })
    .await;
    assert!(job(&base, id).await["result"].is_object());
    assert_eq!(ids(&base, "").await, [id]);
    wait_until("the result deleted", || async {
        ids(&base, "").await.is_empty() && job(&base, id).await.get("result").is_none()
    })
    .await;
}
