//! Every error class of the client against the fault-injection server (horos-fakeai), plus streaming,
//! cancellation, connection reuse, the concurrency limit and pass-through fields.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use horos_fakeai::{CRASH_EXIT_CODE, CrashAction, FakeConfig, FakeProcess, FakeServer, Fault};
use horos_testkit::{free_port, wait_until};
use horos_vllm_client::{
    ChatMessage, ChatRequest, Client, ClientConfig, CompletionRequest, ContentPart,
    EmbeddingRequest, Error, ErrorClass, TimeoutPhase,
};
use serde_json::json;

fn chat(text: &str) -> ChatRequest {
    ChatRequest::new("fake-model", vec![ChatMessage::user(text)])
}

async fn server(config: FakeConfig) -> (FakeServer, Client) {
    let server = FakeServer::start(config).await.unwrap();
    let client = Client::new(server.url()).unwrap();
    (server, client)
}

/// How long the server may take to update its counters (it does so asynchronously).
const SETTLE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn endpoints_answer() {
    let (srv, client) = server(FakeConfig::default()).await;
    client.health().await.unwrap();
    // Any page as text, with its content type; an unknown one is the server's status.
    let (text, content_type) = client.get_text("/metrics").await.unwrap();
    assert!(text.contains("vllm:num_requests_running"), "{text}");
    assert_eq!(content_type.as_deref(), Some("text/plain; version=0.0.4"));
    let e = client.get_text("/no-such-page").await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e:?}");
    let models = client.models().await.unwrap();
    assert_eq!(models.data[0].id, "fake-model");
    assert_eq!(models.data[0].extra["max_model_len"], 4096);

    let answer = client.chat(&chat("hello big world")).await.unwrap();
    assert_eq!(answer.text(), "hello big world");
    assert_eq!(answer.finish_reason(), Some("stop"));
    assert_eq!(answer.usage.as_ref().unwrap().completion_tokens, 3);

    let truncated = client
        .chat(&chat("one two three four").max_tokens(2))
        .await
        .unwrap();
    assert_eq!(truncated.text(), "one two ");
    assert_eq!(truncated.finish_reason(), Some("length"));

    let c = client
        .completion(&CompletionRequest::new("fake-model", "the prompt"))
        .await
        .unwrap();
    assert_eq!(c.text(), "the prompt");

    let e = client
        .embeddings(&EmbeddingRequest::new(
            "fake-model",
            vec!["alpha", "beta", "alpha"],
        ))
        .await
        .unwrap();
    let v = e.vectors();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0].len(), 8);
    assert_eq!(v[0], v[2]);
    assert_ne!(v[0], v[1]);
    let norm: f32 = v[1].iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-4);

    let load = client.load().await.unwrap();
    assert_eq!((load.running, load.waiting), (0, 0));
    assert_eq!(srv.stats().requests, 4);
}

#[tokio::test]
async fn streaming_yields_typed_chunks_and_usage() {
    let (_srv, client) = server(FakeConfig::default()).await;
    let mut stream = client.chat_stream(&chat("a b c d")).await.unwrap();
    let mut contents = Vec::new();
    let mut finish = None;
    let mut usage = None;
    let mut role = None;
    while let Some(chunk) = stream.next_item().await {
        let chunk = chunk.unwrap();
        if let Some(c) = chunk.choices.first()
            && c.delta.role.is_some()
        {
            role = c.delta.role.clone();
        }
        if let Some(c) = chunk.content().filter(|c| !c.is_empty()) {
            contents.push(c.to_owned());
        }
        if let Some(f) = chunk.finish_reason() {
            finish = Some(f.to_owned());
        }
        if chunk.usage.is_some() {
            usage = chunk.usage;
        }
    }
    assert_eq!(contents, ["a ", "b ", "c ", "d"]);
    assert_eq!(role.as_deref(), Some("assistant"));
    assert_eq!(finish.as_deref(), Some("stop"));
    assert_eq!(usage.unwrap().completion_tokens, 4);
    // the stream stays ended
    assert!(stream.next_item().await.is_none());

    let summary = client
        .chat_stream(&chat("x y"))
        .await
        .unwrap()
        .collect_text()
        .await
        .unwrap();
    assert_eq!(summary.text, "x y");
    assert_eq!(summary.finish_reason.as_deref(), Some("stop"));

    let mut cs = client
        .completion_stream(&CompletionRequest::new("fake-model", "p q"))
        .await
        .unwrap();
    let mut text = String::new();
    while let Some(c) = cs.next_item().await {
        text.push_str(c.unwrap().text());
    }
    assert_eq!(text, "p q");
}

