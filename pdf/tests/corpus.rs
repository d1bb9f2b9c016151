//! The layout engine on the ground-truth corpus (`tests/corpus/`: documents written as Markdown,
//! rendered to PDF by WeasyPrint with running headers and page numbers): each PDF's text layer
//! structured ([`structure::read_pdf`]) and its Markdown scored against the source
//! ([`markdown_score`]). The bounds are the targets of issue #53: text similarity at least 0.95
//! on every document, and each structure score at least what pymupdf4llm 1.28.2 scored on it
//! (measured by `bench_markdown`, recorded in `tests/corpus/README.md`).

use std::path::PathBuf;

use horos_pdf::render::RenderConfig;
use horos_pdf::structure;
use horos_testkit::markdown_score::{self, Scores};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// pymupdf4llm's F1 per corpus PDF (`tests/corpus/reference.tsv`, written by `bench_markdown
/// --write-reference`): headings, list items, code blocks, table cells (`None` where the
/// document has none).
fn reference() -> Vec<(String, [Option<f64>; 4])> {
    let tsv = std::fs::read_to_string(corpus().join("reference.tsv")).expect("reference.tsv");
    tsv.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("pdf\t") && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 6, "reference.tsv line {l:?}");
            let f = |s: &str| s.parse::<f64>().ok();
            (
                cols[0].to_owned(),
                [f(cols[2]), f(cols[3]), f(cols[4]), f(cols[5])],
            )
        })
        .collect()
}

/// The PDF's Markdown as the layout engine writes it, and its scores against its truth (the
/// `.md` named by the PDF's name up to its first dot: `a.pdf` and `a.latex.pdf` are both `a.md`
/// rendered).
fn scored(pdf_name: &str) -> (String, Scores) {
    let dir = corpus();
    let pdf = std::fs::read(dir.join(pdf_name)).expect("corpus PDF");
    let stem = pdf_name.split('.').next().unwrap_or(pdf_name);
    let source = std::fs::read_to_string(dir.join(format!("{stem}.md"))).expect("corpus source");
    // The first line is the renderer's options, not the document.
    let truth = source.split_once('\n').map_or("", |(_, rest)| rest);
    let pages = structure::read_pdf(pdf, &RenderConfig::default()).expect("corpus PDF reads");
    let md = structure::to_markdown(&pages);
    let scores = markdown_score::score(truth, &md);
    (md, scores)
}

#[test]
fn the_corpus_scores_at_least_the_targets() {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let reference = reference();
    let mut pdfs: Vec<String> = std::fs::read_dir(corpus())
        .expect("corpus")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pdf"))
        .collect();
    pdfs.sort();
    assert!(pdfs.len() >= 8, "the corpus has {} PDFs", pdfs.len());
    for name in &pdfs {
        let (md, s) = scored(name);
        let Some((_, reference)) = reference.iter().find(|(n, _)| n == name) else {
            failures.push(format!("{name}: no pymupdf4llm figures in reference.tsv"));
            rows.push((name.to_string(), s));
            continue;
        };
        if s.text_similarity < 0.95 {
            failures.push(format!(
                "{name}: text similarity {:.3} < 0.95",
                s.text_similarity
            ));
        }
        let ours = [&s.heading, &s.list_item, &s.code_block, &s.table_cell];
        for ((what, f1), reference) in ["headings", "list items", "code blocks", "table cells"]
            .iter()
            .zip(ours)
            .zip(reference)
        {
            if let Some(r) = reference
                && f1.f1() + 1e-9 < *r
            {
                failures.push(format!(
                    "{name}: {what} F1 {:.3} < pymupdf4llm's {r:.3}",
                    f1.f1()
                ));
            }
        }
        if std::env::var_os("CORPUS_MARKDOWN").is_some() {
            eprintln!("===== {name}\n{md}");
        }
        rows.push((name.to_string(), s));
    }
    let table: Vec<(&str, &Scores)> = rows.iter().map(|(n, s)| (n.as_str(), s)).collect();
    eprintln!("{}", markdown_score::scores_table(&table));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A page whose two columns are drawn line by line across (as some producers write them) is
/// read column by column.
#[test]
fn two_columns_drawn_across_are_read_down_each_column() {
    let mut content = String::from("BT /F1 18 Tf 72 740 Td (Two columns) Tj ET\n");
    for i in 0..10 {
        let y = 700 - 14 * i;
        content.push_str(&format!(
            "BT /F1 11 Tf 72 {y} Td (left column line {i} of the text) Tj \
             270 0 Td (right column line {i} of the text) Tj ET\n"
        ));
    }
    let pdf = horos_testkit::pdf::page(&content);
    let pages = structure::read_pdf(pdf, &RenderConfig::default()).expect("the page reads");
    let md = structure::to_markdown(&pages);
    let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("{s:?} in {md}"));
    assert!(
        md.starts_with("# Two columns\n\nleft column line 0 of the text left column line 1"),
        "{md}"
    );
    assert!(at("left column line 9") < at("right column line 0"), "{md}");
    assert!(
        at("right column line 8") < at("right column line 9"),
        "{md}"
    );
}

