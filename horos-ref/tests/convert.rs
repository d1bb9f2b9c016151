//! `horos-ref convert` over the sample PDFs (scripts/fetch_sample_pdfs.sh: the camlidl manual,
//! 26 pages, and the AMC sample sheet, 30 pages, both born-digital), with no configuration:
//! Markdown and JSON Lines written, a second run reading nothing, broken PDFs failing alone with
//! their reason, `docs export --all` over the state `convert` leaves. A page without a text
//! layer is read by Tesseract where it is installed, and fails naming it where it is not
//! (`HOROS_REQUIRE_OCR=1` makes its absence a failure). Skips without the samples unless
//! `HOROS_REQUIRE_SAMPLES=1`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use common::{BIN, skip_or_fail};

/// `horos-ref ARGS...` run in `dir`, with no configuration.
fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// The JSON `out` printed, whatever its exit status.
fn printed(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A temporary directory whose `in/` holds the sample files `names`.
fn inputs(names: &[&str]) -> Option<(tempfile::TempDir, PathBuf)> {
    let samples = common::samples()?;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    for name in names {
        std::fs::copy(samples.join(name), input.join(name)).unwrap();
    }
    Some((dir, samples))
}

/// The file outcome of `name` in `convert --json`'s answer.
fn file<'a>(converted: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    converted["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("{name}: {converted}"))
}

