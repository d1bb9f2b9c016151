//! Remote ("cloud") models: a second fakeai stands in for an OpenAI-compatible API elsewhere,
//! reached at its own base URL, under its own model name, with the key from the environment;
//! the cloud-fallback guard forbids or allows it as a rung of a task's ladder at run time.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::*;
use horos_coordinator::{CoordinatorConfig, RemoteModel, StaticUpstream, TaskSpec};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use http::{Method, StatusCode};
use serde_json::Value;

/// A variable every test process has, standing in for the key's (the test never writes the
/// environment: other tests run beside it).
const KEY_VAR: &str = "PATH";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_model_is_called_at_its_url_with_its_name_and_key_and_guarded_as_cloud() {
    let remote = FakeServer::start(FakeConfig {
        reply: Reply::Fixed("from the cloud".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let mut cfg = CoordinatorConfig {
        retry_backoff_s: 0.01,
        max_attempts: 2,
        remotes: BTreeMap::from([(
            "cloud-big".to_owned(),
            RemoteModel {
                url: format!("{}/v1", remote.url()),
                model: Some("provider-model-2025".into()),
                api_key_env: Some(KEY_VAR.into()),
            },
        )]),
        ..config()
    };
    cfg.tasks.insert(
        "t".into(),
        TaskSpec {
            models: vec!["local".into(), "cloud-big".into()],
            ..TaskSpec::default()
        },
    );
    let c = start(cfg, Arc::new(StaticUpstream::new().with("local", dead))).await;
    let url = format!("{}/v1/chat/completions", c.url());

    // Listed with the local models.
    let models = get(&format!("{}/v1/models", c.url())).await.json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"cloud-big") && ids.contains(&"local"),
        "{ids:?}"
    );

    // Direct: the remote's own URL, model name and key.
    let a = post(&url, &chat("cloud-big", "hi")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "from the cloud"
    );
    let rec = remote.requests();
    assert_eq!(rec[0].path, "/v1/chat/completions");
    let sent: Value = serde_json::from_str(&rec[0].body).unwrap();
    assert_eq!(sent["model"], "provider-model-2025");
    let key = std::env::var(KEY_VAR).unwrap();
    assert_eq!(
        rec[0].authorization.as_deref(),
        Some(format!("Bearer {key}").as_str())
    );

    // A task whose local primary is down falls back to the cloud rung while the guard allows...
    let a = post(&url, &chat("task:t", "x")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(remote.requests().len(), 2);

    // ...and not once the guard forbids it: the local failure is the answer.
    let r = call(
        Method::PUT,
        &format!("{}/api/v1/config", c.url()),
        Some(br#"{"allowCloudFallback": false}"#.to_vec()),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let a = post(&url, &chat("task:t", "y")).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY, "{}", a.text());
    assert_eq!(a.json()["error"]["code"], "upstream_unavailable");
    assert_eq!(remote.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_whose_key_variable_is_unset_stops_the_start() {
    let cfg = CoordinatorConfig {
        remotes: BTreeMap::from([(
            "cloud".to_owned(),
            RemoteModel {
                url: "http://127.0.0.1:9/v1".into(),
                model: None,
                api_key_env: Some("HOROS_TEST_SURELY_UNSET_KEY_VAR".into()),
            },
        )]),
        ..config()
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = horos_coordinator::Coordinator::start(cfg, Arc::new(StaticUpstream::new()), l)
        .await
        .expect_err("refused");
    let text = e.to_string();
    assert!(
        text.contains("HOROS_TEST_SURELY_UNSET_KEY_VAR") && text.contains("api_key_env"),
        "{text}"
    );
}
