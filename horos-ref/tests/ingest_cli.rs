//! `search` on the pipeline's file, without `run`: any text a user types is a query.
#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ingest_pipeline::store::{self, PageImage, StoreError};
use ingest_pipeline::vision::Reading;

mod common;

use common::{BIN, cli, json};

/// A configuration with an `[ingest]` section (its inbox created), and the pipeline's file.
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir(dir.join("inbox")).unwrap();
    let config = dir.join("horos.toml");
    std::fs::write(
        &config,
        "[ingest]\ninbox = \"inbox\"\nembeddings_url = \"http://127.0.0.1:9\"\nembeddings_model = \"m\"\n",
    )
    .unwrap();
    // The first command creates the pipeline's file.
    assert_eq!(
        json(&cli(&config, &["--json", "docs"])),
        serde_json::json!([])
    );
    (config, dir.join("ingest/ingest.db"))
}

/// Runs `f` in a transaction on the pipeline's file (the store's functions take the
/// connection squeueha's transaction holds: rusqlite is not one of the binary's dependencies).
fn in_store<T>(db: &Path, mut f: impl FnMut(&squeueha::QueueTx<'_>) -> Result<T, StoreError>) -> T {
    let queue = squeueha::Queue::open(db).unwrap();
    queue.transaction(|tx| f(tx)).unwrap()
}

fn cli_os(config: &Path, args: &[&OsStr]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn search_takes_any_text_a_user_types() {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(dir.path());
    in_store(&db, |tx| {
        let c = tx.connection();
        let (doc, _) = store::insert_document(c, "abc", "t", "/inbox/t.pdf")?;
        let page = PageImage {
            doc_id: doc.id,
            page_no: 1,
            width: 1,
            height: 1,
            image_bytes: 1,
            image_path: "x",
            tiles: 1,
        };
        store::insert_page(c, &page)?;
        let reading = Reading {
            text: "C++ templates and NOT the text column or NEAR".into(),
            ..Reading::default()
        };
        store::store_page_text(c, doc.id, 1, &reading, "test", &[])?;
        Ok(())
    });
    let long = "templates ".repeat(10_000);
    let typed: [(&OsStr, usize); 12] = [
        (OsStr::new("C++"), 1),
        (OsStr::new("\"C++ templates"), 1),
        (OsStr::new("AND OR NOT"), 1),
        (OsStr::new("*"), 0),
        (OsStr::new("NEAR("), 1),
        (OsStr::new("col:term"), 0),
        (OsStr::new("text:column"), 1),
        (OsStr::new(""), 0),
        (OsStr::new(&long), 1),
        (OsStr::new("templates\u{1}\u{7f}column"), 1),
        (OsStr::new("absent words only"), 0),
        #[cfg(unix)]
        (
            std::os::unix::ffi::OsStrExt::from_bytes(b"templates \xff\xfe"),
            1,
        ),
        #[cfg(not(unix))]
        (OsStr::new("templates \u{FFFD}"), 1),
    ];
    for (text, found) in typed {
        let out = cli_os(&config, &[OsStr::new("--json"), OsStr::new("search"), text]);
        let shown = text.to_string_lossy();
        let shown = &shown[..shown.len().min(40)];
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{shown:?}: {err}");
        let hits = json(&out);
        assert_eq!(hits.as_array().unwrap().len(), found, "{shown:?}: {hits}");
    }
}
