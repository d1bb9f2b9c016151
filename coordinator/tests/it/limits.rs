//! Virtual keys and limits over real HTTP: keys required and checked, allowed models, a
//! concurrency limit, requests and tokens per minute, `x_client_id` limits for callers without
//! keys — each refusal a 429 with `Retry-After` in OpenAI's error format — and usage per caller
//! and model in `/metrics`, the admin API and the state file.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{CoordinatorConfig, Limits, StaticUpstream, VirtualKey};
use horos_fakeai::{FakeConfig, FakeServer};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A variable every test process has, standing in for a key's (tests never write the
/// environment).
const TEAM_KEY_VAR: &str = "PATH";

async fn chat_as(url: &str, key: Option<&str>, body: &Value) -> Answer {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    call(
        Method::POST,
        &format!("{url}/v1/chat/completions"),
        Some(serde_json::to_vec(body).unwrap()),
        &headers,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_required_checked_and_limited_and_usage_is_counted_per_key() {
    let up = FakeServer::start(FakeConfig {
        latency: Duration::from_millis(600),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ops_sha: String = Sha256::digest(b"sk-ops")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cfg = CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        keys: BTreeMap::from([
            (
                "team".to_owned(),
                VirtualKey {
                    key_env: Some(TEAM_KEY_VAR.into()),
                    models: vec!["m".into()],
                    max_concurrency: Some(1),
                    ..VirtualKey::default()
                },
            ),
            (
                "ops".to_owned(),
                VirtualKey {
                    key_sha256: Some(ops_sha),
                    rpm: Some(2),
                    ..VirtualKey::default()
                },
            ),
        ]),
        ..config()
    };
    let c = start(
        cfg,
        Arc::new(
            StaticUpstream::new()
                .with("m", up.url())
                .with("other", up.url()),
        ),
    )
    .await;
    let base = c.url();
    let team = std::env::var(TEAM_KEY_VAR).unwrap();
    let hello = chat("m", "one two three");

    // No key, a wrong key: 401; nothing reaches the upstream.
    let a = chat_as(&base, None, &hello).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], "missing_api_key");
    let a = chat_as(&base, Some("sk-nope"), &hello).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(a.json()["error"]["code"], "invalid_api_key");
    // A model the key may not call: 403.
    let a = chat_as(&base, Some(&team), &chat("other", "x")).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], "model_not_allowed");
    assert!(up.requests().is_empty());

    // One request at a time for the team: the second, while the first runs, is a 429.
    let first = {
        let (b, k, h) = (base.clone(), team.clone(), hello.clone());
        tokio::spawn(async move { chat_as(&b, Some(&k), &h).await })
    };
    wait_until("the first call upstream", || async {
        up.requests().len() == 1
    })
    .await;
    let a = chat_as(&base, Some(&team), &hello).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text());
    assert_eq!(a.headers["retry-after"], "1");
    let e = &a.json()["error"];
    assert_eq!(e["type"], "rate_limit_error");
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert!(
        e["message"].as_str().unwrap().contains("concurrency"),
        "{e}"
    );
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    // Its place came back.
    assert_eq!(
        chat_as(&base, Some(&team), &hello).await.status,
        StatusCode::OK
    );

    // Two requests a minute for ops.
    up.set_latency(Duration::ZERO);
    for _ in 0..2 {
        let a = chat_as(&base, Some("sk-ops"), &chat("other", "a b")).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    }
    let a = chat_as(&base, Some("sk-ops"), &chat("other", "a b")).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((29..=30).contains(&wait), "{wait}");

    // Usage per key and model, from the upstream's own `usage`: fakeai counts words.
    let m = get(&format!("{base}/metrics")).await.text();
    let series = |caller: &str, model: &str, kind: &str| {
        metric(
            &m,
            &format!(
                "horos_coordinator_usage_tokens_total{{caller=\"{caller}\",model=\"{model}\",kind=\"{kind}\"}}"
            ),
        )
    };
    assert_eq!(series("key:team", "m", "prompt"), Some(6.0), "{m}");
    assert!(series("key:team", "m", "completion").unwrap() > 0.0);
    assert_eq!(series("key:ops", "other", "prompt"), Some(4.0));
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_usage_requests_total{caller=\"key:team\",model=\"m\"}"
        ),
        Some(2.0)
    );
    for caller in ["key:team", "key:ops"] {
        assert_eq!(
            metric(
                &m,
                &format!("horos_coordinator_rate_limited_total{{caller=\"{caller}\"}}")
            ),
            Some(1.0),
            "{caller}"
        );
    }
    let status = get(&format!("{base}/status")).await.text();
    assert!(
        status.contains("Usage since start") && status.contains("key:team"),
        "{status}"
    );

    // And in the state file, by day.
    wait_until("usage saved", || async {
        let v = get(&format!("{base}/api/v1/usage")).await.json();
        v["by_day"].as_array().is_some_and(|rows| {
            rows.iter()
                .any(|r| r["caller"] == "key:team" && r["model"] == "m" && r["prompt_tokens"] == 6)
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_without_keys_are_limited_by_their_client_id() {
    let up = FakeServer::start(FakeConfig::default()).await.unwrap();
    let cfg = CoordinatorConfig {
        clients: BTreeMap::from([
            (
                "batch".to_owned(),
                Limits {
                    rpm: Some(1),
                    ..Limits::default()
                },
            ),
            (
                "bulk".to_owned(),
                Limits {
                    tpm: Some(5),
                    ..Limits::default()
                },
            ),
        ]),
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    let as_client = |id: &str, text: &str| {
        let mut b = chat("m", text);
        b["x_client_id"] = json!(id);
        b
    };
    // No keys configured: no key needed (an OpenAI client always sends one; it is ignored).
    assert_eq!(
        chat_as(&base, Some("anything"), &as_client("batch", "x"))
            .await
            .status,
        StatusCode::OK
    );
    let a = chat_as(&base, None, &as_client("batch", "x")).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.headers["retry-after"], "60");
    // Another client, and a caller without an id, are not limited.
    for id in ["other", "other"] {
        assert_eq!(
            chat_as(&base, None, &as_client(id, "x")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(
        chat_as(&base, None, &chat("m", "x")).await.status,
        StatusCode::OK
    );
    // Five tokens a minute: a ten-word prompt overdraws, the next call waits.
    let a = chat_as(
        &base,
        None,
        &as_client("bulk", "one two three four five six seven eight nine ten"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let a = chat_as(&base, None, &as_client("bulk", "again")).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text());
    assert!(
        a.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens-per-minute")
    );
}

/// A job runs as the key that submitted it: when that key is gone by the time the job runs
/// (the coordinator restarted without it), the job fails 401 and nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_key_was_removed_before_it_ran_does_not_run() {
    let up = FakeServer::start(FakeConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = |name: &str| {
        (
            name.to_owned(),
            VirtualKey {
                key_env: Some(TEAM_KEY_VAR.into()),
                ..VirtualKey::default()
            },
        )
    };
    let upstream = || Arc::new(StaticUpstream::new().with("m", up.url()));
    let team_key = std::env::var(TEAM_KEY_VAR).unwrap();
    let cfg = |keys: BTreeMap<String, VirtualKey>, workers: usize| CoordinatorConfig {
        state_path: Some(dir.path().join("state.db")),
        keys,
        job_workers: workers,
        api_key: Some("admin".into()),
        ..config()
    };
    // Submitted while the key exists, with no worker to run it.
    let c = start(cfg(BTreeMap::from([key("team")]), 0), upstream()).await;
    let auth = format!("Bearer {team_key}");
    let a = call(
        Method::POST,
        &format!("{}/v1/jobs", c.url()),
        Some(serde_json::to_vec(&json!({"kind": "chat", "request": chat("m", "hi")})).unwrap()),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text());
    let id = a.json()["id"].as_i64().unwrap();
    c.shutdown(Duration::from_secs(1)).await;

    // The key is renamed: the same secret is another key now, and the job's key is gone.
    let c = start(cfg(BTreeMap::from([key("renamed")]), 1), upstream()).await;
    let list = format!("{}/api/v1/jobs", c.url());
    wait_until("the job ended", || async {
        let v = call(
            Method::GET,
            &list,
            None,
            &[("authorization", "Bearer admin")],
        )
        .await
        .json();
        v["data"][0]["state"] == "failed"
    })
    .await;
    let v = call(
        Method::GET,
        &list,
        None,
        &[("authorization", "Bearer admin")],
    )
    .await
    .json();
    assert_eq!(v["data"][0]["id"], id, "{v}");
    assert_eq!(v["data"][0]["status_code"], 401, "{v}");
    assert_eq!(v["data"][0]["key"], "team", "{v}");
    // Its new owner name does not see it either.
    let a = call(
        Method::GET,
        &format!("{}/v1/jobs/{id}", c.url()),
        None,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(up.requests().is_empty(), "the job ran upstream");
}

/// Where keys are configured, a caller asks for no more than its key grants: a caller without
/// a key that sends `x_priority: -1000` waits behind a key granted rank 0 that came later (its
/// rank is raised to the operator's default, 5), and `keep_alive` is honoured only for a key
/// that may unload models.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cannot_ask_for_more_priority_than_its_key_grants() {
    let up = FakeServer::start(FakeConfig {
        latency: Duration::from_millis(400),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let sha = |k: &str| -> String {
        Sha256::digest(k.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let cfg = CoordinatorConfig {
        max_in_flight: 1,
        allow_anonymous: true,
        keys: BTreeMap::from([
            (
                "vip".to_owned(),
                VirtualKey {
                    key_sha256: Some(sha("sk-vip")),
                    top_priority: Some(0),
                    ..VirtualKey::default()
                },
            ),
            (
                "plain".to_owned(),
                VirtualKey {
                    key_sha256: Some(sha("sk-plain")),
                    ..VirtualKey::default()
                },
            ),
        ]),
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
    let base = c.url();
    let send = |key: Option<&'static str>, text: &'static str, priority: i32| {
        let base = base.clone();
        tokio::spawn(async move {
            let mut body = chat("m", text);
            body["x_priority"] = json!(priority);
            chat_as(&base, key, &body).await.status
        })
    };
    // The one place is taken; then the keyless caller asks for -1000, then vip for 0.
    let blocker = send(Some("sk-plain"), "blocker", 5);
    wait_until("the blocker upstream", || async {
        up.requests().len() == 1
    })
    .await;
    let stranger = send(None, "stranger", -1000);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let vip = send(Some("sk-vip"), "vip", 0);
    for t in [blocker, stranger, vip] {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    let order = contents_in_order(&up);
    assert_eq!(
        order,
        ["blocker", "vip", "stranger"],
        "served in this order"
    );
    c.shutdown(Duration::from_secs(1)).await;
}

/// Where keys are configured, a caller's `x_timeout_s` shortens its budget but never stretches
/// it past the default: waiting behind a 1.5 s call for the one place, a request whose budget is
/// the default 0.5 s is refused although the key asked for 100 s; without keys (one scope) the
/// same request waits its turn and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cannot_stretch_its_budget_past_the_default() {
    let up = FakeServer::start(FakeConfig {
        latency: Duration::from_millis(1500),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let sha: String = Sha256::digest(b"sk-t")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut body = chat("m", "second");
    body["x_timeout_s"] = json!(100);
    for keyed in [true, false] {
        let cfg = CoordinatorConfig {
            default_budget_s: 0.5,
            max_in_flight: 1,
            keys: if keyed {
                BTreeMap::from([(
                    "t".to_owned(),
                    VirtualKey {
                        key_sha256: Some(sha.clone()),
                        ..VirtualKey::default()
                    },
                )])
            } else {
                BTreeMap::new()
            },
            ..config()
        };
        let c = start(cfg, Arc::new(StaticUpstream::new().with("m", up.url()))).await;
        let key = keyed.then_some("sk-t");
        let first = {
            let (base, mut b) = (c.url(), chat("m", "first"));
            b["x_timeout_s"] = json!(100);
            tokio::spawn(async move { chat_as(&base, key, &b).await.status })
        };
        let before = up.requests().len();
        wait_until("the first call upstream", || async {
            up.requests().len() > before
        })
        .await;
        let a = chat_as(&c.url(), key, &body).await;
        if keyed {
            assert_ne!(
                a.status,
                StatusCode::OK,
                "stretched past the default: {}",
                a.text()
            );
        } else {
            assert_eq!(a.status, StatusCode::OK, "{}", a.text());
        }
        first.await.unwrap();
        c.shutdown(Duration::from_secs(1)).await;
    }
}
