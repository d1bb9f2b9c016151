//! `search`, `ingest`, `docs` and `dead` on the pipeline's file, without `run`: any text a user
//! types is a query, any file name is a document, a failed document is ingested again with
//! `ingest --retry` (and `dead --requeue` of its dead job says so), and `docs delete` leaves
//! nothing of a document.
#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ingest_pipeline::store::{self, PageImage, StoreError};
use ingest_pipeline::vision::{ReadBy, Reading};
use serde_json::Value;

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

/// Runs `f` in a transaction on the pipeline's file (the store's functions take squeueha's
/// transaction: rusqlite is not one of the binary's dependencies).
fn in_store<T>(
    db: &Path,
    mut f: impl FnMut(&mut squeueha::QueueTx<'_>) -> Result<T, StoreError>,
) -> T {
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

fn failed(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(needle), "{err}");
}

#[test]
fn search_takes_any_text_a_user_types() {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(dir.path());
    in_store(&db, |tx| {
        let c = &mut *tx;
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

#[cfg(unix)]
#[test]
fn ingest_takes_a_file_whose_name_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(dir.path());
    let name = OsStr::from_bytes(b"scan-\xff\xfe.pdf");
    let file = dir.path().join("inbox").join(name);
    std::fs::write(&file, b"%PDF-1.4 not parsed before run\n%%EOF\n").unwrap();
    let out = cli_os(&config, &[OsStr::new("--json"), OsStr::new("ingest"), name]);
    let queued = json(&out);
    assert_eq!(queued["status"], "queued", "{queued}");
    assert!(
        queued["path"].as_str().unwrap().contains('\u{FFFD}'),
        "{queued}"
    );
    // The pipeline keeps the exact name: `run` opens this very file.
    let id = queued["document"].as_i64().unwrap();
    let doc = in_store(&db, |tx| Ok(store::document(tx, id)?.unwrap()));
    assert_eq!(doc.source_path(), std::fs::canonicalize(&file).unwrap());
    let docs = json(&cli(&config, &["--json", "docs"]));
    assert_eq!(docs[0]["id"], id, "{docs}");
    // The same file again: known.
    let again = json(&cli_os(
        &config,
        &[OsStr::new("--json"), OsStr::new("ingest"), name],
    ));
    assert_eq!(again["status"], "known", "{again}");
}

fn fail(db: &Path, id: i64) {
    in_store(db, |tx| {
        store::fail_document(tx, id, "pdf_to_images: broken")
    });
}

#[test]
fn a_failed_document_is_retried_and_any_document_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(dir.path());
    std::fs::write(dir.path().join("inbox/a.pdf"), b"%PDF-1.4 a\n%%EOF\n").unwrap();
    let first = json(&cli(&config, &["--json", "ingest", "a.pdf"]));
    let first_id = first["document"].as_i64().unwrap();
    // Pending: not retried.
    failed(
        &cli(&config, &["ingest", "--retry", &first_id.to_string()]),
        "not failed",
    );
    fail(&db, first_id);
    let known = json(&cli(&config, &["--json", "ingest", "a.pdf"]));
    assert_eq!(known["status"], "known", "{known}");

    // By id: the failed document is replaced by a new one, queued.
    let retried = json(&cli(
        &config,
        &["--json", "ingest", "--retry", &first_id.to_string()],
    ));
    assert_eq!(retried["status"], "queued", "{retried}");
    assert_eq!(retried["retried"], first_id, "{retried}");
    let second_id = retried["document"].as_i64().unwrap();
    assert!(second_id > first_id);
    let docs: Value = json(&cli(&config, &["--json", "docs"]));
    assert_eq!(docs.as_array().unwrap().len(), 1, "{docs}");
    assert_eq!(
        (docs[0]["id"].as_i64(), docs[0]["status"].as_str()),
        (Some(second_id), Some("pending"))
    );

    // By path, as it was given to `ingest`.
    fail(&db, second_id);
    let retried = json(&cli(&config, &["--json", "ingest", "--retry", "a.pdf"]));
    assert_eq!(retried["retried"], second_id, "{retried}");
    let third_id = retried["document"].as_i64().unwrap();
    failed(
        &cli(&config, &["ingest", "--retry", "999"]),
        "no document 999",
    );
    failed(&cli(&config, &["ingest", "--retry", "b.pdf"]), "b.pdf");
    failed(&cli(&config, &["ingest"]), "--retry");

    // Deleted with everything derived from it.
    let deleted = json(&cli(
        &config,
        &["--json", "docs", "delete", &third_id.to_string()],
    ));
    assert_eq!(deleted["deleted"], third_id, "{deleted}");
    assert_eq!(
        json(&cli(&config, &["--json", "docs"])),
        serde_json::json!([])
    );
    for id in [first_id, second_id, third_id] {
        let rows = in_store(&db, |tx| store::rows_of_document(tx, id));
        assert!(rows.iter().all(|(_, n)| *n == 0), "{id}: {rows:?}");
    }
    failed(
        &cli(&config, &["docs", "delete", &third_id.to_string()]),
        &format!("no document {third_id}"),
    );
}

/// Buries the next job of ingest stage `stage` with `reason`, as a worker whose job failed for
/// good does; its id.
fn bury_next(db: &Path, stage: &str, reason: &str) -> i64 {
    let queue = squeueha::Queue::open(db).unwrap();
    let job = queue
        .poll_batch(stage, 1, std::time::Duration::from_secs(30))
        .unwrap()
        .remove(0);
    queue.bury(job.lease, reason).unwrap();
    job.id
}

#[test]
fn requeueing_a_dead_ingest_job_of_a_failed_document_names_ingest_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(dir.path());
    std::fs::write(dir.path().join("inbox/a.pdf"), b"%PDF-1.4 a\n%%EOF\n").unwrap();
    let doc = json(&cli(&config, &["--json", "ingest", "a.pdf"]))["document"]
        .as_i64()
        .unwrap();
    // Its rendering dies for good and the document fails, as the worker records them.
    let job = bury_next(&db, "pdf_to_images", "not a PDF");
    fail(&db, doc);

    // The stage's dead letters are read from the pipeline's file.
    let dead = json(&cli(
        &config,
        &["--json", "dead", "--queue", "pdf_to_images"],
    ));
    assert_eq!(dead.as_array().unwrap().len(), 1, "{dead}");
    assert_eq!(
        (dead[0]["id"].as_i64(), dead[0]["reason"].as_str()),
        (Some(job), Some("not a PDF"))
    );
    // Requeued, the job would be dropped (its document is not pending): refused, saying what
    // re-ingests the document; nothing changed.
    let requeue = [
        "dead",
        "--queue",
        "pdf_to_images",
        "--requeue",
        &job.to_string(),
    ];
    let retry = format!("horos-ref ingest --retry {doc}");
    failed(&cli(&config, &requeue), &retry);
    let out = cli(&config, &[&["--json"][..], &requeue].concat());
    assert!(!out.status.success());
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert!(err["error"].as_str().unwrap().contains(&retry), "{err}");
    let still = json(&cli(
        &config,
        &["--json", "dead", "--queue", "pdf_to_images"],
    ));
    assert_eq!(still, dead);
    let docs = json(&cli(&config, &["--json", "docs"]));
    assert_eq!(docs[0]["status"], "failed", "{docs}");

    // Once retried, the old document is gone: said so.
    let retried = json(&cli(
        &config,
        &["--json", "ingest", "--retry", &doc.to_string()],
    ));
    let new_doc = retried["document"].as_i64().unwrap();
    failed(&cli(&config, &requeue), "no longer exists");
    failed(
        &cli(
            &config,
            &["dead", "--queue", "pdf_to_images", "--requeue", "999999"],
        ),
        "no dead job 999999",
    );

    // A dead job of a document still pending is requeued.
    let pending_job = bury_next(&db, "pdf_to_images", "lease expired");
    let requeued = json(&cli(
        &config,
        &[
            "--json",
            "dead",
            "--queue",
            "pdf_to_images",
            "--requeue",
            &pending_job.to_string(),
        ],
    ));
    assert_eq!(requeued["requeued"], pending_job, "{requeued}");
    let queue = squeueha::Queue::open(&db).unwrap();
    let again = queue
        .poll_batch("pdf_to_images", 1, std::time::Duration::from_secs(30))
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(Some(again[0].id), requeued["id"].as_i64());
    let payload: Value = serde_json::from_slice(&again[0].payload).unwrap();
    assert_eq!(payload["doc_id"], new_doc);
}

#[test]
fn docs_pages_shows_what_read_each_page_and_export_prints_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(dir.path());
    let id = in_store(&db, |tx| {
        let c = &mut *tx;
        let (doc, _) = store::insert_document(c, "md", "Manual", "/inbox/manual.pdf")?;
        for page_no in 1..=2 {
            let page = PageImage {
                doc_id: doc.id,
                page_no,
                width: 1,
                height: 1,
                image_bytes: 1,
                image_path: "x",
                tiles: 1,
            };
            store::insert_page(c, &page)?;
        }
        let born_digital = Reading {
            text: "Chapter one\n\n# the hash stays text".into(),
            read_by: Some(ReadBy::TextLayer),
            ..Reading::default()
        };
        store::store_page_text(c, doc.id, 1, &born_digital, "text_layer", &[])?;
        let scan = Reading {
            text: "Attributes".into(),
            tables: vec![serde_json::json!({"header": ["Attribute", "Context"],
                                            "rows": [["bigarray", "array type"]]})],
            read_by: Some(ReadBy::Tesseract),
            rotation: 90,
            ..Reading::default()
        };
        store::store_page_text(c, doc.id, 2, &scan, "tesseract", &[])?;
        Ok(doc.id)
    });
    let id_s = id.to_string();
    let pages = json(&cli(&config, &["--json", "docs", "pages", &id_s]));
    assert_eq!(pages[0]["read_by"], "text_layer", "{pages}");
    assert_eq!(
        (&pages[1]["read_by"], &pages[1]["rotation"]),
        (&Value::from("tesseract"), &Value::from(90)),
        "{pages}"
    );
    let text = cli(&config, &["docs", "pages", &id_s]);
    assert_eq!(
        String::from_utf8_lossy(&text.stdout),
        "1 text_layer text_layer rotation=0 chars=34\n2 tesseract tesseract rotation=90 chars=10\n"
    );

    let md = cli(&config, &["docs", "export", &id_s]);
    assert!(md.status.success());
    assert_eq!(
        String::from_utf8_lossy(&md.stdout),
        "# Manual\n\n<!-- page 1 -->\n\nChapter one\n\n\\# the hash stays text\n\n\
         <!-- page 2 -->\n\nAttributes\n\n| Attribute | Context |\n| --- | --- |\n\
         | bigarray | array type |\n"
    );
    let out = json(&cli(&config, &["--json", "docs", "export", &id_s]));
    assert_eq!(out["document"], id);
    assert_eq!(out["pages"][1]["read_by"], "tesseract");
    assert!(
        out["pages"][1]["markdown"]
            .as_str()
            .unwrap()
            .contains("| bigarray | array type |"),
        "{out}"
    );
    failed(&cli(&config, &["docs", "export", "999"]), "no document 999");
    failed(&cli(&config, &["docs", "pages", "999"]), "no document 999");
}