#[tokio::test]
async fn connection_refused_is_retryable() {
    let port = free_port();
    let client = Client::new(format!("http://127.0.0.1:{port}")).unwrap();
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert!(
        matches!(err, Error::Connect { refused: true, .. }),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Retryable);
    assert!(client.health().await.unwrap_err().is_retryable());
}

#[tokio::test]
async fn status_503_and_429_are_retryable_with_status_and_body() {
    let (srv, client) = server(FakeConfig {
        fault: Fault::Status(503),
        fault_count: Some(1),
        ..FakeConfig::default()
    })
    .await;
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert!(err.body().unwrap().contains("injected error"), "{err}");
    assert_eq!(err.class(), ErrorClass::Retryable);
    // fault_count: the retry succeeds
    assert_eq!(client.chat(&chat("hi")).await.unwrap().text(), "hi");

    srv.set_fault(Fault::Status(429), None);
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert_eq!(err.class(), ErrorClass::Retryable);
    // streaming calls see the status before any chunk
    let err = client.chat_stream(&chat("hi")).await.unwrap_err();
    assert_eq!(err.status(), Some(429));

    srv.set_fault(Fault::Status(500), None);
    assert_eq!(
        client.chat(&chat("hi")).await.unwrap_err().class(),
        ErrorClass::Fatal
    );
}

#[tokio::test]
async fn request_faults_are_bad_requests() {
    let (_srv, client) = server(FakeConfig {
        max_body_bytes: 4096,
        ..FakeConfig::default()
    })
    .await;
    // 400: invalid request (no messages)
    let err = client
        .chat(&ChatRequest::new("fake-model", vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.class(), ErrorClass::BadRequest);
    // 413: over the server's body limit
    let err = client.chat(&chat(&"x".repeat(10_000))).await.unwrap_err();
    assert_eq!(err.status(), Some(413));
    assert_eq!(err.class(), ErrorClass::BadRequest);
    // 422, chosen per request through an extra body field
    let err = client
        .chat(&chat("hi").extra_field("x_fakeai_fault", json!("status:422")))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(422));
    assert_eq!(err.class(), ErrorClass::BadRequest);
    // a file that cannot be read is the request's fault too
    let err = ContentPart::image_file("/nonexistent/image.png")
        .await
        .unwrap_err();
    assert_eq!(err.class(), ErrorClass::BadRequest);
}

#[tokio::test]
async fn hang_hits_the_total_timeout_and_is_retryable() {
    let srv = FakeServer::start(FakeConfig {
        fault: Fault::Hang,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let client =
        Client::with_config(ClientConfig::new(srv.url()).total_timeout(Duration::from_millis(300)))
            .unwrap();
    let started = std::time::Instant::now();
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                phase: TimeoutPhase::Total,
                millis: 300
            }
        ),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(err.class(), ErrorClass::Retryable);
    // the hung request held a server slot; the timeout closed the connection and freed it
    wait_until("the hung request's slot to be freed", SETTLE, || async {
        srv.stats().running == 0
    })
    .await;
}

