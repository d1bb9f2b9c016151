//! `[ingest]` on a PostgreSQL database two `horos-ref` nodes share, with one shared inbox and
//! page directory: documents submitted through one node's CLI are ingested by the other node's
//! `run` (the first one not running), then both run and share the next documents; each node's
//! CLI lists every document and finds every page, and each page is stored and indexed once.
//!
//! Needs `HOROS_PG_URL` (`scripts/setup_postgres.sh` prints it) and Tesseract: skipped without
//! them, failed with `HOROS_REQUIRE_POSTGRES=1` / `HOROS_REQUIRE_OCR=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::nodes::Schema;
use common::{cli, json, skip_or_fail, spawn_run, stop, tiny_pdf};
use horos_fakeai::{FakeConfig, FakeServer};
use squeueha::{Queue, params};

/// Words of document `i` that no other document holds.
fn words(i: usize) -> String {
    const UNIQUE: [&str; 6] = [
        "walrus", "quartz", "zephyr", "glacier", "saffron", "obsidian",
    ];
    format!("The {} ledger of node tests", UNIQUE[i])
}

/// Submits document `i` through `config`'s CLI.
fn submit(config: &Path, inbox: &Path, i: usize) -> i64 {
    let name = format!("doc-{i}.pdf");
    std::fs::write(inbox.join(&name), tiny_pdf(&words(i))).unwrap();
    let queued = json(&cli(config, &["--json", "ingest", &name]));
    assert_eq!(queued["status"], "queued", "{queued}");
    queued["document"].as_i64().unwrap()
}

/// Waits until `config`'s CLI lists `n` documents, none pending.
fn wait_done(config: &Path, n: usize, logs: impl Fn() -> String) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let docs = json(&cli(config, &["--json", "docs"]));
        let list = docs.as_array().unwrap();
        if list.len() == n && list.iter().all(|d| d["status"] != "pending") {
            return docs;
        }
        assert!(
            Instant::now() < deadline,
            "not ingested in time: {docs}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn two_nodes_share_the_ingest_pipelines_documents() {
    let Ok(base) = std::env::var("HOROS_PG_URL") else {
        skip_or_fail(
            "HOROS_REQUIRE_POSTGRES",
            "HOROS_PG_URL is not set (scripts/setup_postgres.sh prints it)",
        );
        return;
    };
    if Command::new("tesseract").arg("--version").output().is_err() {
        skip_or_fail("HOROS_REQUIRE_OCR", "tesseract is not installed");
        return;
    }
    let schema = Schema::create(&base, "horos_ingest_nodes");
    let url = schema.url();
    let rt = common::runtime();
    let embeddings = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The shared directories (one NFS mount on real machines).
    let (inbox, pages) = (
        dir.path().join("shared/inbox"),
        dir.path().join("shared/ingest"),
    );
    std::fs::create_dir_all(&inbox).unwrap();
    let configs: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| {
            let node_dir = dir.path().join(format!("node-{n}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            let path = node_dir.join("horos.toml");
            std::fs::write(
                &path,
                format!(
                    "database = \"{url}\"\n[node]\nname = \"node-{n}\"\n\
                     [ingest]\ninbox = \"{}\"\ndir = \"{}\"\nembeddings_url = \"{}\"\n\
                     embeddings_model = \"fake-embed\"\ndetect_rotation = false\n",
                    inbox.display(),
                    pages.display(),
                    embeddings.url()
                ),
            )
            .unwrap();
            path
        })
        .collect();
    let log = |n: usize| {
        std::fs::read_to_string(configs[n].with_file_name("run.log")).unwrap_or_default()
    };

    // Submitted through node a, which does not run: node b ingests them.
    let mut ids: Vec<i64> = (0..3).map(|i| submit(&configs[0], &inbox, i)).collect();
    let mut b = spawn_run(&configs[1], &configs[1].with_file_name("run.log"));
    wait_done(&configs[0], 3, || log(1));
    // Then both run, and documents submitted through node b are shared.
    let mut a = spawn_run(&configs[0], &configs[0].with_file_name("run.log"));
    ids.extend((3..6).map(|i| submit(&configs[1], &inbox, i)));
    let docs = wait_done(&configs[0], 6, || format!("{}\n{}", log(0), log(1)));
    for d in docs.as_array().unwrap() {
        assert_eq!(
            (&d["status"], &d["pages"]),
            (&"done".into(), &1.into()),
            "{d}"
        );
    }
    assert!(embeddings.stats().requests > 0, "text was embedded");
    assert!(stop(&mut a.0, libc::SIGTERM).success(), "{}", log(0));
    assert!(stop(&mut b.0, libc::SIGTERM).success(), "{}", log(1));

    // Each node's CLI finds every document's page by its own word.
    for (i, id) in ids.iter().enumerate() {
        let word = words(i).split(' ').nth(1).unwrap().to_owned();
        for config in &configs {
            let hits = json(&cli(config, &["--json", "search", &word, "--k", "3"]));
            let hits = hits.as_array().unwrap();
            assert_eq!(hits.len(), 1, "{word}: {hits:?}");
            assert_eq!(hits[0]["document"], *id, "{word}: {hits:?}");
        }
    }
    // Each page stored and indexed once; no stage job left or dead.
    let queue = Queue::open(&url).unwrap();
    let count = |sql: &str| -> i64 { queue.query(sql, params![]).unwrap()[0].get(0).unwrap() };
    assert_eq!(count("SELECT count(*) FROM ip_pages WHERE stored = 1"), 6);
    assert_eq!(count("SELECT count(*) FROM ip_page_fts"), 6);
    assert_eq!(count("SELECT count(*) FROM ip_page_vectors"), 6);
    for stage in ingest_pipeline::pipeline::Stage::ALL {
        let st = queue.stats(stage.queue()).unwrap();
        assert_eq!((st.ready, st.in_flight, st.dead), (0, 0, 0), "{stage:?}");
    }
}
