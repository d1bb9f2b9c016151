//! The admin API's model operations over real HTTP: what runs, preload, pin, unpin, unload,
//! behind the admin key, on a model pool of fake servers.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{CoordinatorConfig, Readiness, StaticUpstream, UpstreamPool, UpstreamSet};
use http::{Method, StatusCode};
use serde_json::Value;

const KEY: &str = "admin-key";

async fn admin(method: Method, url: &str, key: Option<&str>) -> Answer {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    call(method, url, None, &headers).await
}

fn slot<'a>(models: &'a Value, name: &str) -> Option<&'a Value> {
    models["data"]
        .as_array()?
        .iter()
        .find(|m| m["model"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_preloads_pins_and_unloads_models() {
    let (pool, _f) = pool(&["a", "b"], Duration::from_millis(200), 24_000, 1000);
    let fixed = StaticUpstream::new().with("fixed", "http://127.0.0.1:9");
    let up = UpstreamSet::new()
        .with(Arc::new(pool.clone()))
        .with(Arc::new(fixed));
    let cfg = CoordinatorConfig {
        api_key: Some(KEY.into()),
        ..config()
    };
    let c = start(cfg, Arc::new(up)).await;
    let api = format!("{}/api/v1/models", c.url());

    // Behind the key.
    assert_eq!(
        admin(Method::GET, &api, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        admin(Method::POST, &format!("{api}/a/load"), Some("wrong"))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_ne!(pool.readiness("a"), Readiness::Ready);

    // Preload: answered once the model is ready.
    let r = admin(Method::POST, &format!("{api}/a/load"), Some(KEY)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["ready"], true);
    assert!(r.json()["took_s"].as_f64().unwrap() >= 0.2);
    assert_eq!(pool.readiness("a"), Readiness::Ready);
    wait_until("a listed as READY", || async {
        let v = admin(Method::GET, &api, Some(KEY)).await.json();
        slot(&v, "a").is_some_and(|s| s["state"] == "READY" && s["pinned"] == false)
            && slot(&v, "fixed").is_some()
    })
    .await;

    // Pinned: an unload leaves it.
    let r = admin(Method::POST, &format!("{api}/a/pin"), Some(KEY)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = admin(Method::POST, &format!("{api}/a/unload"), Some(KEY)).await;
    assert_eq!(r.json()["unloaded"], false);
    assert_eq!(pool.readiness("a"), Readiness::Ready);
    wait_until("a listed as pinned", || async {
        let v = admin(Method::GET, &api, Some(KEY)).await.json();
        slot(&v, "a").is_some_and(|s| s["pinned"] == true)
    })
    .await;

    // Unpinned: the unload stops it.
    admin(Method::POST, &format!("{api}/a/unpin"), Some(KEY)).await;
    let r = admin(Method::POST, &format!("{api}/a/unload"), Some(KEY)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["unloaded"], true);
    assert_ne!(pool.readiness("a"), Readiness::Ready);

    // A fixed server cannot be unloaded; an unknown model is a 404.
    let r = admin(Method::POST, &format!("{api}/fixed/unload"), Some(KEY)).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    let r = admin(Method::POST, &format!("{api}/nope/load"), Some(KEY)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Unload every idle model (llama-swap's /unload): both loaded, `b` pinned; `a` goes, `b`
    // stays and is named, the fixed server is not touched.
    for m in ["a", "b"] {
        let r = admin(Method::POST, &format!("{api}/{m}/load"), Some(KEY)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    admin(Method::POST, &format!("{api}/b/pin"), Some(KEY)).await;
    let all = format!("{api}/unload");
    assert_eq!(
        admin(Method::POST, &all, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = admin(Method::POST, &all, Some(KEY)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        r.json()["unloaded"],
        serde_json::json!(["a"]),
        "{}",
        r.text()
    );
    assert_eq!(r.json()["kept"], serde_json::json!(["b"]), "{}", r.text());
    assert_ne!(pool.readiness("a"), Readiness::Ready);
    assert_eq!(pool.readiness("b"), Readiness::Ready);
}
