//! Which documents a caller reads (issue 46): the searcher is handed the collections of the
//! admitted caller (its key's `collections`, `"default"` where it names none,
//! `anonymous_collections` for callers without a key), for `POST /v1/search` and `POST
//! /v1/answers` alike; a field of the body never widens them; with no key configured, every
//! caller reads every collection.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream, VirtualKey};
use horos_fakeai::{FakeConfig, FakeServer};
use horos_server_control::{Collection, Collections, Passage, PassageQuery, SearchError, Searcher};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::*;

/// Records the collections each question came with, and answers nothing.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Collections>>,
}

impl Recorder {
    fn take(&self) -> Vec<Collections> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

#[async_trait]
impl Searcher for Recorder {
    async fn search(
        &self,
        _: &str,
        _: usize,
        _: &Value,
        collections: &Collections,
    ) -> Result<Value, SearchError> {
        self.seen.lock().unwrap().push(collections.clone());
        Ok(json!([]))
    }

    async fn passages(&self, q: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        self.seen.lock().unwrap().push(q.collections.clone());
        Ok(Vec::new())
    }
}

fn key(secret: &str, collections: Option<&[&str]>) -> VirtualKey {
    VirtualKey {
        key_sha256: Some(
            Sha256::digest(secret.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        ),
        collections: collections.map(|c| c.iter().map(|s| s.to_string()).collect()),
        ..VirtualKey::default()
    }
}

fn only(names: &[&str]) -> Collections {
    Collections::Only(names.iter().map(|n| Collection::new(*n).unwrap()).collect())
}

async fn start(cfg: CoordinatorConfig, searcher: Arc<Recorder>) -> (Coordinator, FakeServer) {
    let up = FakeServer::start(FakeConfig::default()).await.unwrap();
    let c = Coordinator::builder(
        CoordinatorConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..cfg
        },
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .searcher(searcher as Arc<dyn Searcher>)
    .bind()
    .await
    .unwrap();
    (c, up)
}

async fn post(c: &Coordinator, path: &str, body: Value, secret: Option<&str>) -> Answer {
    let auth = secret.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    call(
        Method::POST,
        &format!("{}{path}", c.url()),
        Some(serde_json::to_vec(&body).unwrap()),
        &headers,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_searches_its_own_collections_and_cannot_widen_them() {
    let recorder = Arc::new(Recorder::default());
    let cfg = CoordinatorConfig {
        keys: BTreeMap::from([
            ("alice".to_owned(), key("sk-alice", Some(&["alpha"]))),
            ("ops".to_owned(), key("sk-ops", Some(&["*"]))),
            ("plain".to_owned(), key("sk-plain", None)),
        ]),
        allow_anonymous: true,
        anonymous_collections: vec!["public".into()],
        ..config()
    };
    let (c, _up) = start(cfg, Arc::clone(&recorder)).await;

    // Search: each caller's own collections, whatever the body says.
    let widen = json!({"query": "x", "collections": ["beta"], "collection": "*"});
    for (secret, want) in [
        (Some("sk-alice"), only(&["alpha"])),
        (Some("sk-ops"), Collections::All),
        (Some("sk-plain"), only(&["default"])),
        (None, only(&["public"])),
    ] {
        let a = post(&c, "/v1/search", widen.clone(), secret).await;
        assert_eq!(a.status, StatusCode::OK, "{secret:?}: {}", a.text());
        assert_eq!(recorder.take(), [want], "{secret:?}");
    }

    // Answers: the passages asked for in the caller's collections; a body naming collections
    // is refused before anything is searched.
    let a = post(
        &c,
        "/v1/answers",
        json!({"question": "what?", "model": "m"}),
        Some("sk-alice"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["supported"], false, "{}", a.text());
    assert_eq!(recorder.take(), [only(&["alpha"])]);
    let a = post(
        &c,
        "/v1/answers",
        json!({"question": "what?", "model": "m", "collections": ["beta"]}),
        Some("sk-alice"),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    assert_eq!(a.json()["error"]["param"], "collections", "{}", a.text());
    assert!(recorder.take().is_empty(), "nothing was searched");
    let a = post(
        &c,
        "/v1/answers",
        json!({"question": "what?", "model": "m"}),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(recorder.take(), [only(&["public"])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_every_caller_reads_every_collection() {
    let recorder = Arc::new(Recorder::default());
    let (c, _up) = start(config(), Arc::clone(&recorder)).await;
    let a = post(&c, "/v1/search", json!({"query": "x"}), None).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let a = post(
        &c,
        "/v1/answers",
        json!({"question": "what?", "model": "m"}),
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(recorder.take(), [Collections::All, Collections::All]);
}