#[test]
fn convert_writes_markdown_and_a_second_run_converts_nothing() {
    let Some((dir, _)) = inputs(&["manual.pdf", "amc-sample.pdf"]) else {
        return;
    };
    let first = run(dir.path(), &["--json", "convert", "in", "--out", "md"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let converted = printed(&first);
    assert_eq!(converted["converted"], 2, "{converted}");
    assert_eq!(converted["pages"], 56, "{converted}");
    assert_eq!(file(&converted, "manual.pdf")["pages"], 26, "{converted}");
    assert_eq!(
        file(&converted, "amc-sample.pdf")["pages"],
        30,
        "{converted}"
    );

    let md = std::fs::read_to_string(dir.path().join("md/manual.md")).unwrap();
    // Structured from the text layer: the manual's own title (no file-name heading over it),
    // its numbered sections as headings, its IDL and C examples fenced, its tables as tables.
    assert!(
        md.starts_with("<!-- page 1 -->\n\n# Camlidl user’s manual"),
        "{}",
        &md[..200]
    );
    for heading in [
        "\n## 1 Overview\n",
        "\n### 1.1 What is IDL?\n",
        "\n### 3.4 Big arrays\n",
    ] {
        assert!(md.contains(heading), "{heading:?} missing from manual.md");
    }
    assert!(md.matches("\n```\n").count() >= 20, "code blocks fenced");
    assert!(md.contains("| --- |"), "a table written as a table");
    assert_eq!(md.matches("<!-- page ").count(), 26);
    assert!(md.contains("<!-- page 26 -->"));
    for words in ["Camlidl user’s manual", "Xavier Leroy", "IDL description"] {
        assert!(md.contains(words), "{words} missing from manual.md");
    }
    let amc = std::fs::read_to_string(dir.path().join("md/amc-sample.md")).unwrap();
    assert_eq!(amc.matches("<!-- page ").count(), 30);
    // The pipeline's state stays beside the files, for the next run.
    assert!(dir.path().join("md/.horos/ingest.db").is_file());

    // Again over the same bytes: nothing read, and said so.
    let second = run(dir.path(), &["convert", "in", "--out", "md"]);
    assert!(second.status.success());
    let said = String::from_utf8_lossy(&second.stdout);
    assert!(
        said.contains("nothing to convert: 2 file(s) already converted"),
        "{said}"
    );
    let again = printed(&run(
        dir.path(),
        &["--json", "convert", "in", "--out", "md"],
    ));
    assert_eq!(
        (
            &again["converted"],
            &again["already_converted"],
            &again["pages"]
        ),
        (
            &serde_json::json!(0),
            &serde_json::json!(2),
            &serde_json::json!(0)
        ),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("md/manual.md")).unwrap(),
        md
    );
}

#[test]
fn jsonl_has_one_line_per_page_with_its_reader_and_source() {
    let Some((dir, samples)) = inputs(&["manual.pdf"]) else {
        return;
    };
    let pdf = dir.path().join("in/manual.pdf");
    let out = run(
        dir.path(),
        &[
            "convert",
            "in/manual.pdf",
            "--out",
            "j",
            "--format",
            "jsonl",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.path().join("j/manual.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 26);
    let sha =
        ingest_pipeline::pipeline::sha256_hex(&std::fs::read(samples.join("manual.pdf")).unwrap());
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["page_no"], i + 1, "{line}");
        assert_eq!(line["pages"], 26, "{line}");
        assert_eq!(line["sha256"], sha.as_str(), "{line}");
        assert_eq!(
            line["source"],
            pdf.canonicalize().unwrap().to_str().unwrap(),
            "{line}"
        );
        // Born-digital: every page keeps its text layer, upright.
        assert_eq!(line["read_by"], "text_layer", "{line}");
        assert_eq!(line["reader"], "text_layer", "{line}");
        assert_eq!(line["rotation"], 0, "{line}");
        assert!(
            line["tables"].is_array() && line["text"].is_string(),
            "{line}"
        );
    }
    assert!(lines[0]["text"].as_str().unwrap().contains("Xavier Leroy"));
}

#[test]
fn a_broken_pdf_fails_alone_with_its_reason_named() {
    let Some((dir, _)) = inputs(&["excerpt.pdf", "not-a-pdf.pdf", "truncated.pdf"]) else {
        return;
    };
    let out = run(dir.path(), &["--json", "convert", "in", "--out", "md"]);
    assert!(!out.status.success(), "a failed file fails the command");
    let converted = printed(&out);
    assert_eq!(
        (&converted["converted"], &converted["failed"]),
        (&serde_json::json!(1), &serde_json::json!(2)),
        "{converted}"
    );
    let not_pdf = &file(&converted, "not-a-pdf.pdf")["failure"];
    assert_eq!(not_pdf["kind"], "not_a_pdf", "{converted}");
    assert!(not_pdf["error"].as_str().unwrap().contains("not a PDF"));
    let truncated = &file(&converted, "truncated.pdf")["failure"];
    assert_eq!(truncated["kind"], "truncated", "{converted}");
    assert!(
        truncated["error"]
            .as_str()
            .unwrap()
            .contains("truncated PDF")
    );
    assert!(dir.path().join("md/excerpt.md").is_file());
    assert!(!dir.path().join("md/not-a-pdf.md").exists());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 of 3 files failed"), "{err}");
    // Without --json, each failure is a line naming the file, its kind and its reason.
    let plain = run(dir.path(), &["convert", "in", "--out", "md"]);
    let said = String::from_utf8_lossy(&plain.stdout);
    assert!(
        said.contains("not-a-pdf.pdf (not_a_pdf): not a PDF file"),
        "{said}"
    );
    assert!(said.contains("1 already converted, 2 failed"), "{said}");
}

#[test]
fn docs_export_all_writes_every_document_of_a_store() {
    let Some((dir, _)) = inputs(&["excerpt.pdf", "manual.pdf"]) else {
        return;
    };
    let out = run(dir.path(), &["convert", "in", "--out", "md"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The state convert leaves is an [ingest] pipeline's directory.
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        "[ingest]\ninbox = \"in\"\ndir = \"md/.horos\"\n\
         embeddings_url = \"http://127.0.0.1:9\"\nembeddings_model = \"m\"\n",
    )
    .unwrap();
    // `--out` is taken from the working directory (the test's, not `dir`).
    let exported = dir.path().join("exported");
    let exported = exported.to_str().unwrap();
    let all = common::json(&common::cli(
        &config,
        &[
            "--json", "docs", "export", "--all", "--out", exported, "--format", "jsonl",
        ],
    ));
    assert_eq!(all["written"], 2, "{all}");
    let lines = |name: &str| {
        std::fs::read_to_string(dir.path().join("exported").join(name))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!((lines("excerpt.jsonl"), lines("manual.jsonl")), (4, 26));
    // The Markdown is what `docs export ID` prints (the JSON Lines files stay beside it).
    let md = common::cli(&config, &["docs", "export", "--all", "--out", exported]);
    assert!(
        md.status.success(),
        "{}",
        String::from_utf8_lossy(&md.stderr)
    );
    let id = all["documents"][0]["document"].to_string();
    let printed = common::cli(&config, &["docs", "export", &id]);
    let name = Path::new(all["documents"][0]["path"].as_str().unwrap())
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout),
        std::fs::read_to_string(dir.path().join(format!("exported/{name}.md"))).unwrap()
    );
    // And `docs export ID --format jsonl` what `--all` wrote as JSON Lines.
    let jsonl = common::cli(&config, &["docs", "export", &id, "--format", "jsonl"]);
    assert_eq!(
        String::from_utf8_lossy(&jsonl.stdout),
        std::fs::read_to_string(dir.path().join(format!("exported/{name}.jsonl"))).unwrap()
    );
}

#[test]
fn a_page_without_a_text_layer_is_read_by_tesseract_or_names_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::write(dir.path().join("in/scan.pdf"), common::blank_pdf()).unwrap();
    let ocr = Command::new("tesseract").arg("--version").output().is_ok();
    let out = run(
        dir.path(),
        &["--json", "convert", "in", "--out", "o", "--format", "jsonl"],
    );
    let converted = printed(&out);
    if ocr {
        assert!(out.status.success(), "{converted}");
        let line: serde_json::Value = serde_json::from_str(
            std::fs::read_to_string(dir.path().join("o/scan.jsonl"))
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(line["read_by"], "tesseract", "{line}");
        return;
    }
    // No Tesseract: the scan fails, saying what it needs.
    assert!(!out.status.success());
    let failure = &file(&converted, "scan.pdf")["failure"];
    assert_eq!(failure["kind"], "pipeline", "{converted}");
    assert!(
        failure["error"]
            .as_str()
            .unwrap()
            .contains("tesseract not found"),
        "{converted}"
    );
    let plain = run(dir.path(), &["convert", "in", "--out", "o"]);
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(
        err.contains("pages without a text layer cannot be read"),
        "{err}"
    );
    skip_or_fail(
        "HOROS_REQUIRE_OCR",
        "tesseract is not installed: only its absence was checked (scripts/setup_ocr.sh)",
    );
}
