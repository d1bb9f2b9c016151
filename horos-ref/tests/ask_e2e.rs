//! `horos-ref ask` through the binary: `run` on the demo's configuration (SmolLM2 on a
//! llama-server as the lane `chat`, MiniLM in the pool, the ingest pipeline), the manual's
//! excerpt ingested, a question answered by SmolLM2 from its pages with each claim citing a
//! page, and a question whose words appear on no page answered "no supporting page" without a
//! model call (a fakeai model, whose request log stays empty).
//!
//! Needs `HOROS_LLAMA_SERVER`, `HOROS_SMOLLM2_GGUF`, `HOROS_MINILM_GGUF`
//! (scripts/setup_llama.sh), `tesseract` (scripts/setup_ocr.sh) and the sample PDFs; skips
//! without them unless `HOROS_REQUIRE_LLAMA=1`, `HOROS_REQUIRE_OCR=1`, `HOROS_REQUIRE_SAMPLES=1`.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use horos_fakeai::{FakeConfig, FakeServer};
use serde_json::Value;

mod common;

use common::{BIN, cli, excerpt, json, skip_or_fail, wait_for};

/// Answered by page 3 of the excerpt (the manual's attribute table).
const QUESTION: &str = "Which attributes apply to arrays, such as nativeint and null_terminated?";

fn present() -> bool {
    let llama = [
        "HOROS_LLAMA_SERVER",
        "HOROS_SMOLLM2_GGUF",
        "HOROS_MINILM_GGUF",
    ]
    .iter()
    .all(|v| std::env::var(v).is_ok_and(|p| std::path::Path::new(&p).exists()));
    if !llama {
        skip_or_fail(
            "HOROS_REQUIRE_LLAMA",
            "no llama-server and models (scripts/setup_llama.sh, then source its env file)",
        );
        return false;
    }
    if Command::new("tesseract").arg("--version").output().is_err() {
        skip_or_fail("HOROS_REQUIRE_OCR", "tesseract is not installed");
        return false;
    }
    true
}

#[test]
fn ask_answers_from_the_pages_citing_them_and_no_page_means_no_model_call() {
    if !present() {
        return;
    }
    let Some(pdf) = excerpt() else { return };
    let rt = common::runtime();
    let fake = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    // The demo's configuration as printed, plus a model whose calls are counted.
    let printed = Command::new(BIN)
        .args(["demo", "--print-config", "--port", "0", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    let mut text = String::from_utf8(printed.stdout).unwrap();
    text.push_str(&format!(
        "\n[[coordinator.model]]\nname = \"fake\"\nurl = \"{}\"\n",
        fake.url()
    ));
    let config = dir.path().join("horos.toml");
    std::fs::write(&config, &text).unwrap();
    let bind = text
        .lines()
        .find_map(|l| l.strip_prefix("bind = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_owned();
    std::fs::create_dir_all(dir.path().join("inbox/manual")).unwrap();
    std::fs::copy(&pdf, dir.path().join("inbox/manual/excerpt.pdf")).unwrap();

    let log = std::fs::File::create(dir.path().join("run.log")).unwrap();
    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("run")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let read_log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    wait_for("the coordinator", Duration::from_secs(240), || {
        Command::new("curl")
            .args(["-sf", &format!("http://{bind}/health")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    // A directory: followed until its documents are ingested.
    let ingested = cli(&config, &["--json", "ingest", "manual"]);
    assert!(ingested.status.success(), "{ingested:?}\n{}", read_log());

    // Answered by SmolLM2 from the pages; every claim cites pages the answer was written from,
    // and the page that holds the fact is among them.
    // SmolLM2 from the two best pages, its most likely words (the same answer each time).
    let smollm2 = |json_out: bool, max_tokens: &str| {
        let mut args = vec![
            "ask",
            QUESTION,
            "--model",
            "smollm2",
            "--k",
            "2",
            "--temperature",
            "0",
            "--max-tokens",
            max_tokens,
        ];
        if json_out {
            args.insert(0, "--json");
        }
        cli(&config, &args)
    };
    let answer: Value = json(&smollm2(true, "96"));
    assert_eq!(answer["supported"], true, "{answer}");
    let citations = answer["citations"].as_array().unwrap();
    assert!(!citations.is_empty(), "{answer}");
    // Page 3 holds the attribute table (nativeint, null_terminated): it is cited, and a claim
    // cites it.
    let table = citations
        .iter()
        .find(|c| c["page"] == 3)
        .unwrap_or_else(|| panic!("page 3 is not among the citations: {answer}"));
    let numbers: Vec<u64> = citations.iter().map(|c| c["n"].as_u64().unwrap()).collect();
    let claims = answer["claims"].as_array().unwrap();
    assert!(!claims.is_empty(), "{answer}");
    for claim in claims {
        for n in claim["sources"].as_array().unwrap() {
            assert!(numbers.contains(&n.as_u64().unwrap()), "{answer}");
        }
    }
    assert!(
        claims
            .iter()
            .any(|c| c["sources"].as_array().unwrap().contains(&table["n"])),
        "no claim cites page 3: {answer}"
    );

    // The terminal form: the words as they come, then the cited text and the sources.
    let out = smollm2(false, "48");
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("Sources:") && shown.contains("page 3"),
        "{shown}"
    );

    // No page holds these words: said so, and the model is never called.
    let none: Value = json(&cli(
        &config,
        &[
            "--json",
            "ask",
            "zyxqv plorbt wibblequark?",
            "--model",
            "fake",
        ],
    ));
    assert_eq!(none["supported"], false, "{none}");
    assert!(
        none["answer"]
            .as_str()
            .unwrap()
            .contains("No supporting page"),
        "{none}"
    );
    assert!(
        fake.requests().is_empty(),
        "the model was called: {:?}",
        fake.requests()
    );
    // ...and the fake model does answer when a page supports the question.
    let answered: Value = json(&cli(
        &config,
        &["--json", "ask", QUESTION, "--model", "fake"],
    ));
    assert_eq!(answered["supported"], true, "{answered}");
    assert_eq!(fake.requests().len(), 1);

    common::stop(&mut run, libc::SIGTERM);
}
