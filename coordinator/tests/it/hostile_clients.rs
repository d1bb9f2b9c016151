//! Clients that try to hold the coordinator's connections: a body trickled a byte at a time,
//! and more idle connections than the coordinator serves. Real sockets on 127.0.0.1.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use horos_coordinator::{CoordinatorConfig, StaticUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads what the server answers until it closes the connection (at most 10 s: a server that
/// never answers fails the test instead of hanging it).
async fn answer(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    assert!(
        read.is_ok(),
        "no answer within 10 s; got {:?}",
        String::from_utf8_lossy(&out)
    );
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_a_byte_at_a_time_is_answered_408_and_closed() {
    let cfg = CoordinatorConfig {
        body_read_timeout_s: 0.5,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new())).await;
    let s = TcpStream::connect(c.local_addr()).await.unwrap();
    let (mut r, mut w) = s.into_split();
    w.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
          content-length: 1000\r\n\r\n{",
    )
    .await
    .unwrap();
    // One more byte now and then, never the whole body (40 bytes over 8 s at most).
    let trickle = tokio::spawn(async move {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if w.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut out)).await;
    trickle.abort();
    let text = String::from_utf8_lossy(&out);
    assert!(
        read.is_ok(),
        "the connection was still held after 10 s: {text}"
    );
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    c.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_answered_503_and_served_again_once_one_leaves() {
    let cfg = CoordinatorConfig {
        max_connections: 2,
        ..config()
    };
    let c = start(cfg, Arc::new(StaticUpstream::new())).await;
    let addr = c.local_addr();
    // Two idle connections hold both places.
    let a = TcpStream::connect(addr).await.unwrap();
    let _b = TcpStream::connect(addr).await.unwrap();
    let mut third = TcpStream::connect(addr).await.unwrap();
    let text = answer(&mut third).await;
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    assert!(text.contains("too_many_connections"), "{text}");
    // One leaves: a new client is served.
    drop(a);
    wait_until("a place is free again", || async move {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            return false;
        };
        if s.write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .await
            .is_err()
        {
            return false;
        }
        answer(&mut s).await.starts_with("HTTP/1.1 200")
    })
    .await;
    c.shutdown(Duration::from_secs(1)).await;
}

/// A client that asks for a stream and stops reading holds nothing for long: after
/// `write_timeout_s` without progress its connection is closed, the request leaves the in-flight
/// count and the upstream's answer is dropped (the upstream sees its connection close). The
/// upstream here streams without end, as fast as it may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_gives_its_slot_back_after_the_write_timeout() {
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = upstream.local_addr().unwrap();
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<usize>();
    tokio::spawn(async move {
        let (mut s, _) = upstream.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = s.read(&mut head).await;
        s.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
        let event = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
            "x".repeat(8000)
        );
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        let mut sent = 0;
        while s.write_all(chunk.as_bytes()).await.is_ok() {
            sent += chunk.len();
        }
        let _ = closed_tx.send(sent);
    });
    let cfg = CoordinatorConfig {
        write_timeout_s: 1.0,
        ..config()
    };
    let c = start(
        cfg,
        Arc::new(StaticUpstream::new().with("m", format!("http://{up_addr}"))),
    )
    .await;
    let mut client = TcpStream::connect(c.local_addr()).await.unwrap();
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    client
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // The client reads nothing from here on. Within the timeout and the buffers' filling, the
    // upstream's connection is dropped.
    let sent = tokio::time::timeout(Duration::from_secs(30), closed_rx)
        .await
        .expect("the upstream's answer was still being read after 30 s")
        .unwrap();
    assert!(sent > 0);
    let base = c.url();
    wait_until("the request out of the in-flight count", || {
        let base = base.clone();
        async move {
            let m = call(http::Method::GET, &format!("{base}/metrics"), None, &[])
                .await
                .text();
            m.lines()
                .filter(|l| l.starts_with("horos_coordinator_requests_in_flight{"))
                .all(|l| l.ends_with(" 0"))
        }
    })
    .await;
    drop(client);
    c.shutdown(Duration::from_secs(1)).await;
}