/// Malformed fonts, boxes, rules and links give a page some structure or none, never a panic.
#[test]
fn malformed_fonts_boxes_and_links_never_panic() {
    let fonts = [
        // No BaseFont, a descriptor with nonsense in every field.
        "<< /Type /Font /Subtype /TrueType /FirstChar 300 /LastChar 2 /Widths [-5 1e30] \
         /FontDescriptor << /Flags -1 /FontWeight -900 /ItalicAngle 1e30 /FontName /Bold-Mono >> >>",
        // A composite font without its descendant.
        "<< /Type /Font /Subtype /Type0 /BaseFont /Broken /Encoding /Identity-H >>",
        // A Type 3 font whose glyphs are procedures that do not exist.
        "<< /Type /Font /Subtype /Type3 /FontBBox [0 0 0 0] /FontMatrix [0 0 0 0 0 0] \
         /CharProcs << >> /Encoding << /Differences [0 /a] >> /FirstChar 0 /LastChar 0 /Widths [0] >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ];
    let contents = [
        // Sizes zero, negative and huge; a degenerate matrix; text far off the page.
        "BT /F1 0 Tf 72 700 Td (zero size) Tj /F1 -12 Tf (negative) Tj /F1 1e30 Tf (huge) Tj ET",
        "BT /F1 12 Tf 0 0 0 0 72 700 Tm (flat) Tj 1 0 0 1 1e30 -1e30 Tm (far away) Tj ET",
        // Rules: zero-length, huge, and thousands of them.
        "0 0 0 RG 1 w 0 0 m 0 0 l S 1e30 1e30 m -1e30 -1e30 l S 72 700 1e30 0.5 re f",
        &(0..3000)
            .map(|i| format!("72 {} 400 0.5 re f ", 100 + i % 600))
            .collect::<String>(),
        "BT /F1 11 Tf 72 700 Td (• item) Tj T* (1. numbered) Tj T* (con-) Tj T* (tinued) Tj ET",
    ];
    let annots = [
        "[]",
        "[<< /Subtype /Link /Rect [0 0 1e30 1e30] /A << /S /URI /URI (javascript:alert) >> >>]",
        "[<< /Subtype /Link /Rect [1 2] /A << /URI 7 >> >> 5 /Nothing]",
    ];
    for font in fonts {
        for content in contents {
            for annot in annots {
                let pdf = horos_testkit::pdf::from_objects(&[
                    "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
                    "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
                    format!(
                        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
                         /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R /Annots {annot} >>"
                    ),
                    font.to_owned(),
                    format!(
                        "<< /Length {} >>\nstream\n{content}\nendstream",
                        content.len()
                    ),
                ]);
                // Read or refused with its typed error: either is fine, a panic is not.
                if let Ok(pages) = structure::read_pdf(pdf, &RenderConfig::default()) {
                    let _ = structure::to_markdown(&pages);
                }
            }
        }
    }
}

/// The Markdown `structure` writes for `pdf` (a corpus file).
fn markdown_of(pdf: &str) -> String {
    let bytes = std::fs::read(corpus().join(pdf)).expect("corpus PDF");
    let pages = structure::read_pdf(bytes, &RenderConfig::default()).expect("corpus PDF reads");
    structure::to_markdown(&pages)
}

/// Each layout rule on the corpus page that exercises it, from both producers, asserting the
/// Markdown itself (the scores above say how close the whole is; this says what a rule writes).
#[test]
fn each_rule_writes_its_markdown_on_the_corpus_pages() {
    for producer in ["", ".latex"] {
        let md = |name: &str| markdown_of(&format!("{name}{producer}.pdf"));
        // Headings with their levels; the running header and page numbers gone.
        let queues = md("durable-queues");
        assert!(
            queues.starts_with("# Designing a Durable Job Queue on SQLite\n\n"),
            "{queues}"
        );
        assert!(
            queues.contains("\n## Why a single file is enough\n\n"),
            "{queues}"
        );
        assert!(queues.contains("\n### Visibility timeouts\n\n"), "{queues}");
        assert_eq!(
            queues.matches("Designing a Durable Job Queue").count(),
            1,
            "{queues}"
        );
        // A bullet list with nested items.
        assert!(
            queues.contains(
                "- A consumer process killed with an uncatchable signal while holding a batch.\n   \
                 - The jobs must reappear after the visibility timeout.\n   \
                 - No job may be acknowledged twice.\n- Two consumers racing"
            ),
            "{queues}"
        );
        // Numbered lists, nested.
        let gpu = md("gpu-scheduling");
        assert!(
            gpu.contains(
                "2. The free and used memory on every device, as reported by the management \
                 library.\n   1. Memory held by processes outside the system"
            ),
            "{gpu}"
        );
        // Fenced code, indentation and blank lines kept.
        let config = md("config-reference");
        assert!(
            config.contains(
                "```\n[database]\npath = \"/var/lib/ingest/queue.db\"\nbusy_timeout_ms = 5000\n\n[[lanes]]\n"
            ),
            "{config}"
        );
        assert!(
            config.contains("\n    let settings = Settings::builder()\n        .database("),
            "{config}"
        );
        // Tables with rules and without.
        assert!(
            config.contains("| Key | Type | Default | Meaning |\n| --- | --- | --- | --- |\n| threads | integer | 4 | Pages rendered in parallel |"),
            "{config}"
        );
        let storage = md("storage-survey");
        assert!(
            storage.contains("| Engine | Model | Writers | Readers during a write |\n| --- | --- | --- | --- |\n| SQLite | relational | one | many |"),
            "{storage}"
        );
        // Footnotes: the mark in the text, the definitions last.
        let ocr = md("ocr-history");
        assert!(ocr.contains("to help blind readers.[^1]"), "{ocr}");
        assert!(
            ocr.contains("\n[^1]: One such device, the optophone, converted printed letters"),
            "{ocr}"
        );
        // De-hyphenation: no word of the source is left cut.
        let notes = md("field-notes");
        assert!(
            notes.contains("a small team converted the technical archive"),
            "{notes}"
        );
        assert!(
            !notes.contains("con-verted") && !notes.contains("con- verted"),
            "{notes}"
        );
    }
}
