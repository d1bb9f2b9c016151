//! `run` with an `[ingest]` section: a real PDF (a 4-page excerpt of a Debian manual) submitted
//! with `horos-ref ingest`, read by Tesseract, embedded through an OpenAI-compatible embeddings
//! server (fakeai here: the real-model path is tests/demo.rs), listed by `docs`, found by
//! `search`. Needs Tesseract and the sample PDFs (scripts/setup_ocr.sh,
//! scripts/fetch_sample_pdfs.sh); skips without them unless `HOROS_REQUIRE_OCR=1` /
//! `HOROS_REQUIRE_SAMPLES=1`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use horos_fakeai::{FakeConfig, FakeServer};

mod common;

use common::{BIN, cli, json, skip_or_fail};

/// The sample excerpt, where Tesseract is installed too.
fn ocr_excerpt() -> Option<PathBuf> {
    if Command::new("tesseract").arg("--version").output().is_err() {
        skip_or_fail("HOROS_REQUIRE_OCR", "tesseract is not installed");
        return None;
    }
    common::excerpt()
}

#[test]
fn run_ingests_a_real_pdf_from_the_inbox() {
    let Some(pdf) = ocr_excerpt() else { return };
    let rt = common::runtime();
    let embeddings = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("inbox")).unwrap();
    std::fs::copy(&pdf, dir.path().join("inbox/manual-excerpt.pdf")).unwrap();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n[ingest]\ninbox = \"inbox\"\nembeddings_url = \"{}\"\n\
             embeddings_model = \"fake-embed\"\nchunk_tokens = 128\nchunk_overlap = 30\n",
            embeddings.url()
        ),
    )
    .unwrap();

    let queued = json(&cli(&config, &["--json", "ingest", "manual-excerpt.pdf"]));
    assert_eq!(queued["status"], "queued", "{queued}");
    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("run")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    let doc = loop {
        let docs = json(&cli(&config, &["--json", "docs"]));
        let doc = docs[0].clone();
        if doc["status"] != "pending" {
            break doc;
        }
        assert!(Instant::now() < deadline, "not ingested in time: {docs}");
        std::thread::sleep(Duration::from_millis(300));
    };
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    assert!(run.wait().unwrap().success());
    assert_eq!(doc["status"], "done", "{doc}");
    assert_eq!(doc["pages"], 4, "{doc}");
    assert!(embeddings.stats().requests > 0, "text was embedded");

    // The excerpt's page 3 is the manual's attribute table.
    let hits = json(&cli(
        &config,
        &["--json", "search", "attribute", "--k", "3"],
    ));
    assert!(!hits.as_array().unwrap().is_empty(), "{hits}");
    // Submitting the same bytes again does nothing.
    let again = json(&cli(&config, &["--json", "ingest", "manual-excerpt.pdf"]));
    assert_eq!(again["status"], "known", "{again}");
}

/// The reported failure: `ingest` panicked on such a name after registering the document,
/// which `run` then failed as "file not found" (a lossy copy of the name was stored).
#[cfg(unix)]
#[test]
fn run_ingests_a_file_whose_name_is_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    if Command::new("tesseract").arg("--version").output().is_err() {
        skip_or_fail("HOROS_REQUIRE_OCR", "tesseract is not installed");
        return;
    }
    let rt = common::runtime();
    let embeddings = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("inbox")).unwrap();
    let name = OsStr::from_bytes(b"r\xe9sum\xe9-\xff.pdf");
    std::fs::write(dir.path().join("inbox").join(name), common::blank_pdf()).unwrap();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n[ingest]\ninbox = \"inbox\"\nembeddings_url = \"{}\"\n\
             embeddings_model = \"fake-embed\"\ndpi = 50\n",
            embeddings.url()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args([OsStr::new("--json"), OsStr::new("ingest"), name])
        .output()
        .unwrap();
    let queued = json(&out);
    assert_eq!(queued["status"], "queued", "{queued}");
    let _run = common::spawn_run(&config, &dir.path().join("run.log"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let doc = loop {
        let docs = json(&cli(&config, &["--json", "docs"]));
        if docs[0]["status"] != "pending" {
            break docs[0].clone();
        }
        assert!(Instant::now() < deadline, "not ingested in time: {docs}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(doc["status"], "done", "{doc}");
    assert_eq!(doc["pages"], 1, "{doc}");
}
