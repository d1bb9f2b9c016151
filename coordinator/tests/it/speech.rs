//! Text to speech through the coordinator: `POST /v1/audio/speech` admitted like every `/v1/`
//! route (an unknown key 401, a key without the model 403), its fields checked before it is
//! forwarded (a missing `input` is a 400 naming it), the upstream's audio streamed back as it
//! comes with its content type, usage counted in input characters; and a `speech` job whose
//! result holds the audio.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use horos_coordinator::{CoordinatorConfig, StaticUpstream, VirtualKey};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, mpsc};

use crate::common::*;

/// A variable every test process has, standing in for a key's (tests never write the
/// environment).
const TEAM_KEY_VAR: &str = "PATH";

/// A body of the frames a channel sends.
struct Frames(mpsc::Receiver<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The audio the fake speaks for `input`: a WAV header, then one 16-bit sample per byte of
/// the input (so longer text is longer audio), in two parts.
fn audio(input: &str) -> (Bytes, Bytes) {
    let data: Vec<u8> = input.bytes().flat_map(|b| [b, 0]).collect();
    let mut head = b"RIFF".to_vec();
    head.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    head.extend_from_slice(b"WAVEfmt ");
    head.extend_from_slice(&16u32.to_le_bytes());
    head.extend_from_slice(&[1, 0, 1, 0]);
    head.extend_from_slice(&16_000u32.to_le_bytes());
    head.extend_from_slice(&32_000u32.to_le_bytes());
    head.extend_from_slice(&[2, 0, 16, 0]);
    head.extend_from_slice(b"data");
    head.extend_from_slice(&(data.len() as u32).to_le_bytes());
    (Bytes::from(head), Bytes::from(data))
}

/// A speech server: answers `POST /v1/audio/speech` with [`audio`] as `audio/wav`, streamed in
/// two frames: the header at once, the samples once `hold` is notified (at once without one).
/// Records what it was sent.
async fn speech_server(hold: Option<Arc<Notify>>) -> (String, Arc<Mutex<Vec<(String, Value)>>>) {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = l.accept().await.unwrap();
            let (s, hold) = (Arc::clone(&s), hold.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (s, hold) = (Arc::clone(&s), hold.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let body = req.into_body().collect().await?.to_bytes();
                        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        s.lock().unwrap().push((path, v.clone()));
                        let (head, data) = audio(v["input"].as_str().unwrap_or(""));
                        let (tx, rx) = mpsc::channel(2);
                        tokio::spawn(async move {
                            tx.send(head).await.unwrap();
                            if let Some(h) = hold {
                                h.notified().await;
                            }
                            let _ = tx.send(data).await;
                        });
                        Ok::<_, hyper::Error>(
                            http::Response::builder()
                                .header("content-type", "audio/wav")
                                .body(Frames(rx))
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

fn keyed_config(dir: &std::path::Path) -> CoordinatorConfig {
    let other_sha: String = Sha256::digest(b"sk-chat-only")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    CoordinatorConfig {
        state_path: Some(dir.join("state.db")),
        keys: BTreeMap::from([
            (
                "team".to_owned(),
                VirtualKey {
                    key_env: Some(TEAM_KEY_VAR.into()),
                    models: vec!["voice".into()],
                    ..VirtualKey::default()
                },
            ),
            (
                "chatter".to_owned(),
                VirtualKey {
                    key_sha256: Some(other_sha),
                    models: vec!["chat".into()],
                    ..VirtualKey::default()
                },
            ),
        ]),
        ..config()
    }
}

async fn as_key(method: Method, url: &str, key: &str, body: Option<&Value>) -> Answer {
    let auth = format!("Bearer {key}");
    call(
        method,
        url,
        body.map(|b| serde_json::to_vec(b).unwrap()),
        &[("authorization", auth.as_str())],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_is_admitted_checked_streamed_and_counted_in_characters() {
    let hold = Arc::new(Notify::new());
    let (url, seen) = speech_server(Some(Arc::clone(&hold))).await;
    let dir = tempfile::tempdir().unwrap();
    let c = start(
        keyed_config(dir.path()),
        Arc::new(
            StaticUpstream::new()
                .with("voice", url.clone())
                .with("chat", url),
        ),
    )
    .await;
    let team = std::env::var(TEAM_KEY_VAR).unwrap();
    let speech = format!("{}/v1/audio/speech", c.url());
    let text = "Hello, speech.";
    let request = json!({"model": "voice", "input": text, "voice": "en", "response_format": "wav"});

    // Admission: an unknown key, a key without the model.
    let a = as_key(Method::POST, &speech, "sk-nobody", Some(&request)).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text());
    let a = as_key(Method::POST, &speech, "sk-chat-only", Some(&request)).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text());
    assert_eq!(a.json()["error"]["param"], "model");
    // The fields, before anything is forwarded.
    let a = as_key(
        Method::POST,
        &speech,
        &team,
        Some(&json!({"model": "voice", "voice": "en"})),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    assert_eq!(a.json()["error"]["param"], "input");
    let a = as_key(
        Method::POST,
        &speech,
        &team,
        Some(&json!({"model": "voice", "input": "x", "response_format": "ogg"})),
    )
    .await;
    assert_eq!(a.json()["error"]["param"], "response_format");
    assert!(seen.lock().unwrap().is_empty(), "nothing forwarded yet");

    // The audio streams back: its header arrives while the upstream still holds the samples.
    let req = Request::post(&speech)
        .header("authorization", format!("Bearer {team}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(request.to_string())))
        .unwrap();
    let resp = http().request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "audio/wav");
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the first bytes come before the upstream ends")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    let (head, data) = audio(text);
    assert_eq!(first, head);
    hold.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, data);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "/v1/audio/speech");
        assert_eq!(seen[0].1, request);
    }

    // Usage: one request, its input's characters as prompt tokens.
    let series =
        |what: &str| format!("horos_coordinator_usage_{what}{{caller=\"key:team\",model=\"voice\"");
    let metrics_url = format!("{}/metrics", c.url());
    let mut metrics = String::new();
    for _ in 0..200 {
        metrics = get(&metrics_url).await.text();
        if metrics.contains(&series("requests_total")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let requests = format!("{}}}", series("requests_total"));
    assert_eq!(metric(&metrics, &requests), Some(1.0), "{metrics}");
    let prompt = format!("{},kind=\"prompt\"}}", series("tokens_total"));
    assert_eq!(
        metric(&metrics, &prompt),
        Some(text.chars().count() as f64),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speech_job_keeps_its_audio_in_its_result() {
    let (url, seen) = speech_server(None).await;
    let dir = tempfile::tempdir().unwrap();
    let c = start(
        keyed_config(dir.path()),
        Arc::new(StaticUpstream::new().with("voice", url)),
    )
    .await;
    let team = std::env::var(TEAM_KEY_VAR).unwrap();
    let jobs = format!("{}/v1/jobs", c.url());
    // Checked when submitted, as the synchronous call would be.
    let a = as_key(
        Method::POST,
        &jobs,
        &team,
        Some(&json!({"kind": "speech", "request": {"model": "voice", "input": ""}})),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    assert_eq!(a.json()["error"]["param"], "input");

    let text = "A job that speaks.";
    let a = as_key(
        Method::POST,
        &jobs,
        &team,
        Some(&json!({"kind": "speech", "request": {"model": "voice", "input": text}})),
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text());
    assert_eq!(a.json()["kind"], "speech");
    let id = a.json()["id"].as_i64().unwrap();
    let job = format!("{jobs}/{id}");
    let mut done = Value::Null;
    for _ in 0..400 {
        done = as_key(Method::GET, &job, &team, None).await.json();
        if done["state"] == "succeeded" || done["state"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["state"], "succeeded", "{done}");
    let result = &done["result"];
    assert_eq!(result["content_type"], "audio/wav");
    let audio_bytes = base64::engine::general_purpose::STANDARD
        .decode(result["b64_json"].as_str().unwrap())
        .unwrap();
    let (head, data) = audio(text);
    assert_eq!(audio_bytes, [head, data].concat());
    assert_eq!(result["bytes"], audio_bytes.len());
    assert_eq!(seen.lock().unwrap()[0].1["input"], text);
}
