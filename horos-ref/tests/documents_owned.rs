//! Documents belong to someone (issue 46), through the binary: `horos-ref ingest --collection`
//! puts one born-digital PDF in `alpha` and one in `beta`, `run` (with `[ingest]`, embeddings on
//! horos-fakeai, an admin key and two data-plane keys) reads them, and each key reads its own
//! collection only: alice (`collections = ["alpha"]`) searching for words only beta's document
//! holds finds nothing in any mode, bob (`["beta"]`) finds it; alice's `like` of bob's page is
//! refused exactly as a page of a document that does not exist; the model answering alice is
//! given none of bob's page, and bob's answer cites it. The operator sees both documents
//! with their collections (`horos-ref docs`, the admin API), and finds both with `search`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use horos_fakeai::{FakeConfig, FakeServer};
use serde_json::{Value, json};

mod common;

use common::{cli, curl, free_port, json, spawn_run, tiny_pdf, wait_for};

const ADMIN: &str = "owned-admin-key";
const ALICE: &str = "sk-alice-0123456789";
const BOB: &str = "sk-bob-0123456789";

/// The documents of a search answer's hits.
fn documents(v: &Value) -> Vec<i64> {
    v["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits: {v}"))
        .iter()
        .map(|h| h["document"].as_i64().unwrap())
        .collect()
}

