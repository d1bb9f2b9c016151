//! `horos-ref mcp`: the MCP handshake and tool calls over the binary's stdin/stdout, as an MCP
//! client speaks them; and document submission confined to the `[ingest]` inbox.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

mod common;

use common::{BIN, Mcp};

fn setup(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("inbox")).unwrap();
    std::fs::write(dir.join("inbox/report.pdf"), b"%PDF-1.4 a document body").unwrap();
    std::fs::write(dir.join("secret.pdf"), b"%PDF-1.4 outside the inbox").unwrap();
    let config = dir.join("horos.toml");
    std::fs::write(
        &config,
        "database = \"jobs.db\"\n\
         [[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:9\"\nmodel = \"smollm2\"\n\
         [ingest]\ninbox = \"inbox\"\nembeddings_url = \"http://127.0.0.1:9\"\nembeddings_model = \"minilm\"\n",
    )
    .unwrap();
    config
}

#[test]
fn mcp_handshake_and_tools_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let mut mcp = Mcp::start(&config);

    let init = mcp.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test-client", "version": "1"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "horos-ref", "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let list = mcp.request(2, "tools/list", json!({}));
    let mut names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "answer", "dead", "document", "ingest", "models", "search", "stats", "status", "submit"
        ]
    );

    let submitted = mcp.call(
        3,
        "submit",
        json!({"queue": "think", "prompt": "hello", "priority": 2}),
    );
    assert_eq!(submitted["isError"], false, "{submitted}");
    let id = submitted["structuredContent"]["id"].as_i64().unwrap();
    let status = mcp.call(4, "status", json!({"id": id}));
    assert_eq!(status["structuredContent"]["state"], "ready", "{status}");
    let stats = mcp.call(5, "stats", json!({}));
    assert_eq!(
        stats["structuredContent"]["queues"][0]["ready"], 1,
        "{stats}"
    );

    // A tool failure is a result with isError, not a protocol error.
    let bad = mcp.call(6, "submit", json!({"queue": "nope", "prompt": "x"}));
    assert_eq!(bad["isError"], true, "{bad}");
    let missing = mcp.call(7, "status", json!({"id": 999_999}));
    assert_eq!(missing["isError"], true, "{missing}");

    // Documents only from the inbox.
    let doc = mcp.call(8, "ingest", json!({"path": "report.pdf"}));
    assert_eq!(doc["structuredContent"]["status"], "queued", "{doc}");
    let again = mcp.call(
        9,
        "ingest",
        json!({"path": dir.path().join("inbox/report.pdf")}),
    );
    assert_eq!(again["structuredContent"]["status"], "known", "{again}");
    let escape = mcp.call(10, "ingest", json!({"path": "../secret.pdf"}));
    assert_eq!(escape["isError"], true, "{escape}");
    assert!(
        escape["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("outside the inbox"),
        "{escape}"
    );

    // Search: a page read for the document (written here as the pipeline would), found
    // whatever text is typed.
    {
        use ingest_pipeline::store;
        let mut conn = rusqlite::Connection::open(dir.path().join("ingest/ingest.db")).unwrap();
        let id = store::documents(&mut conn).unwrap()[0].id;
        store::insert_page(
            &mut conn,
            &store::PageImage {
                doc_id: id,
                page_no: 1,
                width: 10,
                height: 10,
                image_bytes: 0,
                image_path: "page-1.png",
                tiles: 1,
            },
        )
        .unwrap();
        let reading = ingest_pipeline::vision::Reading {
            text: "The C++ runtime reads quarterly revenue tables.".into(),
            ..Default::default()
        };
        assert!(store::store_page_text(&mut conn, id, 1, &reading, "test", &[]).unwrap());
    }
    for query in ["quarterly revenue", "C++ \"unbalanced", "NEAR( OR *", ""] {
        let found = mcp.call(12, "search", json!({"query": query, "k": 5}));
        assert_ne!(found["isError"], true, "{query}: {found}");
        let hits = found["structuredContent"]["hits"].as_array().unwrap();
        if query == "quarterly revenue" || query.starts_with("C++") {
            assert_eq!(hits.len(), 1, "{query}: {found}");
            assert_eq!(hits[0]["page"], 1, "{found}");
        }
    }

    // The document's report: pending, one page read so far.
    let report = mcp.call(13, "document", json!({"id": 1}));
    assert_eq!(
        report["structuredContent"]["document"]["status"], "pending",
        "{report}"
    );
    assert_eq!(report["structuredContent"]["pages"], 1, "{report}");
    let none = mcp.call(14, "document", json!({"id": 999}));
    assert_eq!(none["isError"], true, "{none}");

    // An unknown method is a JSON-RPC error.
    let unknown = mcp.request(11, "resources/list", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");

    drop(mcp.stdin);
    assert!(mcp.child.wait().unwrap().success());
}

#[test]
fn the_ingest_subcommand_is_confined_to_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let run = |path: &str| {
        Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .args(["--json", "ingest", path])
            .output()
            .unwrap()
    };
    let ok = run("report.pdf");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["status"], "queued");
    let outside = run(dir.path().join("secret.pdf").to_str().unwrap());
    assert!(!outside.status.success());
    assert!(String::from_utf8_lossy(&outside.stderr).contains("outside the inbox"));
    let link = dir.path().join("inbox/link.pdf");
    std::os::unix::fs::symlink(dir.path().join("secret.pdf"), &link).unwrap();
    let via_link = run("link.pdf");
    assert!(
        !via_link.status.success(),
        "a symbolic link out of the inbox is refused"
    );
}
