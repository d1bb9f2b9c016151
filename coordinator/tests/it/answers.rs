//! `POST /v1/answers`: the pages a searcher gives, the model asked through the coordinator with
//! them numbered, each claim citing its page; no supporting page, no model call; the caller's
//! key decides which model it may ask, before anything is searched; streamed as events; a
//! vision model is given the best pages' images, a text model none.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use base64::Engine as _;
use horos_coordinator::VirtualKey;
use horos_coordinator::{Coordinator, CoordinatorConfig, ModelManifest, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use horos_server_control::{Collections, Passage, PassageQuery, SearchError, Searcher};
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
    async fn search(
        &self,
        _: &str,
        _: usize,
        _: &Value,
        _: &Collections,
    ) -> Result<Value, SearchError> {
        Ok(json!([]))
    }

    async fn passages(&self, q: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if q.question.contains("zyxqv") {
            return Ok(Vec::new());
        }
        let page = |page, text: &str| Passage::new(3, page, 0.5, text);
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

/// A 1x1 PNG (a page's rendered image in miniature).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Five rendered pages, each with its image, as an index keeps them: the best `q.images` pages
/// are given theirs, an image over `q.max_image_bytes` is left out. A question with "damaged"
/// in it finds page 19's image gone and page 20's too large (5 MiB).
struct Rendered {
    queries: Mutex<Vec<PassageQuery>>,
}

#[async_trait]
impl Searcher for Rendered {
    async fn search(
        &self,
        _: &str,
        _: usize,
        _: &Value,
        _: &Collections,
    ) -> Result<Value, SearchError> {
        Ok(json!([]))
    }

    async fn passages(&self, q: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        self.queries.lock().unwrap().push(q.clone());
        let damaged = q.question.contains("damaged");
        Ok((18..23)
            .take(q.k)
            .enumerate()
            .map(|(rank, page)| {
                let stored = match page {
                    19 if damaged => None,
                    20 if damaged => Some(vec![0u8; 5 << 20]),
                    _ => Some(PNG.to_vec()),
                };
                Passage {
                    image: stored.filter(|png| rank < q.images && png.len() <= q.max_image_bytes),
                    ..Passage::new(3, page, 0.5, format!("The text of page {page}."))
                }
            })
            .collect())
    }
}

/// The user message's parts the model was sent: its images' PNGs, each with the text part
/// before it, or `None` when the message is the question alone.
fn image_parts(body: &Value) -> Option<Vec<(String, Vec<u8>)>> {
    let parts = body["messages"][1]["content"].as_array()?;
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if part["type"] != "image_url" {
            continue;
        }
        let url = part["image_url"]["url"].as_str().unwrap();
        let b64 = url.strip_prefix("data:image/png;base64,").unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let before = parts[i - 1]["text"].as_str().unwrap().to_owned();
        out.push((before, png));
    }
    Some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vision_model_sees_the_best_pages_images_and_a_text_model_none() {
    let up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed("The diagram shows the pipeline [1].".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let cfg = CoordinatorConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        manifest: BTreeMap::from([(
            "vl".to_owned(),
            ModelManifest {
                vision: true,
                ..ModelManifest::default()
            },
        )]),
        ..config()
    };
    let pages = Arc::new(Rendered {
        queries: Mutex::new(Vec::new()),
    });
    let c = Coordinator::builder(
        cfg,
        Arc::new(
            StaticUpstream::new()
                .with("vl", up.url())
                .with("m", up.url()),
        ),
    )
    .searcher(Arc::clone(&pages) as Arc<dyn Searcher>)
    .bind()
    .await
    .unwrap();
    let url = format!("{}/v1/answers", c.url());
    let fake = &up;
    let ask = |body: Value| {
        let url = url.clone();
        async move {
            let a = post(&url, &body).await;
            assert_eq!(a.status, StatusCode::OK, "{}", a.text());
            assert_eq!(a.json()["supported"], true);
            let sent = fake.requests();
            let last: Value = serde_json::from_str(&sent.last().unwrap().body).unwrap();
            last
        }
    };

    // A vision model, five pages: the best three pages' images (the limit), each a PNG after
    // the number it is cited by; the question first; every page's text still in the sources.
    let sent = ask(json!({"question": "What does the diagram show?", "model": "vl", "k": 5})).await;
    let q = pages.queries.lock().unwrap().last().unwrap().clone();
    assert_eq!((q.images, q.max_image_bytes), (3, 4 << 20));
    assert_eq!(
        sent["messages"][1]["content"][0]["text"],
        "What does the diagram show?"
    );
    let images = image_parts(&sent).expect("images were sent");
    assert_eq!(images.len(), 3, "{images:?}");
    for ((before, png), (n, page)) in images.iter().zip([(1, 18), (2, 19), (3, 20)]) {
        assert!(
            before.starts_with(&format!("[{n}] document 3, page {page}")),
            "{before}"
        );
        assert_eq!(png.as_slice(), PNG);
    }
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("[5] document 3, page 22:\nThe text of page 22."),
        "{system}"
    );

    // Fewer pages than the limit: one image each.
    let sent = ask(json!({"question": "What does the diagram show?", "model": "vl", "k": 2})).await;
    assert_eq!(image_parts(&sent).unwrap().len(), 2);

    // A page whose image is gone, one whose image is too large: no image, their text kept.
    let sent = ask(json!({"question": "The damaged diagram?", "model": "vl", "k": 5})).await;
    let images = image_parts(&sent).unwrap();
    assert_eq!(images.len(), 1, "{images:?}");
    assert!(
        images[0].0.starts_with("[1] document 3, page 18"),
        "{images:?}"
    );
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("[2] document 3, page 19:\nThe text of page 19.")
            && system.contains("[3] document 3, page 20:\nThe text of page 20."),
        "{system}"
    );

    // A text model: no image asked for, none sent; the question is the message, as before.
    let sent = ask(json!({"question": "What does the diagram show?", "model": "m", "k": 5})).await;
    assert_eq!(pages.queries.lock().unwrap().last().unwrap().images, 0);
    assert_eq!(
        sent["messages"][1]["content"],
        "What does the diagram show?"
    );
    assert!(image_parts(&sent).is_none());

    // The request's `images` overrides the manifest, both ways.
    let sent = ask(json!({"question": "What?", "model": "vl", "images": false})).await;
    assert_eq!(sent["messages"][1]["content"], "What?");
    let sent = ask(json!({"question": "What?", "model": "m", "k": 1, "images": true})).await;
    assert_eq!(image_parts(&sent).unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_model_of_category_vision_sees_the_pages_images_without_a_manifest_entry() {
    use horos_gpu_alloc::estimate::ModelFacts;
    use horos_gpu_alloc::pool::{Category, ModelSpec};
    let (up, factory) = pool(&["text"], std::time::Duration::ZERO, 24_000, 1000);
    up.register(ModelSpec {
        id: "vl".into(),
        category: Category::Vision,
        facts: ModelFacts {
            name: "vl".into(),
            explicit_mb: Some(1000),
            ..ModelFacts::default()
        },
        ..ModelSpec::default()
    });
    let pages = Arc::new(Rendered {
        queries: Mutex::new(Vec::new()),
    });
    let c = Coordinator::builder(
        CoordinatorConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..config()
        },
        Arc::new(up),
    )
    .searcher(Arc::clone(&pages) as Arc<dyn Searcher>)
    .bind()
    .await
    .unwrap();
    let url = format!("{}/v1/answers", c.url());
    let last_sent = |model: &str| -> Value {
        let servers = factory.servers.lock().unwrap();
        let sent = servers[model].requests();
        serde_json::from_str(&sent.last().unwrap().body).unwrap()
    };

    let a = post(
        &url,
        &json!({"question": "What does it show?", "model": "vl", "k": 2}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(pages.queries.lock().unwrap().last().unwrap().images, 2);
    assert_eq!(image_parts(&last_sent("vl")).unwrap().len(), 2);

    // The pool's text model: no image.
    let a = post(
        &url,
        &json!({"question": "What does it show?", "model": "text", "k": 2}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(pages.queries.lock().unwrap().last().unwrap().images, 0);
    assert!(image_parts(&last_sent("text")).is_none());
}
