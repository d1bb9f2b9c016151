//! Born-digital and scanned pages in one document: a page with a usable text layer keeps it
//! (no OCR call, recorded as read by the text layer, its words' boxes in the page image's
//! pixels); a scanned page, or one whose text layer is too thin, is read by the reader.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{TestPage, mixed_pdf, prose, rasterised};
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::text_layer::TextLayerMode;
use ingest_pipeline::vision::{ReadBy, Reading, TesseractReader, VisionError, VisionReader};

/// Counts its calls; reads with Tesseract when it is installed, else answers a fixed text.
struct Counting {
    calls: Arc<AtomicUsize>,
    tesseract: Option<TesseractReader>,
}

impl VisionReader for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn read_by(&self) -> ReadBy {
        ReadBy::Tesseract
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.tesseract {
            Some(t) => t.read(png).await,
            None => Ok(Reading {
                text: "scanned".into(),
                ..Reading::default()
            }),
        }
    }
}

/// Page 1 and 3 born-digital, page 2 a scan of a text page, page 4 only a page number.
fn document() -> (Vec<u8>, [Vec<String>; 3]) {
    let mut third = prose(3, 30);
    third.push("quartz crystals glow".into());
    let texts = [prose(1, 30), prose(2, 30), third];
    let pdf = mixed_pdf(&[
        TestPage::Text(texts[0].clone()),
        TestPage::Image(rasterised(&texts[1], 150.0)),
        TestPage::Text(texts[2].clone()),
        TestPage::Text(vec!["12".into()]),
    ]);
    (pdf, texts)
}

