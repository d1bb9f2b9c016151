//! The OpenAI-compatible surface over real HTTP: pass-through, streaming, extension fields,
//! errors, priority ordering.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use horos_coordinator::{CoordinatorConfig, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer};
use horos_vllm_client::{ChatMessage, ChatRequest, Client};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

async fn fake(cfg: FakeConfig) -> FakeServer {
    FakeServer::start(cfg).await.expect("fake upstream")
}

fn upstream(model: &str, server: &FakeServer) -> Arc<StaticUpstream> {
    Arc::new(StaticUpstream::new().with(model, server.url()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_non_streaming_passes_through_and_strips_x_fields() {
    let up = fake(FakeConfig::default()).await;
    let c = start(config(), upstream("m", &up)).await;
    let mut body = chat("m", "hello there");
    body["x_client_id"] = json!("tester");
    body["x_priority"] = json!(1);
    body["x_whatever"] = json!({"nested": true});
    body["keep_alive"] = json!("5m");
    body["temperature"] = json!(0.5);
    let a = post(&format!("{}/v1/chat/completions", c.url()), &body).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let v = a.json();
    assert_eq!(v["choices"][0]["message"]["content"], "hello there");

    let rec = up.requests();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].path, "/v1/chat/completions");
    let sent: Value = serde_json::from_str(&rec[0].body).unwrap();
    let obj = sent.as_object().unwrap();
    assert!(obj.keys().all(|k| !k.starts_with("x_")), "{sent}");
    assert!(!obj.contains_key("keep_alive"));
    assert_eq!(sent["temperature"], 0.5);
    assert_eq!(sent["model"], "m");

    // The typed client of the workspace talks to the coordinator as to any server.
    let client = Client::new(c.url()).unwrap();
    let answer = client
        .chat(&ChatRequest::new("m", vec![ChatMessage::user("typed")]))
        .await
        .unwrap();
    assert_eq!(answer.text(), "typed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streaming_is_passed_through_chunk_by_chunk() {
    let up = fake(FakeConfig {
        chunk_latency: Duration::from_millis(150),
        ..FakeConfig::default()
    })
    .await;
    let c = start(config(), upstream("m", &up)).await;
    let mut body = chat("m", "one two three four five six");
    body["stream"] = json!(true);
    body["x_client_id"] = json!("streamer");
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/v1/chat/completions", c.url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let resp = http().request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = resp.into_body();
    let first = loop {
        let f = body.frame().await.unwrap().unwrap();
        if let Ok(d) = f.into_data() {
            break d;
        }
    };
    assert!(String::from_utf8_lossy(&first).contains("data:"));
    // The first chunk arrived while the upstream is still streaming: nothing was buffered.
    assert_eq!(up.stats().running, 1, "upstream already finished");
    let mut all = String::from_utf8_lossy(&first).into_owned();
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            all.push_str(&String::from_utf8_lossy(&d));
        }
    }
    assert!(all.trim_end().ends_with("data: [DONE]"), "{all}");
    let sent: Value = serde_json::from_str(&up.requests()[0].body).unwrap();
    assert!(sent.get("x_client_id").is_none());

    // And through the workspace's streaming client.
    let client = Client::new(c.url()).unwrap();
    let text = client
        .chat_stream(&ChatRequest::new("m", vec![ChatMessage::user("a b c")]))
        .await
        .unwrap()
        .collect_text()
        .await
        .unwrap();
    assert_eq!(text.text, "a b c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_models_and_unknown_routes() {
    let up = fake(FakeConfig::default()).await;
    let mut cfg = config();
    cfg.tasks.insert(
        "embed".into(),
        horos_coordinator::TaskSpec {
            models: vec!["e".into()],
            ..Default::default()
        },
    );
    let c = start(cfg, upstream("e", &up)).await;
    let a = post(
        &format!("{}/v1/embeddings", c.url()),
        &json!({"model": "task:embed", "input": ["a", "b"], "x_priority": 3}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["data"].as_array().unwrap().len(), 2);
    let sent: Value = serde_json::from_str(&up.requests()[0].body).unwrap();
    assert_eq!(sent["model"], "e", "the task resolved to its model");

    let m = get(&format!("{}/v1/models", c.url())).await.json();
    let ids: Vec<&str> = m["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["e", "task:embed"]);

    let a = post(
        &format!("{}/v1/chat/completions", c.url()),
        &chat("nope", "x"),
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.json()["error"]["code"], "model_not_found");
    let a = get(&format!("{}/v1/nothing", c.url())).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.json()["error"]["message"].is_string());
    let a = get(&format!("{}/v1/chat/completions", c.url())).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_400_and_oversized_body_is_413() {
    let up = fake(FakeConfig::default()).await;
    let cfg = CoordinatorConfig {
        max_body_bytes: 1024,
        ..config()
    };
    let c = start(cfg, upstream("m", &up)).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let a = call(Method::POST, &url, Some(b"{\"model\": ".to_vec()), &[]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let e = &a.json()["error"];
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["message"].as_str().unwrap().contains("JSON"));
    assert!(e.get("param").is_some() && e.get("code").is_some());

    let a = post(&url, &json!({"messages": []})).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["error"]["param"], "model");
    let a = post(&url, &json!({"model": "m", "x_priority": "urgent"})).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);

    let big = chat("m", &"x".repeat(4096));
    let a = post(&url, &big).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.json()["error"]["code"], "request_too_large");
    // The unread rest of the body makes the connection unusable: the client is told to drop it.
    assert_eq!(a.headers["connection"], "close");
    assert!(up.requests().is_empty(), "nothing reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_overtakes_queued_low_priority_requests() {
    let up = fake(FakeConfig {
        latency: Duration::from_millis(300),
        ..FakeConfig::default()
    })
    .await;
    let cfg = CoordinatorConfig {
        per_model_concurrency: 1,
        ..config()
    };
    let c = start(cfg, upstream("m", &up)).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let metrics_url = format!("{}/metrics", c.url());
    let waiting = |n: f64| {
        let u = metrics_url.clone();
        async move {
            let t = get(&u).await.text();
            metric(&t, "horos_coordinator_queue_waiting{model=\"m\"}") == Some(n)
        }
    };
    let send = |text: &str, prio: i64| {
        let mut b = chat("m", text);
        b["x_priority"] = json!(prio);
        let u = url.clone();
        tokio::spawn(async move { post(&u, &b).await.status })
    };
    let a = send("A-low", 9);
    wait_until("A upstream", || async { up.requests().len() == 1 }).await;
    let b = send("B-low", 9);
    wait_until("B queued", || waiting(1.0)).await;
    let c2 = send("C-low", 9);
    wait_until("C queued", || waiting(2.0)).await;
    let h = send("H-high", 0);
    wait_until("H queued", || waiting(3.0)).await;
    for t in [a, b, c2, h] {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    let order = contents_in_order(&up);
    assert_eq!(order, vec!["A-low", "H-high", "B-low", "C-low"]);
    assert_eq!(up.stats().max_running, 1);
}

/// A tiny image server: answers `POST /v1/images/generations` and records what it got.
#[allow(clippy::unwrap_used)] // fixture: a failure is a failed test
async fn image_server() -> (String, Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let seen: Arc<std::sync::Mutex<Vec<(String, Value)>>> = Arc::default();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = l.accept().await.unwrap();
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let s = Arc::clone(&s);
                    async move {
                        let path = req.uri().path().to_owned();
                        let body = req.into_body().collect().await?.to_bytes();
                        s.lock()
                            .unwrap()
                            .push((path, serde_json::from_slice(&body).unwrap_or(Value::Null)));
                        let out = json!({"created": 1, "data": [{"b64_json": "iVBORw0KGgo="}]});
                        Ok::<_, hyper::Error>(
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(out.to_string())))
                                .unwrap(),
                        )
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_generations_are_forwarded() {
    let (url, seen) = image_server().await;
    let c = start(config(), Arc::new(StaticUpstream::new().with("sdxl", url))).await;
    let a = post(
        &format!("{}/v1/images/generations", c.url()),
        &json!({"model": "sdxl", "prompt": "a lighthouse", "n": 1, "x_client_id": "art"}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["data"][0]["b64_json"], "iVBORw0KGgo=");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, "/v1/images/generations");
    assert_eq!(
        seen[0].1,
        json!({"model": "sdxl", "prompt": "a lighthouse", "n": 1})
    );
}

/// Two fixed servers where `local` reads as cold (it would need a load) and the cloud model
/// as warm: the shape in which the cloud-fallback guard matters.
struct ColdLocal {
    local: String,
    cloud: String,
}

#[async_trait::async_trait]
impl horos_coordinator::UpstreamPool for ColdLocal {
    fn models(&self) -> Vec<String> {
        vec!["local".into(), "claude:haiku".into()]
    }
    fn readiness(&self, model: &str) -> horos_coordinator::Readiness {
        match model {
            "local" => horos_coordinator::Readiness::Cold,
            "claude:haiku" => horos_coordinator::Readiness::Ready,
            _ => horos_coordinator::Readiness::Unknown,
        }
    }
    async fn acquire(
        &self,
        model: &str,
        _priority: i32,
    ) -> Result<horos_coordinator::UpstreamLease, horos_coordinator::UpstreamError> {
        let url = if model == "local" {
            &self.local
        } else {
            &self.cloud
        };
        Ok(horos_coordinator::UpstreamLease::new(url.clone(), None))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_fallback_guard_changes_routing_at_run_time() {
    let local = fake(FakeConfig::default()).await;
    let cloud = fake(FakeConfig::default()).await;
    let mut cfg = CoordinatorConfig {
        default_load_s: 1.0,
        ..config()
    };
    cfg.tasks.insert(
        "classify".into(),
        horos_coordinator::TaskSpec {
            models: vec!["local".into(), "claude:haiku".into()],
            ..Default::default()
        },
    );
    let up = ColdLocal {
        local: local.url(),
        cloud: cloud.url(),
    };
    let c = start(cfg, Arc::new(up)).await;
    let url = format!("{}/v1/chat/completions", c.url());
    // Allowed (the default): the primary is cold, the warm cloud fallback serves.
    assert_eq!(
        post(&url, &chat("task:classify", "1")).await.status,
        StatusCode::OK
    );
    assert_eq!((local.requests().len(), cloud.requests().len()), (0, 1));

    let a = call(
        Method::PUT,
        &format!("{}/api/v1/config", c.url()),
        Some(br#"{"allowCloudFallback": false}"#.to_vec()),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    // Blocked: the cold local primary is loaded instead.
    assert_eq!(
        post(&url, &chat("task:classify", "2")).await.status,
        StatusCode::OK
    );
    assert_eq!((local.requests().len(), cloud.requests().len()), (1, 1));
    // A direct request for the cloud model is a deliberate choice, never blocked.
    assert_eq!(
        post(&url, &chat("claude:haiku", "3")).await.status,
        StatusCode::OK
    );
    assert_eq!(cloud.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_frees_its_place_and_the_upstream() {
    let up = fake(FakeConfig {
        chunk_latency: Duration::from_millis(200),
        ..FakeConfig::default()
    })
    .await;
    let c = start(config(), upstream("m", &up)).await;
    let mut body = chat("m", "a long answer with many many words to stream slowly");
    body["stream"] = json!(true);
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/v1/chat/completions", c.url()))
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let resp = http().request(req).await.unwrap();
    let mut b = resp.into_body();
    b.frame().await.unwrap().unwrap();
    assert_eq!(up.stats().running, 1);
    drop(b); // the client goes away mid-stream
    wait_until("upstream released", || async { up.stats().running == 0 }).await;
    wait_until("place released", || async {
        let t = get(&format!("{}/metrics", c.url())).await.text();
        metric(&t, "horos_coordinator_model_running{model=\"m\"}") == Some(0.0)
            && metric(&t, "horos_coordinator_requests_in_flight{route=\"chat\"}") == Some(0.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_wait_past_the_budget_and_upstream_failures() {
    let up = fake(FakeConfig {
        latency: Duration::from_millis(1500),
        ..FakeConfig::default()
    })
    .await;
    let cfg = CoordinatorConfig {
        per_model_concurrency: 1,
        ..config()
    };
    // A port with nothing listening: the discard port, which nothing here serves. (A port
    // picked by binding and releasing it was taken by another test's server under CI's load,
    // which then answered slowly instead of refusing.)
    let dead = "127.0.0.1:9";
    assert!(
        std::net::TcpStream::connect(dead).is_err(),
        "something listens on {dead}"
    );
    let c = start(
        cfg,
        Arc::new(
            StaticUpstream::new()
                .with("m", up.url())
                .with("gone", format!("http://{dead}")),
        ),
    )
    .await;
    let url = format!("{}/v1/chat/completions", c.url());
    let first = {
        let u = url.clone();
        tokio::spawn(async move { post(&u, &chat("m", "slow")).await.status })
    };
    wait_until("first upstream", || async { up.requests().len() == 1 }).await;
    let mut body = chat("m", "impatient");
    body["x_timeout_s"] = json!(0.3);
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.json()["error"]["code"], "queue_timeout");
    assert!(a.headers.contains_key("retry-after"));
    assert_eq!(first.await.unwrap(), StatusCode::OK);

    // The upstream's own error is passed through as it is (once the retries are spent).
    up.set_latency(Duration::ZERO);
    up.set_fault(horos_fakeai::Fault::Status(500), Some(3));
    let a = post(&url, &chat("m", "x")).await;
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(a.json()["error"].is_object());
    // An upstream that cannot be reached is a 502 in OpenAI's format.
    let a = post(&url, &chat("gone", "x")).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert_eq!(a.json()["error"]["code"], "upstream_unavailable");
}