#[test]
fn each_key_reads_its_own_collection_and_the_operator_reads_both() {
    let rt = common::runtime();
    let fake = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::write(
        inbox.join("a.pdf"),
        tiny_pdf("Bakery invoices for the winter"),
    )
    .unwrap();
    std::fs::write(
        inbox.join("b.pdf"),
        tiny_pdf("Zebra merger and its secret terms"),
    )
    .unwrap();
    let port = free_port();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n\
             [coordinator]\nbind = \"127.0.0.1:{port}\"\napi_key = \"{ADMIN}\"\n\
             [coordinator.keys.alice]\nkey_sha256 = \"{alice}\"\ncollections = [\"alpha\"]\n\
             [coordinator.keys.bob]\nkey_sha256 = \"{bob}\"\ncollections = [\"beta\"]\n\
             [[coordinator.model]]\nname = \"m\"\nurl = \"{url}\"\n\
             [ingest]\ninbox = \"inbox\"\nembeddings_url = \"{url}\"\n\
             embeddings_model = \"fake-embed\"\ndpi = 50\n",
            alice = horos_testkit::sha256_hex(ALICE),
            bob = horos_testkit::sha256_hex(BOB),
            url = fake.url()
        ),
    )
    .unwrap();

    // Ingested into their collections; a bad name is refused before anything is queued.
    let mut ids = Vec::new();
    for (file, collection) in [("a.pdf", "alpha"), ("b.pdf", "beta")] {
        let out = cli(
            &config,
            &["--json", "ingest", file, "--collection", collection],
        );
        let queued = json(&out);
        assert_eq!(queued["status"], "queued", "{queued}");
        assert_eq!(queued["collection"], collection, "{queued}");
        ids.push(queued["document"].as_i64().unwrap());
    }
    let (a, b) = (ids[0], ids[1]);
    let bad = cli(&config, &["ingest", "a.pdf", "--collection", "../beta"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not a collection name"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    let log = dir.path().join("run.log");
    let _run = spawn_run(&config, &log);
    let mut docs = Value::Null;
    wait_for("the documents ingested", Duration::from_secs(120), || {
        docs = json(&cli(&config, &["--json", "docs"]));
        docs.as_array()
            .is_some_and(|d| d.len() == 2 && d.iter().all(|d| d["status"] != "pending"))
    });
    // The operator's command line sees both, each in its collection.
    let shown: Vec<(i64, &str, &str)> = docs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["id"].as_i64().unwrap(),
                d["status"].as_str().unwrap(),
                d["collection"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [(a, "done", "alpha"), (b, "done", "beta")],
        "{docs}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let text = String::from_utf8_lossy(&cli(&config, &["docs"]).stdout).into_owned();
    assert!(
        text.contains("collection=alpha") && text.contains("collection=beta"),
        "{text}"
    );
    let found = json(&cli(&config, &["--json", "search", "zebra merger"]));
    assert_eq!(found[0]["document"], b, "{found}");

    let base = format!("http://127.0.0.1:{port}");
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    let post = |path: &str, body: Value, key: Option<&str>| {
        curl("POST", &format!("{base}{path}"), Some(&body), key)
    };

    // Words only bob's document holds: alice finds nothing in any mode; bob finds his page.
    for mode in ["text", "vector", "hybrid"] {
        let q = json!({"query": "zebra merger secret terms", "mode": mode});
        let (code, v) = post("/v1/search", q.clone(), Some(ALICE));
        assert_eq!(code, 200, "{mode}: {v}");
        assert!(
            !documents(&v).contains(&b),
            "{mode}: alice found bob's page: {v}"
        );
        let (code, v) = post("/v1/search", q, Some(BOB));
        assert_eq!(code, 200, "{mode}: {v}");
        assert_eq!(documents(&v).first(), Some(&b), "{mode}: {v}");
        assert!(
            !documents(&v).contains(&a),
            "{mode}: bob found alice's page: {v}"
        );
    }
    // Naming bob's document, or asking for more collections in the body, changes nothing.
    for body in [
        json!({"query": "zebra", "document": b}),
        json!({"query": "zebra", "collections": ["beta"], "collection": "*"}),
    ] {
        let (code, v) = post("/v1/search", body.clone(), Some(ALICE));
        assert_eq!((code, &v["data"]), (200, &json!([])), "{body}: {v}");
    }
    // Her own words she finds.
    let (code, v) = post(
        "/v1/search",
        json!({"query": "bakery invoices"}),
        Some(ALICE),
    );
    assert_eq!((code, documents(&v)), (200, vec![a]), "{v}");

    // A page as the question: bob's page is unknown to alice, refused as a document that does
    // not exist is (same status, same message but for the id); his own page bob may use.
    let like = |d: i64| json!({"like": {"document": d, "page": 1}});
    let (code, refused) = post("/v1/search", like(b), Some(ALICE));
    let (unknown_code, unknown) = post("/v1/search", like(b + 1000), Some(ALICE));
    assert_eq!((code, unknown_code), (400, 400), "{refused} / {unknown}");
    let shape = |v: &Value, d: i64| {
        let mut e = v["error"].clone();
        e["message"] = json!(e["message"].as_str().unwrap().replace(&d.to_string(), "D"));
        e
    };
    assert_eq!(shape(&refused, b), shape(&unknown, b + 1000));
    let (code, v) = post("/v1/search", like(b), Some(BOB));
    assert_eq!(code, 200, "{v}");
    assert_eq!(documents(&v).first(), Some(&b), "{v}");
    // An image of bob's page as alice's question finds none of his pages.
    let image = {
        use base64::Engine as _;
        let mut conn = rusqlite::Connection::open(dir.path().join("ingest/ingest.db")).unwrap();
        let info = ingest_pipeline::store::page_info(&mut conn, b, 1)
            .unwrap()
            .unwrap();
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(info.image_path).unwrap())
    };
    let (code, v) = post("/v1/search", json!({"image": image}), Some(ALICE));
    assert_eq!(code, 200, "{v}");
    assert!(!documents(&v).contains(&b), "{v}");

    // An answer: the model is given alice's pages only (her bakery page may be found by
    // meaning), never a word of bob's page, and cites none of his; bob's answer cites his page.
    let chats = || -> Vec<String> {
        fake.requests()
            .into_iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .map(|r| r.body)
            .collect()
    };
    let before = chats().len();
    let question = json!({"question": "What are the zebra merger's secret terms?", "model": "m"});
    let (code, v) = post("/v1/answers", question.clone(), Some(ALICE));
    assert_eq!(code, 200, "{v}");
    let cited: Vec<i64> = v["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["document"].as_i64().unwrap())
        .collect();
    assert!(!cited.contains(&b), "{v}");
    let sent = chats();
    assert!(
        sent[before..]
            .iter()
            .all(|body| !body.contains("its secret terms")),
        "bob's page was sent to the model for alice: {:?}",
        &sent[before..]
    );
    let (code, v) = post("/v1/answers", question, Some(BOB));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["citations"][0]["document"], b, "{v}");
    assert!(chats().last().unwrap().contains("its secret terms"));

    // Without a key: refused before anything is searched. The admin API lists both.
    let (code, _) = post("/v1/search", json!({"query": "zebra"}), None);
    assert_eq!(code, 401);
    let (code, listed) = curl(
        "GET",
        &format!("{base}/api/v1/documents"),
        None,
        Some(ADMIN),
    );
    assert_eq!(code, 200, "{listed}");
    let collections: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["collection"].as_str().unwrap())
        .collect();
    assert_eq!(collections, ["alpha", "beta"], "{listed}");
    let (code, _) = curl(
        "GET",
        &format!("{base}/api/v1/documents"),
        None,
        Some(ALICE),
    );
    assert_eq!(code, 401, "a data-plane key is no admin key");
}