async fn ingest(
    mode: TextLayerMode,
) -> (
    tempfile::TempDir,
    Pipeline<Counting, HashingEmbedder, PixelPatchFallback>,
    i64,
    usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let (pdf, _) = document();
    let file = dir.path().join("mixed.pdf");
    std::fs::write(&file, pdf).unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.render.text_layer = mode;
    let calls = Arc::new(AtomicUsize::new(0));
    // Tesseract is optional here: the counted calls are the point.
    let tesseract = std::process::Command::new("tesseract")
        .arg("--version")
        .output()
        .is_ok()
        .then(TesseractReader::default);
    let reader = Counting {
        calls: calls.clone(),
        tesseract,
    };
    let (pipeline, doc) = crate::common::ingest_with(cfg, reader, &file).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let id = doc.id;
    let n = calls.load(Ordering::SeqCst);
    (dir, pipeline, id, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn born_digital_pages_skip_ocr_and_the_scanned_page_is_read() {
    let (_dir, pipeline, id, calls) = ingest(TextLayerMode::Auto).await;
    let (_, texts) = document();
    // Only the scan and the page-number page were read.
    assert_eq!(calls, 2);
    let mut conn = pipeline.connection().unwrap();
    let pages = store::document_pages(&mut conn, id).unwrap();
    let by: Vec<_> = pages
        .iter()
        .map(|p| (p.page_no, p.read_by, p.reader.as_deref()))
        .collect();
    assert_eq!(
        by,
        vec![
            (1, Some(ReadBy::TextLayer), Some("text_layer")),
            (2, Some(ReadBy::Tesseract), Some("counting")),
            (3, Some(ReadBy::TextLayer), Some("text_layer")),
            (4, Some(ReadBy::Tesseract), Some("counting")),
        ]
    );
    // The text layer is the page's text, in reading order, line by line.
    for (page, text) in [(1, &texts[0]), (3, &texts[2])] {
        assert_eq!(
            store::page_text(&mut conn, id, page).unwrap().unwrap(),
            text.join("\n")
        );
    }
    // Its words carry boxes in the page image's pixels (150 dpi): the first word starts at
    // 72 pt = 150 px from the left, its baseline 72 pt = 150 px from the top, 12 pt high.
    let (whole, _) = store::page_readings(&mut conn, id, 1).unwrap();
    let words = whole.unwrap().words.unwrap();
    assert_eq!(words.len(), 30 * 9);
    let first = &words[0];
    assert_eq!(first.text, texts[0][0].split(' ').next().unwrap());
    assert!((148..=152).contains(&first.x), "{first:?}");
    assert!((125..=135).contains(&first.y), "{first:?}");
    assert!((20..=30).contains(&first.h), "{first:?}");
    // The scan's words came from OCR.
    let scanned = store::page_text(&mut conn, id, 2).unwrap().unwrap();
    if scanned != "scanned" {
        let ocr_words: Vec<&str> = scanned.split_whitespace().collect();
        let want: Vec<&str> = texts[1].iter().flat_map(|l| l.split(' ')).collect();
        let found = want.iter().filter(|w| ocr_words.contains(w)).count();
        assert!(found * 10 >= want.len() * 9, "{scanned}");
    }
    // Full-text search finds a born-digital page's words.
    let hits = store::search_user_text(&mut conn, "quartz crystals", 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].doc_id, hits[0].page_no), (id, 3));
    // Exported as Markdown: every page, in order, the text layer's lines as read (joined into
    // paragraphs by the layout: the first and last line of page 1 are found in it).
    let md = store::document_markdown(&mut conn, id).unwrap().unwrap();
    let order: Vec<_> = md.pages.iter().map(|p| (p.page_no, p.read_by)).collect();
    assert_eq!(order[0], (1, Some(ReadBy::TextLayer)));
    assert_eq!(order.len(), 4);
    let whole = md.to_markdown();
    let at = |needle: &str| whole.find(needle).unwrap();
    let (first, last) = (texts[0][0].as_str(), texts[0][texts[0].len() - 1].as_str());
    assert!(at("<!-- page 1 -->") < at(first), "{whole}");
    assert!(at(first) < at(last));
    assert!(at(last) < at("<!-- page 2 -->"));
    assert!(at("<!-- page 3 -->") < at("quartz crystals glow"));
    let report = pipeline.report(id).unwrap();
    let ocr = report
        .stages
        .iter()
        .find(|s| s.stage == "image_to_ocr")
        .unwrap();
    assert_eq!(ocr.jobs, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_layer_ignore_reads_every_page() {
    let (_dir, pipeline, id, calls) = ingest(TextLayerMode::Ignore).await;
    assert_eq!(calls, 4);
    let mut conn = pipeline.connection().unwrap();
    let pages = store::document_pages(&mut conn, id).unwrap();
    assert!(
        pages.iter().all(|p| p.read_by == Some(ReadBy::Tesseract)),
        "{pages:?}"
    );
}

/// A born-digital document with headings, code and tables (the layout engine's corpus): its
/// export is structured Markdown, and its chunks follow the structure (a chunk never crosses a
/// heading; a table is a chunk of its own, its header first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_document_is_exported_and_chunked_by_its_structure() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pdf/tests/corpus");
    let file = dir.path().join("config-reference.pdf");
    std::fs::copy(corpus.join("config-reference.pdf"), &file).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let reader = Counting {
        calls: calls.clone(),
        tesseract: None,
    };
    let cfg = PipelineConfig::new(dir.path());
    let (pipeline, doc) = crate::common::ingest_with(cfg, reader, &file).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "born digital: no page read by the reader"
    );
    let mut conn = pipeline.connection().unwrap();
    let md = store::document_markdown(&mut conn, doc.id)
        .unwrap()
        .unwrap()
        .to_markdown();
    assert!(
        md.starts_with("<!-- page 1 -->\n\n# Configuration Reference"),
        "{md}"
    );
    assert!(md.contains("\n## Keys of the worker section\n"), "{md}");
    assert!(md.contains("| Key | Type | Default | Meaning |\n| --- | --- | --- | --- |\n| threads | integer | 4 |"), "{md}");
    assert!(md.contains("```\n[database]\npath = "), "{md}");
    assert!(!md.contains("\n1\n"), "page numbers are dropped: {md}");
    // JSON Lines: each page's blocks, a table as its rows, the running header as furniture.
    let export = store::document_export(&mut conn, doc.id).unwrap().unwrap();
    let jsonl = export.render(store::ExportFormat::Jsonl).unwrap();
    let first: serde_json::Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    assert_eq!(first["structured"], true, "{first}");
    assert_eq!(first["blocks"][0]["type"], "heading", "{first}");
    assert_eq!(
        first["furniture"][0], "Configuration Reference for the Ingest Worker",
        "{first}"
    );
    let table = first["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "table")
        .unwrap_or_else(|| panic!("no table on page 1: {first}"));
    assert_eq!(table["header"][0], "Key", "{table}");
    assert_eq!(table["rows"][0][0], "threads", "{table}");
    let mut chunks = Vec::new();
    for page in 1..=doc.pages.unwrap() {
        chunks.extend(store::page_chunks(&mut conn, doc.id, page).unwrap());
    }
    assert!(chunks.len() > 3, "{chunks:?}");
    for (_, text) in &chunks {
        // Headings outside code fences (`#!/bin/sh` is code).
        let mut fenced = false;
        let headings = text
            .lines()
            .filter(|l| {
                if l.starts_with("```") {
                    fenced = !fenced;
                }
                !fenced && l.starts_with('#')
            })
            .count();
        assert!(headings <= 1, "a chunk across headings: {text}");
        if headings == 1 {
            assert!(text.starts_with('#'), "a heading opens its chunk: {text}");
        }
        if text.contains("| --- |") {
            assert!(
                text.starts_with("| "),
                "a table is a chunk of its own: {text}"
            );
        }
    }
    assert!(
        chunks.iter().any(|(_, t)| t.starts_with("| Key | Type")),
        "{chunks:?}"
    );
}

/// Every corpus document written by WeasyPrint, ingested and exported, reads as its source does
/// (text similarity at least 0.95: the Markdown the export writes, page marks and all, is the
/// layout engine's), including a page that holds only the end of a paragraph from the page
/// before (joined there, the page itself left empty, not written again as raw text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_corpus_documents_read_as_their_sources() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pdf/tests/corpus");
    for name in ["storage-survey", "incident-review", "field-notes"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("{name}.pdf"));
        std::fs::copy(corpus.join(format!("{name}.pdf")), &file).unwrap();
        let reader = Counting {
            calls: Arc::new(AtomicUsize::new(0)),
            tesseract: None,
        };
        let cfg = PipelineConfig::new(dir.path());
        let (pipeline, doc) = crate::common::ingest_with(cfg, reader, &file).await;
        let mut conn = pipeline.connection().unwrap();
        let md = store::document_markdown(&mut conn, doc.id)
            .unwrap()
            .unwrap()
            .to_markdown();
        let source = std::fs::read_to_string(corpus.join(format!("{name}.md"))).unwrap();
        let truth = source.split_once('\n').unwrap().1;
        let scores = horos_testkit::markdown_score::score(truth, &md);
        assert!(scores.text_similarity >= 0.95, "{name}: {scores:?}\n{md}");
    }
}
