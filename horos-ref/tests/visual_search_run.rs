//! Visual search with a configured late-interaction model, through HTTP and MCP: `horos-ref run`
//! with `[coordinator]` and `[ingest]`'s `visual_url` on horos-fakeai's `/pooling` (one scripted
//! vector per token; a rendered page image's tokens are its own, `horos_fakeai::image_tokens`)
//! ingests three born-digital PDFs. `POST /v1/search` in visual mode ranks first the page whose
//! image the question's tokens name, the MCP `search` tool does in visual and hybrid modes, and
//! once the model's server is gone a visual search answers 503 with its typed error, at once,
//! while full-text search goes on.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use horos_fakeai::{FakeConfig, FakeServer};
use serde_json::{Value, json};

mod common;

use common::{Mcp, cli, free_port, json, spawn_run, tiny_pdf, wait_for};

/// One born-digital page each.
const TEXTS: [&str; 3] = [
    "Installing the stub generator from source",
    "Attribute table of marshalling types and unique pointers",
    "COM interfaces and reference counting",
];

/// `(document, page)` of the best hit of a search answer's hits.
fn best(hits: &Value) -> (i64, i64) {
    let h = &hits[0];
    (
        h["document"].as_i64().unwrap_or(-1),
        h["page"].as_i64().unwrap_or(-1),
    )
}

#[test]
fn visual_search_over_http_and_mcp_with_a_late_interaction_model() {
    let rt = common::runtime();
    let model = rt
        .block_on(FakeServer::start(FakeConfig {
            model: "colpali-fake".into(),
            embedding_dim: 32,
            ..FakeConfig::default()
        }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("inbox")).unwrap();
    for (name, text) in ["a.pdf", "b.pdf", "c.pdf"].iter().zip(TEXTS) {
        std::fs::write(dir.path().join("inbox").join(name), tiny_pdf(text)).unwrap();
    }
    let port = free_port();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n[coordinator]\nbind = \"127.0.0.1:{port}\"\n\
             [ingest]\ninbox = \"inbox\"\nembeddings_url = \"{url}\"\n\
             embeddings_model = \"fake-embed\"\nvisual_url = \"{url}\"\n\
             visual_model = \"colpali-fake\"\ndpi = 50\n",
            url = model.url()
        ),
    )
    .unwrap();
    let mut ids = Vec::new();
    for name in ["a.pdf", "b.pdf", "c.pdf"] {
        let queued = json(&cli(&config, &["--json", "ingest", name]));
        assert_eq!(queued["status"], "queued", "{queued}");
        ids.push(queued["document"].as_i64().unwrap());
    }
    let log = dir.path().join("run.log");
    let run = spawn_run(&config, &log);
    let mut docs = Value::Null;
    wait_for("the documents ingested", Duration::from_secs(120), || {
        docs = json(&cli(&config, &["--json", "docs"]));
        docs.as_array()
            .is_some_and(|d| d.iter().all(|d| d["status"] != "pending"))
    });
    assert!(
        docs.as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "done"),
        "{docs}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // The question names what the fake model sees in b.pdf's page image (its tokens), and
    // words of its text.
    let target = (ids[1], 1);
    let image = {
        let mut conn = rusqlite::Connection::open(dir.path().join("ingest/ingest.db")).unwrap();
        let info = ingest_pipeline::store::page_info(&mut conn, target.0, 1)
            .unwrap()
            .unwrap();
        std::fs::read(info.image_path).unwrap()
    };
    let question = format!(
        "which table lists marshalling types? {}",
        horos_fakeai::image_tokens(&image).join(" ")
    );
    let search = |body: Value| {
        common::curl(
            "POST",
            &format!("http://127.0.0.1:{port}/v1/search"),
            Some(&body),
            None,
        )
    };

    // (a) HTTP, visual: the question embedded by the model, pages ranked by MaxSim.
    let (code, v) = search(json!({"query": question, "mode": "visual", "k": 3}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(best(&v["data"]), target, "{v}");
    let asked = model
        .requests()
        .into_iter()
        .filter(|r| r.path == "/pooling")
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .any(|b| b["input"] == question.as_str() && b["task"] == "token_embed");
    assert!(asked, "the question was not embedded by the pooling model");

    // (b) MCP, visual and hybrid (full text, vectors and MaxSim fused).
    let mut mcp = Mcp::start(&config);
    mcp.initialize();
    for (id, mode) in [(1, "visual"), (2, "hybrid")] {
        let found = mcp.call(
            id,
            "search",
            json!({"query": question, "mode": mode, "k": 3}),
        );
        assert_ne!(found["isError"], true, "{mode}: {found}");
        assert_eq!(
            best(&found["structuredContent"]["hits"]),
            target,
            "{mode}: {found}"
        );
    }
    // Within another document, visual search finds that document's page only.
    let other = mcp.call(
        3,
        "search",
        json!({"query": question, "mode": "visual", "document": ids[2]}),
    );
    assert_eq!(
        best(&other["structuredContent"]["hits"]),
        (ids[2], 1),
        "{other}"
    );
    drop(mcp.stdin);
    assert!(mcp.child.wait().unwrap().success());

    // (c) The model's server gone: a visual search is refused at once with the typed 503, not
    // a hang or a 500; full text, which needs no model, still answers.
    model.stop();
    rt.block_on(model.stopped());
    let started = Instant::now();
    let (code, v) = search(json!({"query": question, "mode": "visual"}));
    assert_eq!(code, 503, "{v}");
    assert_eq!(v["error"]["code"], "search_unavailable", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let (code, v) = search(json!({"query": "marshalling types", "mode": "text"}));
    assert_eq!((code, best(&v["data"])), (200, target), "{v}");
    drop(run);
}
