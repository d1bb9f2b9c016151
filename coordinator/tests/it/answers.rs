//! `POST /v1/answers`: the pages a searcher gives, the model asked through the coordinator with
//! them numbered, each claim citing its page; no supporting page, no model call; the caller's
//! key decides which model it may ask, before anything is searched; streamed as events.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use horos_coordinator::limits::VirtualKey;
use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use horos_server_control::{Passage, PassageQuery, SearchError, Searcher};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::*;

/// Two pages of a manual; a question with "zyxqv" in it finds nothing.
struct Pages {
    asked: AtomicUsize,
}

#[async_trait]
impl Searcher for Pages {
    async fn search(&self, _: &str, _: usize, _: &Value) -> Result<Value, SearchError> {
        Ok(json!([]))
    }

    async fn passages(&self, q: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if q.question.contains("zyxqv") {
            return Ok(Vec::new());
        }
        let page = |page, text: &str| Passage {
            document: 3,
            page,
            score: 0.5,
            text: text.into(),
        };
        Ok(vec![
            page(
                18,
                "Methods of COM interfaces always return an HRESULT error code.",
            ),
            page(19, "Exceptions raised in Caml are mapped to failure codes."),
        ]
        .into_iter()
        .take(q.k)
        .collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cites_its_pages_and_no_page_means_no_model_call() {
    let up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed(
            "COM interfaces return an HRESULT error code. Caml exceptions become failure codes."
                .into(),
        ),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let cfg = CoordinatorConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        keys: BTreeMap::from([(
            "team".to_owned(),
            VirtualKey {
                key_sha256: Some(
                    Sha256::digest(b"sk-team")
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                ),
                models: vec!["m".into()],
                ..VirtualKey::default()
            },
        )]),
        ..config()
    };
    let pages = Arc::new(Pages {
        asked: AtomicUsize::new(0),
    });
    let c = Coordinator::builder(
        cfg,
        Arc::new(
            StaticUpstream::new()
                .with("m", up.url())
                .with("other", up.url()),
        ),
    )
    .searcher(Arc::clone(&pages) as Arc<dyn Searcher>)
    .bind()
    .await
    .unwrap();
    let url = format!("{}/v1/answers", c.url());
    let ask = |body: Value| {
        let url = url.clone();
        async move {
            call(
                Method::POST,
                &url,
                Some(serde_json::to_vec(&body).unwrap()),
                &[("authorization", "Bearer sk-team")],
            )
            .await
        }
    };

    // Answered from the two pages: the model saw them numbered, each claim cites one.
    let a = ask(json!({"question": "How are errors reported?", "model": "m", "k": 2})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let v = a.json();
    assert_eq!(v["supported"], true, "{v}");
    assert_eq!(v["citations"][0]["page"], 18);
    assert_eq!(v["citations"][1]["page"], 19);
    assert_eq!(v["claims"][0]["sources"], json!([1]), "{v}");
    assert_eq!(v["claims"][1]["sources"], json!([2]), "{v}");
    assert_eq!(
        v["answer"],
        "COM interfaces return an HRESULT error code. [1] Caml exceptions become failure codes. [2]"
    );
    let sent = up.requests();
    assert_eq!(sent.len(), 1);
    let body: Value = serde_json::from_str(&sent[0].body).unwrap();
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("[1] document 3, page 18:") && system.contains("[2] document 3, page 19:"),
        "{system}"
    );
    assert_eq!(body["messages"][1]["content"], "How are errors reported?");

    // Nothing supports it: said so, and the model is not called.
    let a = ask(json!({"question": "zyxqv plorbt?", "model": "m"})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["supported"], false);
    assert_eq!(a.json()["citations"], json!([]));
    assert_eq!(
        up.requests().len(),
        1,
        "no model call without a supporting page"
    );

    // The key may not ask `other`: refused before anything is searched; no key, no answer.
    let searched = pages.asked.load(Ordering::SeqCst);
    let a = ask(json!({"question": "How are errors reported?", "model": "other"})).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text());
    let a = post(&url, &json!({"question": "q", "model": "m"})).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text());
    assert_eq!(pages.asked.load(Ordering::SeqCst), searched);
    let a = ask(json!({"question": "q", "model": "m", "k": 0})).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["error"]["param"], "k");

    // Streamed: the sources first, the words as they come, the claims at the end.
    let a =
        ask(json!({"question": "How are errors reported?", "model": "m", "stream": true})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.headers["content-type"], "text/event-stream");
    let events: Vec<Value> = a
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(events[0]["object"], "answer.sources");
    assert_eq!(events[0]["citations"][0]["page"], 18);
    let words: String = events
        .iter()
        .filter(|e| e["object"] == "answer.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(words.contains("HRESULT"), "{words}");
    let done = events.last().unwrap();
    assert_eq!(done["object"], "answer.done", "{events:?}");
    assert_eq!(done["claims"][0]["sources"], json!([1]), "{done}");
    assert!(a.text().trim_end().ends_with("data: [DONE]"));
}

/// A model whose stream breaks mid-answer: the answer's events end with `answer.error`, never
/// an `answer.done` claiming a supported answer from half a text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_breaks_ends_with_an_error_event() {
    let up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed("COM interfaces return an HRESULT error code and more words.".into()),
        fault: horos_fakeai::Fault::DropMidStream(2),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let c = Coordinator::builder(
        CoordinatorConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..config()
        },
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .searcher(Arc::new(Pages {
        asked: AtomicUsize::new(0),
    }) as Arc<dyn Searcher>)
    .bind()
    .await
    .unwrap();
    let a = post(
        &format!("{}/v1/answers", c.url()),
        &json!({"question": "How are errors reported?", "model": "m", "stream": true}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let objects: Vec<String> = a
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .map(|e| e["object"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        objects.first().map(String::as_str),
        Some("answer.sources"),
        "{objects:?}"
    );
    assert_eq!(
        objects.last().map(String::as_str),
        Some("answer.error"),
        "{objects:?}"
    );
    assert!(!objects.iter().any(|o| o == "answer.done"), "{objects:?}");
}
