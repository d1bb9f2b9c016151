//! An operator's conveniences over real HTTP: keys, limits and profiles reloaded while serving
//! (`POST /api/v1/reload`, `Coordinator::reload`), the servers' logs (`/api/v1/logs`), and the
//! status page's last log lines and "Unload all" form — each behind the admin key.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use horos_coordinator::SourceError;
use horos_coordinator::{
    CoordinatorConfig, LogBook, LogChunk, LogEntry, LogError, LogKind, LogWindow, Reading,
    StaticUpstream, Tenancy, VirtualKey,
};
use horos_fakeai::{FakeConfig, FakeServer};
use http::{Method, StatusCode};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

const ADMIN: &str = "admin-secret";

fn hashed(key: &str) -> VirtualKey {
    VirtualKey {
        key_sha256: Some(
            Sha256::digest(key.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        ),
        ..VirtualKey::default()
    }
}

fn keys(names: &[(&str, &str)]) -> Tenancy {
    Tenancy {
        keys: names
            .iter()
            .map(|(n, k)| ((*n).to_owned(), hashed(k)))
            .collect(),
        ..Tenancy::default()
    }
}

async fn as_key(method: Method, url: &str, key: Option<&str>, body: Option<&Value>) -> Answer {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    call(
        method,
        url,
        body.map(|b| serde_json::to_vec(b).unwrap()),
        &headers,
    )
    .await
}

/// What the test's "configuration file" holds now: a reading, or the error a broken file
/// gives.
type Source = Arc<Mutex<Result<Tenancy, String>>>;

fn source_of(now: &Source) -> Arc<dyn horos_coordinator::TenancySource> {
    let now = Arc::clone(now);
    Arc::new(move || -> Result<Reading, SourceError> {
        let tenancy = now.lock().unwrap().clone()?;
        Ok(Reading {
            tenancy,
            restart_needed: vec!["coordinator.max_in_flight".into()],
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_keys_and_a_bad_file_keeps_the_old_ones() {
    let up = FakeServer::start(FakeConfig {
        latency: Duration::from_millis(800),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let first = keys(&[("alpha", "sk-alpha-key")]);
    let file: Source = Arc::new(Mutex::new(Ok(first.clone())));
    let cfg = CoordinatorConfig {
        api_key: Some(ADMIN.into()),
        keys: first.keys,
        ..config()
    };
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = horos_coordinator::Coordinator::builder(
        cfg,
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .tenancy_source(source_of(&file))
    .start(l)
    .await
    .unwrap();
    let (base, reload) = (c.url(), format!("{}/api/v1/reload", c.url()));
    let chat_url = format!("{base}/v1/chat/completions");
    let hello = chat("m", "hello");
    assert_eq!(
        as_key(Method::POST, &chat_url, Some("sk-alpha-key"), Some(&hello))
            .await
            .status,
        StatusCode::OK
    );

    // A request of alpha in flight while the file drops alpha and adds beta.
    let in_flight = {
        let (url, hello) = (chat_url.clone(), hello.clone());
        tokio::spawn(
            async move { as_key(Method::POST, &url, Some("sk-alpha-key"), Some(&hello)).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    *file.lock().unwrap() = Ok(keys(&[("beta", "sk-beta-key")]));
    // Behind the admin key.
    for key in [None, Some("wrong")] {
        let r = as_key(Method::POST, &reload, key, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    }
    let r = as_key(Method::POST, &reload, Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let report = r.json();
    assert_eq!(
        report["keys_added"],
        serde_json::json!(["beta"]),
        "{report}"
    );
    assert_eq!(report["keys_removed"], serde_json::json!(["alpha"]));
    assert_eq!(
        report["restart_needed"],
        serde_json::json!(["coordinator.max_in_flight"])
    );
    assert!(!r.text().contains("sk-beta-key"), "no secret in the answer");

    // The request in flight finishes; the next of alpha is refused, beta's pass.
    let done = in_flight.await.unwrap();
    assert_eq!(done.status, StatusCode::OK, "{}", done.text());
    let a = as_key(Method::POST, &chat_url, Some("sk-alpha-key"), Some(&hello)).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text());
    assert_eq!(
        as_key(Method::POST, &chat_url, Some("sk-beta-key"), Some(&hello))
            .await
            .status,
        StatusCode::OK
    );

    // A file that does not parse, a key whose variable is unset: refused whole, beta stays.
    *file.lock().unwrap() = Err("horos.toml: TOML parse error at line 3".into());
    let r = as_key(Method::POST, &reload, Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "config_refused");
    assert!(r.text().contains("line 3"), "{}", r.text());
    let mut unset = keys(&[("gamma", "sk-gamma-key")]);
    unset.keys.insert(
        "delta".into(),
        VirtualKey {
            key_env: Some("HOROS_TEST_VARIABLE_NOBODY_SETS".into()),
            ..VirtualKey::default()
        },
    );
    *file.lock().unwrap() = Ok(unset);
    let e = c.reload().await.unwrap_err();
    assert!(e.to_string().contains("keys.delta.key_env"), "{e}");
    for (key, status) in [
        ("sk-beta-key", StatusCode::OK),
        ("sk-gamma-key", StatusCode::UNAUTHORIZED),
    ] {
        let a = as_key(Method::POST, &chat_url, Some(key), Some(&hello)).await;
        assert_eq!(a.status, status, "{key}: {}", a.text());
    }

    // Limits and profiles reload too.
    let mut limited = keys(&[("beta", "sk-beta-key")]);
    limited.clients = BTreeMap::from([(
        "*".to_owned(),
        horos_coordinator::Limits {
            rpm: Some(1),
            ..Default::default()
        },
    )]);
    limited.profiles = BTreeMap::from([("key:beta".to_owned(), Default::default())]);
    *file.lock().unwrap() = Ok(limited);
    let report = c.reload().await.unwrap();
    assert_eq!(report.gate.clients_changed, ["*"]);
    assert!(report.gate.keys_added.is_empty() && report.gate.keys_removed.is_empty());
    assert_eq!(report.profiles_changed, ["key:beta"]);

    // Without a source there is nothing to reload from.
    let plain = start(
        CoordinatorConfig {
            api_key: Some(ADMIN.into()),
            ..config()
        },
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .await;
    let r = as_key(
        Method::POST,
        &format!("{}/api/v1/reload", plain.url()),
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED, "{}", r.text());
}

/// Logs in memory: a tail is the last lines, a follower gets what follows its offset.
struct Book(Mutex<BTreeMap<String, String>>);

impl LogBook for Book {
    fn logs(&self) -> Vec<LogEntry> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(name, text)| LogEntry {
                name: name.clone(),
                kind: LogKind::Lane,
                bytes: Some(text.len() as u64),
            })
            .collect()
    }

    fn read(&self, name: &str, window: LogWindow) -> Result<LogChunk, LogError> {
        let logs = self.0.lock().unwrap();
        let text = logs
            .get(name)
            .ok_or_else(|| LogError::Unknown(name.to_owned()))?;
        let part = match window {
            LogWindow::Tail { lines } => {
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..]
                    .iter()
                    .map(|l| format!("{l}\n"))
                    .collect()
            }
            LogWindow::After { offset } => text[offset as usize..].to_owned(),
        };
        Ok(LogChunk {
            name: name.to_owned(),
            text: part,
            next: text.len() as u64,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_listed_tailed_and_followed_behind_the_admin_key() {
    let book = Arc::new(Book(Mutex::new(BTreeMap::from([
        (
            "think-gpu0".to_owned(),
            "one\ntwo\n<b>three</b> & co\n".to_owned(),
        ),
        ("Qwen/Qwen2.5".to_owned(), "loading\n".to_owned()),
    ]))));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = horos_coordinator::Coordinator::builder(
        CoordinatorConfig {
            api_key: Some(ADMIN.into()),
            ..config()
        },
        Arc::new(StaticUpstream::new()),
    )
    .logs(book.clone())
    .start(l)
    .await
    .unwrap();
    let api = format!("{}/api/v1/logs", c.url());

    for url in [api.clone(), format!("{api}/think-gpu0?lines=1")] {
        let r = as_key(Method::GET, &url, None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{url}");
    }
    let list = as_key(Method::GET, &api, Some(ADMIN), None).await.json();
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Qwen/Qwen2.5", "think-gpu0"]);
    assert_eq!(list["data"][1]["kind"], "lane");

    // A tail, then what follows its `next`.
    let r = as_key(
        Method::GET,
        &format!("{api}/think-gpu0?lines=2"),
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let tail = r.json();
    assert_eq!(tail["text"], "two\n<b>three</b> & co\n");
    let next = tail["next"].as_u64().unwrap();
    book.0
        .lock()
        .unwrap()
        .get_mut("think-gpu0")
        .unwrap()
        .push_str("four\n");
    let more = as_key(
        Method::GET,
        &format!("{api}/think-gpu0?after={next}"),
        Some(ADMIN),
        None,
    )
    .await
    .json();
    assert_eq!(more["text"], "four\n");
    assert_eq!(more["next"].as_u64().unwrap(), next + 5);
    // A name with a slash, escaped or not.
    for path in ["Qwen%2FQwen2.5", "Qwen/Qwen2.5"] {
        let r = as_key(Method::GET, &format!("{api}/{path}"), Some(ADMIN), None).await;
        assert_eq!(r.json()["text"], "loading\n", "{path}");
    }

    // Names are looked up, never paths; bad windows are named.
    for name in ["nope", "..%2F..%2Fetc%2Fpasswd", "../think-gpu0"] {
        let r = as_key(Method::GET, &format!("{api}/{name}"), Some(ADMIN), None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{name}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "log_not_found");
    }
    for q in ["lines=0", "after=x", "lines=2&after=0", "file=/etc/passwd"] {
        let r = as_key(
            Method::GET,
            &format!("{api}/think-gpu0?{q}"),
            Some(ADMIN),
            None,
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}: {}", r.text());
    }

    // The status page: each log's last lines, escaped, and the unload form without the key.
    let page = as_key(
        Method::GET,
        &format!("{}/status", c.url()),
        Some(ADMIN),
        None,
    )
    .await
    .text();
    assert!(page.contains("<h3>think-gpu0</h3>"), "{page}");
    assert!(page.contains("&lt;b&gt;three&lt;/b&gt; &amp; co"), "{page}");
    assert!(!page.contains("<b>three</b>"));
    assert!(page.contains("Unload all</button>"));
    assert!(!page.contains(ADMIN), "the page never holds the admin key");
}