#[tokio::test]
async fn first_byte_timeout_and_stream_total_timeout() {
    let srv = FakeServer::start(FakeConfig {
        latency: Duration::from_millis(500),
        chunk_latency: Duration::from_millis(200),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let client = Client::with_config(
        ClientConfig::new(srv.url())
            .first_byte_timeout(Duration::from_millis(100))
            .total_timeout(Duration::from_secs(10)),
    )
    .unwrap();
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                phase: TimeoutPhase::FirstByte,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());

    // the total timeout also bounds a stream that trickles
    srv.set_latency(Duration::ZERO);
    let client =
        Client::with_config(ClientConfig::new(srv.url()).total_timeout(Duration::from_millis(500)))
            .unwrap();
    let mut stream = client
        .chat_stream(&chat("a b c d e f g h i j"))
        .await
        .unwrap();
    let mut got = 0;
    let err = loop {
        match stream.next_item().await {
            Some(Ok(_)) => got += 1,
            Some(Err(e)) => break e,
            None => panic!("the stream should time out"),
        }
    };
    assert!((1..10).contains(&got), "{got} chunks");
    assert!(matches!(
        err,
        Error::Timeout {
            phase: TimeoutPhase::Total,
            ..
        }
    ));
}

#[tokio::test]
async fn connection_dropped_mid_stream_is_server_crashed() {
    let (_srv, client) = server(FakeConfig {
        fault: Fault::DropMidStream(3),
        ..FakeConfig::default()
    })
    .await;
    let mut stream = client.chat_stream(&chat("a b c d e f")).await.unwrap();
    let mut ok = 0;
    let err = loop {
        match stream.next_item().await {
            Some(Ok(_)) => ok += 1,
            Some(Err(e)) => break e,
            None => panic!("the stream must not end cleanly"),
        }
    };
    assert_eq!(ok, 3, "the chunks sent before the drop arrive");
    assert!(matches!(err, Error::ConnectionLost(_)), "{err:?}");
    assert_eq!(err.class(), ErrorClass::ServerCrashed);
    assert!(stream.next_item().await.is_none());

    // not streaming: the body is cut in the middle
    let err = client.chat(&chat("hi there")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::ServerCrashed, "{err:?}");
}

#[tokio::test]
async fn reset_before_answer_is_server_crashed() {
    let (_srv, client) = server(FakeConfig {
        fault: Fault::Reset,
        ..FakeConfig::default()
    })
    .await;
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert!(matches!(err, Error::ConnectionLost(_)), "{err:?}");
    assert_eq!(err.class(), ErrorClass::ServerCrashed);
}

#[tokio::test]
async fn malformed_json_is_a_decode_error() {
    let (_srv, client) = server(FakeConfig {
        fault: Fault::MalformedJson,
        ..FakeConfig::default()
    })
    .await;
    let err = client.chat(&chat("hi")).await.unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
    assert!(err.body().unwrap().starts_with("{\"id\""));
    assert_eq!(err.class(), ErrorClass::Fatal);
    let mut stream = client.chat_stream(&chat("hi")).await.unwrap();
    let err = stream.next_item().await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
    assert!(stream.next_item().await.is_none());
}

#[tokio::test]
async fn in_process_crash_breaks_in_flight_requests_then_refuses() {
    let (srv, client) = server(FakeConfig {
        crash_marker: Some("POISON".into()),
        crash_action: CrashAction::StopServer,
        latency: Duration::from_millis(300),
        ..FakeConfig::default()
    })
    .await;
    // a request in flight when the poison pill arrives
    let c2 = client.clone();
    let innocent = tokio::spawn(async move { c2.chat(&chat("innocent")).await });
    wait_until("the innocent request to run", SETTLE, || async {
        srv.stats().running == 1
    })
    .await;
    let err = client.chat(&chat("a POISON pill")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::ServerCrashed, "{err:?}");
    let err = innocent.await.unwrap().unwrap_err();
    assert_eq!(err.class(), ErrorClass::ServerCrashed, "{err:?}");
    assert!(srv.stats().crashed);
    // the server is gone: new calls are refused
    let err = client.chat(&chat("after")).await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Retryable);
}

/// The server runs in a child process (this test binary re-executed) and exits on the crash marker.
#[test]
fn crash_marker_kills_the_server_process() {
    horos_fakeai::run_child_if_requested();
    let mut child = FakeProcess::spawn_self(
        "crash_marker_kills_the_server_process",
        &FakeConfig {
            crash_marker: Some("POISON".into()),
            crash_action: CrashAction::ExitProcess,
            ..FakeConfig::default()
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::new(child.url()).unwrap();
        assert_eq!(client.chat(&chat("fine")).await.unwrap().text(), "fine");
        let err = client.chat(&chat("POISON")).await.unwrap_err();
        assert_eq!(err.class(), ErrorClass::ServerCrashed, "{err:?}");
    });
    let status = child.wait_exit(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(status.code(), Some(CRASH_EXIT_CODE));
}

#[tokio::test]
async fn dropping_a_stream_cancels_the_request() {
    let (srv, client) = server(FakeConfig {
        chunk_latency: Duration::from_millis(50),
        ..FakeConfig::default()
    })
    .await;
    let long = vec!["word"; 200].join(" ");
    let mut stream = client.chat_stream(&chat(&long)).await.unwrap();
    assert!(stream.next_item().await.unwrap().is_ok());
    assert_eq!(srv.stats().running, 1);
    assert_eq!(client.in_flight(), 1);
    drop(stream);
    assert_eq!(client.in_flight(), 0, "the permit is given back at once");
    // the server notices the closed connection at its next chunk and frees the slot,
    // long before the 10 s the answer would take
    wait_until(
        "the cancelled request's slot to be freed",
        SETTLE,
        || async { srv.stats().running == 0 },
    )
    .await;
}

#[tokio::test]
async fn connections_are_reused() {
    let (srv, client) = server(FakeConfig::default()).await;
    for i in 0..20 {
        client.chat(&chat(&format!("n{i}"))).await.unwrap();
    }
    let mut s = client.chat_stream(&chat("a b")).await.unwrap();
    while s.next_item().await.is_some() {}
    drop(s);
    client.chat(&chat("again")).await.unwrap();
    assert_eq!(srv.stats().connections, 1);
}

#[tokio::test]
async fn concurrency_limit_per_server_and_real_running_waiting_counts() {
    // client limit 3 against a server with 8 slots: never more than 3 at once on the server
    let (srv, _) = server(FakeConfig {
        latency: Duration::from_millis(100),
        ..FakeConfig::default()
    })
    .await;
    let client = Client::with_config(ClientConfig::new(srv.url()).max_concurrency(3)).unwrap();
    let tasks: Vec<_> = (0..9)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { c.chat(&chat(&format!("r{i}"))).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(srv.stats().max_running, 3);

    // server with 2 slots, 6 concurrent requests: /metrics shows 2 running and 4 waiting
    let (srv, client) = server(FakeConfig {
        slots: 2,
        latency: Duration::from_millis(1500),
        ..FakeConfig::default()
    })
    .await;
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { c.chat(&chat(&format!("r{i}"))).await })
        })
        .collect();
    wait_until("4 requests waiting", SETTLE, || async {
        srv.stats().waiting == 4
    })
    .await;
    let load = client.load().await.unwrap();
    assert_eq!((load.running, load.waiting), (2, 4));
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let load = client.load().await.unwrap();
    assert_eq!((load.running, load.waiting), (0, 0));
}

