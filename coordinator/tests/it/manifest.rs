//! The model manifest, client profiles and the requestor registry over real HTTP, against
//! fakeai upstreams: a chat rendered through a model's template and sent to its completion
//! endpoint (whole and streamed), thinking mode from the manifest and from the request, the
//! reasoning split from the answer, `/v1/rerank` routed to the model's server, a profile's alias
//! changing where a request goes (and changed at run time through the admin API), and a client
//! over its pattern answered 429 with `Retry-After`, seen on `/metrics` and `/api/v1/status`.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::*;
use horos_coordinator::Cooldown;
use horos_coordinator::{
    ClientProfile, CompletionApi, CoordinatorConfig, Limits, ModelManifest, StaticUpstream,
    ThinkingVia,
};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use http::{Method, StatusCode};
use serde_json::{Value, json};

/// The `data:` payloads of an SSE body, `[DONE]` left out.
fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

fn joined(ev: &[Value], key: &str) -> String {
    ev.iter()
        .filter_map(|e| e["choices"][0]["delta"][key].as_str())
        .collect()
}

async fn echo(model: &str) -> FakeServer {
    FakeServer::start(FakeConfig {
        model: model.into(),
        reply: Reply::Echo,
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_templated_model_answers_chats_through_its_completion_endpoint() {
    // The fake echoes the prompt it receives: the answer is the rendered template.
    let up = echo("tmpl").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("think.jinja");
    std::fs::write(
        &file,
        "{%- for m in messages %}[{{ m.role }}] {{ m.content | trim }}\n{% endfor -%}\n\
         {% if thinking %}THINK-ON{% elif thinking == false %}THINK-OFF{% endif %} >",
    )
    .unwrap();
    let mut cfg = config();
    cfg.manifest.insert(
        "chatml-model".into(),
        ModelManifest {
            template: Some("chatml".into()),
            stop: vec!["END".into()],
            ..ModelManifest::default()
        },
    );
    cfg.manifest.insert(
        "file-model".into(),
        ModelManifest {
            template_file: Some(file),
            thinking: Some(false),
            completion_api: CompletionApi::Openai,
            ..ModelManifest::default()
        },
    );
    let upstream = StaticUpstream::new()
        .with("chatml-model", up.url())
        .with("file-model", up.url());
    let c = start(cfg, Arc::new(upstream)).await;
    let url = format!("{}/v1/chat/completions", c.url());

    let body = json!({"model": "chatml-model", "max_tokens": 50, "stop": "STOP",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]});
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let v = a.json();
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["model"], "chatml-model");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    let prompt = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
                  <|im_start|>assistant\n";
    assert_eq!(v["choices"][0]["message"]["content"], prompt, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{v}");
    let sent = &up.requests()[0];
    assert_eq!(sent.path, "/v1/completions");
    let sent: Value = serde_json::from_str(&sent.body).unwrap();
    assert_eq!(sent["prompt"], prompt);
    assert_eq!(sent["stop"], json!(["STOP", "<|im_end|>", "END"]));
    assert_eq!(sent["max_tokens"], 50);
    assert!(sent.get("messages").is_none(), "{sent}");

    // Streamed: chat.completion.chunk events, the role first, the same text, one [DONE].
    let mut body = body.clone();
    body["stream"] = json!(true);
    let a = post(&url, &body).await;
    assert_eq!(a.status, StatusCode::OK);
    let text = a.text();
    assert_eq!(text.matches("data: [DONE]").count(), 1, "{text}");
    let ev = events(&text);
    assert!(ev.len() > 2, "{text}");
    assert!(ev.iter().all(|e| e["object"] == "chat.completion.chunk"));
    assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(joined(&ev, "content"), prompt);
    assert_eq!(ev.last().unwrap()["choices"][0]["finish_reason"], "stop");

    // Thinking: off from the manifest, on from the request (x_thinking), in the template.
    let ask = |thinking: Option<bool>| {
        let mut b =
            json!({"model": "file-model", "messages": [{"role": "user", "content": " Q "}]});
        if let Some(t) = thinking {
            b["x_thinking"] = json!(t);
        }
        b
    };
    let v = post(&url, &ask(None)).await.json();
    assert_eq!(
        v["choices"][0]["message"]["content"], "[user] Q\nTHINK-OFF >",
        "{v}"
    );
    let v = post(&url, &ask(Some(true))).await.json();
    assert_eq!(
        v["choices"][0]["message"]["content"], "[user] Q\nTHINK-ON >",
        "{v}"
    );

    // A chat a text template cannot carry is refused before it goes anywhere.
    let n = up.requests().len();
    let a = post(
        &url,
        &json!({"model": "chatml-model", "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f"}}]}),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    assert_eq!(a.json()["error"]["param"], "tools");
    assert_eq!(up.requests().len(), n);
    c.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_template_renders_its_chats_on_templated_models_only() {
    // The fake echoes what it receives: the answer is the prompt as rendered.
    let up = echo("tmpl").await;
    let mut cfg = CoordinatorConfig {
        api_key: Some("admin".into()),
        ..config()
    };
    cfg.manifest.insert(
        "chatml-model".into(),
        ModelManifest {
            template: Some("chatml".into()),
            ..ModelManifest::default()
        },
    );
    cfg.profiles.insert(
        "alpaca-app".into(),
        ClientProfile {
            template: Some("alpaca".into()),
            ..ClientProfile::default()
        },
    );
    let upstream = StaticUpstream::new()
        .with("chatml-model", up.url())
        .with("plain-model", up.url());
    let c = start(cfg, Arc::new(upstream)).await;
    let url = format!("{}/v1/chat/completions", c.url());
    let ask = |model: &str, client: Option<&str>| {
        let mut b = json!({"model": model, "messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]});
        if let Some(id) = client {
            b["x_client_id"] = json!(id);
        }
        b
    };

    // The profile's alpaca, not the model's chatml; its stop string added to the model's.
    let v = post(&url, &ask("chatml-model", Some("alpaca-app")))
        .await
        .json();
    let alpaca = "Be brief.\n\n### Instruction:\nHi\n\n### Response:\n";
    assert_eq!(v["choices"][0]["message"]["content"], alpaca, "{v}");
    let sent: Value = serde_json::from_str(&up.requests()[0].body).unwrap();
    assert_eq!(sent["prompt"], alpaca);
    assert_eq!(sent["stop"], json!(["### Instruction:", "<|im_end|>"]));
    // Any other caller gets the model's own.
    let v = post(&url, &ask("chatml-model", None)).await.json();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n",
        "{v}"
    );
    // A model whose server renders its own template gets the messages as they came.
    let a = post(&url, &ask("plain-model", Some("alpaca-app"))).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let sent: Value = serde_json::from_str(&up.requests().last().unwrap().body).unwrap();
    assert_eq!(up.requests().last().unwrap().path, "/v1/chat/completions");
    assert_eq!(sent["messages"][1]["content"], "Hi", "{sent}");
    assert!(sent.get("prompt").is_none(), "{sent}");

    // Set at run time: an unknown template is refused and changes nothing.
    let url = format!("{}/api/v1/profiles/alpaca-app", c.url());
    let auth = [("authorization", "Bearer admin")];
    let bad = serde_json::to_vec(&json!({"template": "jinja2"})).unwrap();
    let a = call(Method::PUT, &url, Some(bad), &auth).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text());
    assert!(a.text().contains("chatml, alpaca or raw"), "{}", a.text());
    let raw = serde_json::to_vec(&json!({"template": "raw"})).unwrap();
    let a = call(Method::PUT, &url, Some(raw), &auth).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let chat_url = format!("{}/v1/chat/completions", c.url());
    let v = post(&chat_url, &ask("chatml-model", Some("alpaca-app")))
        .await
        .json();
    assert_eq!(
        v["choices"][0]["message"]["content"], "Be brief.\n\nHi",
        "{v}"
    );
    c.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_is_switched_and_reasoning_is_split_from_the_answer() {
    let up = FakeServer::start(FakeConfig {
        model: "thinker".into(),
        reply: Reply::Fixed("<think>let me see</think> forty two".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let mut cfg = config();
    cfg.manifest.insert(
        "thinker".into(),
        ModelManifest {
            thinking: Some(false),
            ..ModelManifest::default()
        },
    );
    cfg.manifest.insert(
        "qwen".into(),
        ModelManifest {
            thinking: Some(true),
            thinking_via: Some(ThinkingVia::System),
            split_reasoning: Some(false),
            ..ModelManifest::default()
        },
    );
    let upstream = StaticUpstream::new()
        .with("thinker", up.url())
        .with("qwen", up.url())
        .with("plain", up.url());
    let c = start(cfg, Arc::new(upstream)).await;
    let url = format!("{}/v1/chat/completions", c.url());

    // Off by the manifest: chat_template_kwargs.enable_thinking = false goes upstream.
    let v = post(&url, &chat("thinker", "q")).await.json();
    let sent: Value = serde_json::from_str(&up.requests()[0].body).unwrap();
    assert_eq!(
        sent["chat_template_kwargs"]["enable_thinking"], false,
        "{sent}"
    );
    // The answer's reasoning is moved out of its content.
    assert_eq!(v["choices"][0]["message"]["content"], "forty two", "{v}");
    assert_eq!(
        v["choices"][0]["message"]["reasoning_content"],
        "let me see"
    );
    // On by the request; the stream's deltas split too (the tags cut across chunks).
    let mut b = chat("thinker", "q");
    b["x_thinking"] = json!(true);
    b["stream"] = json!(true);
    let text = post(&url, &b).await.text();
    let sent: Value = serde_json::from_str(&up.requests()[1].body).unwrap();
    assert_eq!(
        sent["chat_template_kwargs"]["enable_thinking"], true,
        "{sent}"
    );
    let ev = events(&text);
    assert_eq!(joined(&ev, "reasoning_content"), "let me see", "{text}");
    assert_eq!(joined(&ev, "content").trim(), "forty two", "{text}");
    assert_eq!(text.matches("data: [DONE]").count(), 1);

    // Through a system instruction, the client's system message kept; no split asked.
    let v = post(
        &url,
        &json!({"model": "qwen", "messages": [{"role": "system", "content": "Be kind."},
                {"role": "user", "content": "q"}]}),
    )
    .await
    .json();
    let sent: Value = serde_json::from_str(&up.requests()[2].body).unwrap();
    assert_eq!(sent["messages"][0]["content"], "Be kind.\n/think", "{sent}");
    assert!(sent.get("chat_template_kwargs").is_none());
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "<think>let me see</think> forty two"
    );
    let mut b = chat("qwen", "q");
    b["x_thinking"] = json!(false);
    post(&url, &b).await;
    let sent: Value = serde_json::from_str(&up.requests()[3].body).unwrap();
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "/no_think"})
    );
    // A model without a manifest entry takes a request's x_thinking as template kwargs.
    let mut b = chat("plain", "q");
    b["x_thinking"] = json!(false);
    post(&url, &b).await;
    let sent: Value = serde_json::from_str(&up.requests()[4].body).unwrap();
    assert_eq!(
        sent["chat_template_kwargs"],
        json!({"enable_thinking": false}),
        "{sent}"
    );
    post(&url, &chat("plain", "q")).await;
    let sent: Value = serde_json::from_str(&up.requests()[5].body).unwrap();
    assert!(sent.get("chat_template_kwargs").is_none(), "{sent}");
    let a = post(
        &url,
        &json!({"model": "qwen", "messages": [], "x_thinking": "yes"}),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["error"]["param"], "x_thinking");
    c.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_profiles_and_cooldowns() {
    let a_up = echo("model-a").await;
    let b_up = echo("model-b").await;
    let mut cfg = CoordinatorConfig {
        api_key: Some("admin".into()),
        ..config()
    };
    cfg.profiles.insert(
        "app".into(),
        ClientProfile {
            aliases: BTreeMap::from([("fast".to_owned(), "model-b".to_owned())]),
            priority: Some(1),
            ..ClientProfile::default()
        },
    );
    cfg.clients.insert(
        "bursty".into(),
        Limits {
            cooldown: Some(Cooldown {
                requests: 2,
                window_s: 600.0,
                cooldown_s: 120.0,
            }),
            ..Limits::default()
        },
    );
    let upstream = StaticUpstream::new()
        .with("model-a", a_up.url())
        .with("model-b", b_up.url());
    let c = start(cfg, Arc::new(upstream)).await;
    let chat_url = format!("{}/v1/chat/completions", c.url());

    // Rerank goes to the model's server, the answer passed back.
    let a = post(
        &format!("{}/v1/rerank", c.url()),
        &json!({"model": "model-a", "query": "red apple", "x_client_id": "app",
                "documents": ["a blue car", "red apple pie", "an apple"]}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let order: Vec<u64> = a.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [1, 2, 0]);
    assert_eq!(a_up.requests()[0].path, "/v1/rerank");
    assert!(!a_up.requests()[0].body.contains("x_client_id"));

    // A profile's alias: `fast` is model-b for the app, unknown for anyone else.
    let mut b = chat("fast", "hello");
    b["x_client_id"] = json!("app");
    let a = post(&chat_url, &b).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(b_up.requests().len(), 1);
    let a = post(&chat_url, &chat("fast", "hello")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text());
    // Changed at run time, behind the admin key: now model-a, and model-b is not allowed.
    let profile =
        serde_json::to_vec(&json!({"aliases": {"fast": "model-a"}, "models": ["model-a"]}))
            .unwrap();
    let url = format!("{}/api/v1/profiles/app", c.url());
    let denied = call(Method::PUT, &url, Some(profile.clone()), &[]).await;
    assert_eq!(denied.status, StatusCode::UNAUTHORIZED);
    let auth = [("authorization", "Bearer admin")];
    let put = call(Method::PUT, &url, Some(profile), &auth).await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text());
    let got = call(
        Method::GET,
        &format!("{}/api/v1/profiles", c.url()),
        None,
        &auth,
    )
    .await;
    assert_eq!(got.json()["profiles"]["app"]["aliases"]["fast"], "model-a");
    let a = post(&chat_url, &b).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a_up.requests().len(), 2);
    assert_eq!(b_up.requests().len(), 1);
    let mut direct = chat("model-b", "x");
    direct["x_client_id"] = json!("app");
    let a = post(&chat_url, &direct).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text());

    // Cooldown: two requests pass, the third starts the client's cooldown: 429 + Retry-After.
    let mut b = chat("model-a", "x");
    b["x_client_id"] = json!("bursty");
    for _ in 0..2 {
        assert_eq!(post(&chat_url, &b).await.status, StatusCode::OK);
    }
    for _ in 0..2 {
        let a = post(&chat_url, &b).await;
        assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text());
        let after: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((100..=120).contains(&after), "{after}");
        assert_eq!(a.json()["error"]["code"], "client_cooldown");
    }
    // Other clients are not held.
    assert_eq!(
        post(&chat_url, &chat("model-a", "x")).await.status,
        StatusCode::OK
    );
    let m = get(&format!("{}/metrics", c.url())).await.text();
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_caller_requests_total{caller=\"client:bursty\"}"
        ),
        Some(4.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "horos_coordinator_caller_requests_total{caller=\"client:app\"}"
        ),
        Some(4.0),
    );
    let left = metric(
        &m,
        "horos_coordinator_caller_cooldown_seconds{caller=\"client:bursty\"}",
    )
    .unwrap();
    assert!(left > 60.0 && left <= 120.0, "{left}");
    let s = call(
        Method::GET,
        &format!("{}/api/v1/status", c.url()),
        None,
        &auth,
    )
    .await
    .json();
    let r = &s["requestors"]["client:bursty"];
    assert_eq!(r["requests"], 4, "{s}");
    assert_eq!(r["refused"], 2);
    assert!(r["cooldown_until_ms"].as_u64().unwrap() > r["last_seen_ms"].as_u64().unwrap());
    // The status page's Requestors table: each caller's counts, and the cooldown left.
    let page = get(&format!("{}/status", c.url())).await.text();
    let table = &page[page
        .find("<h2>Requestors</h2>")
        .expect("a Requestors table")..];
    let row = &table[table.find("<td>client:bursty</td>").expect("bursty's row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.starts_with("<td>client:bursty</td><td>4</td><td>2</td>"),
        "{row}"
    );
    assert!(row.ends_with(" s left</td>"), "{row}");
    c.shutdown(std::time::Duration::from_secs(1)).await;
}