#[tokio::test]
async fn extra_fields_and_images_reach_the_server() {
    let (srv, client) = server(FakeConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let png_path = dir.path().join("pixel.png");
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-not-a-real-image";
    std::fs::write(&png_path, png).unwrap();

    let mut req = ChatRequest::new(
        "fake-model",
        vec![ChatMessage::user_parts(vec![
            ContentPart::text("describe"),
            ContentPart::image_file(&png_path).await.unwrap(),
            ContentPart::image_bytes(&[0xff, 0xd8, 0xff, 0xe0, 1, 2], None),
        ])],
    );
    req.response_format = Some(json!({"type": "json_object"}));
    req.extra
        .insert("guided_json".into(), json!({"type": "object"}));
    req.extra.insert("top_k".into(), json!(5));
    let answer = client.chat(&req).await.unwrap();
    assert_eq!(
        answer.text(),
        "describe [image image/png] [image image/jpeg]"
    );
    // unknown response fields are kept, not rejected
    assert_eq!(answer.extra["system_fingerprint"], "horos-fakeai");

    let sent: serde_json::Value =
        serde_json::from_str(&srv.requests().last().unwrap().body).unwrap();
    assert_eq!(sent["guided_json"], json!({"type": "object"}));
    assert_eq!(sent["top_k"], 5);
    assert_eq!(sent["response_format"]["type"], "json_object");
    assert!(sent.get("stream").is_none());
    let url = sent["messages"][0]["content"][1]["image_url"]["url"]
        .as_str()
        .unwrap();
    let b64 = url.strip_prefix("data:image/png;base64,").unwrap();
    use base64::Engine as _;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
        png
    );
}

#[tokio::test]
async fn invalid_urls_are_refused_up_front() {
    assert!(matches!(
        Client::new("https://example.com"),
        Err(Error::InvalidUrl(_))
    ));
    assert!(matches!(Client::new("nope"), Err(Error::InvalidUrl(_))));
}

#[tokio::test]
async fn connect_timeout_is_retryable() {
    // A listener that never accepts, with a backlog of 0: once its queue is full, the kernel drops
    // new SYNs and connecting hangs.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut filler = Vec::new();
    for _ in 0..8 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            filler.push(s);
        }
    }
    let client = Client::with_config(
        ClientConfig::new(format!("http://{addr}")).connect_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let err = client.health().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                phase: TimeoutPhase::Connect,
                millis: 200
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Retryable);
    drop(listener);
}

#[tokio::test]
async fn per_call_time_budget_shares_pool_and_limit() {
    let (srv, client) = server(FakeConfig {
        fault: Fault::Hang,
        fault_count: Some(1),
        ..FakeConfig::default()
    })
    .await;
    assert_eq!(client.timeouts().0, Duration::from_secs(120));
    let budget = client.with_timeouts(Duration::from_millis(200), None);
    let err = budget.chat(&chat("hi")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                phase: TimeoutPhase::Total,
                millis: 200
            }
        ),
        "{err:?}"
    );
    // same pool: the next call reuses the handle's connections and counts against the same limit
    let c2 = client.clone();
    let slow = tokio::spawn(async move {
        c2.chat(&chat("x").extra_field("x_fakeai_latency_ms", json!(300)))
            .await
    });
    wait_until("the slow request to hold a permit", SETTLE, || async {
        budget.in_flight() == 1
    })
    .await;
    slow.await.unwrap().unwrap();
    assert_eq!(client.chat(&chat("ok")).await.unwrap().text(), "ok");
    assert!(srv.stats().connections <= 2);
}
