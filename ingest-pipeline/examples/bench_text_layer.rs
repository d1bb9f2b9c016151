//! Ingest throughput on the CPU of a born-digital document, against the baseline a user would
//! script: `pdftoppm -r DPI` then `tesseract` per page, the same number of pages in flight as
//! the pipeline has threads. The pipeline keeps each page's text layer (no OCR), and still
//! renders the page, stores its text (FTS5) and chunks and embeds them (`HashingEmbedder`,
//! `PixelPatchFallback`: offline, on the same CPU). A third run, `text_layer = "ignore"`, shows the
//! pipeline's OCR path on the same pages (Tesseract with orientation detection). Last, what
//! reading the text layer adds to rendering (the generated document and, when the samples are
//! there, the camlidl manual).
//!
//! The document is generated: PAGES US Letter pages of 40 lines of prose (9 words each) in
//! Helvetica 12 pt, written by the tests' PDF writer; or a real PDF given by its path instead of
//! PAGES (e.g. the camlidl manual of `scripts/fetch_sample_pdfs.sh`, `manual.pdf`).
//! Needs `pdftoppm` (poppler-utils) and `tesseract`.
//! Run: `cargo run --release -p ingest-pipeline --example bench_text_layer [-- PAGES|PDF THREADS
//! DPI]` (defaults 24, 2, 150).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use ingest_pipeline::pipeline::{PipelineConfig, Stage};
use ingest_pipeline::render::{RenderConfig, render_pages};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::text_layer::TextLayerMode;
use ingest_pipeline::vision::{ReadBy, TesseractReader};

#[path = "../tests/common/mod.rs"]
mod common;

use common::{TestPage, mixed_pdf, prose};

/// A born-digital PDF of `pages` Letter pages, 40 lines of prose each (Helvetica 12 pt).
fn born_digital_pdf(pages: usize) -> Vec<u8> {
    let pages: Vec<TestPage> = (0..pages).map(|p| TestPage::Text(prose(p, 40))).collect();
    mixed_pdf(&pages)
}

/// The baseline: per page, `pdftoppm -r DPI -f P -l P -png` then `tesseract PNG stdout`,
/// `threads` pages at a time. Returns the seconds and the words read.
fn baseline(pdf: &Path, pages: u32, threads: usize, dpi: f32, work: &Path) -> (f64, usize) {
    let next = Arc::new(AtomicU32::new(1));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (next, pdf, work) = (next.clone(), pdf.to_path_buf(), work.to_path_buf());
            std::thread::spawn(move || {
                let mut words = 0;
                loop {
                    let p = next.fetch_add(1, Ordering::SeqCst);
                    if p > pages {
                        return words;
                    }
                    let prefix = work.join(format!("base-{p}"));
                    let ok = Command::new("pdftoppm")
                        .args(["-r", &dpi.to_string(), "-f", &p.to_string()])
                        .args(["-l", &p.to_string(), "-png", "-singlefile"])
                        .arg(&pdf)
                        .arg(&prefix)
                        .status()
                        .expect("pdftoppm (poppler-utils) runs")
                        .success();
                    assert!(ok, "pdftoppm failed on page {p}");
                    let out = Command::new("tesseract")
                        .arg(prefix.with_extension("png"))
                        .arg("stdout")
                        .env("OMP_THREAD_LIMIT", "1")
                        .output()
                        .expect("tesseract runs");
                    assert!(out.status.success(), "tesseract failed on page {p}");
                    words += String::from_utf8_lossy(&out.stdout)
                        .split_whitespace()
                        .count();
                }
            })
        })
        .collect();
    let words = handles.into_iter().map(|h| h.join().unwrap()).sum();
    (started.elapsed().as_secs_f64(), words)
}

/// Ingests `pdf` with the pipeline (`threads` runtime threads); seconds, and pages by reader.
fn pipeline(pdf: &Path, threads: usize, dpi: f32, mode: TextLayerMode, dir: &Path) -> (f64, usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .max_blocking_threads(threads.max(2) * 4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cfg = PipelineConfig::new(dir);
        cfg.render.dpi = dpi;
        cfg.render.text_layer = mode;
        // As many OCR processes as the baseline's.
        let ocr = Stage::ALL
            .iter()
            .position(|s| *s == Stage::ImageToOcr)
            .unwrap();
        cfg.workers[ocr] = threads;
        let started = Instant::now();
        let (pipeline, doc) = common::ingest_with(cfg, TesseractReader::default(), pdf).await;
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
        let pages = store::document_pages(&mut pipeline.reads(), doc.id).unwrap();
        let by_text_layer = pages
            .iter()
            .filter(|p| p.read_by == Some(ReadBy::TextLayer))
            .count();
        (secs, by_text_layer)
    })
}

/// Seconds to render every page of `data` at `dpi` (the pipeline's renderer, PNG not encoded)
/// with the text layer read or not: what the text layer adds to a page rendered anyway. Best
/// of 3.
fn render_seconds(data: &[u8], dpi: f32, mode: TextLayerMode) -> f64 {
    let cfg = RenderConfig {
        dpi,
        text_layer: mode,
        ..RenderConfig::default()
    };
    (0..3)
        .map(|_| {
            let started = Instant::now();
            render_pages(data.to_vec(), &cfg, 1, |_| ControlFlow::Continue(())).unwrap();
            started.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The document measured: `(path, pages, description)`. The first argument is a page count
/// (the generated document, written in `work`) or the path of a PDF.
fn document(arg: Option<&String>, work: &Path) -> (PathBuf, u32, String) {
    match arg.map(|a| (a, a.parse::<u32>())) {
        Some((path, Err(_))) => {
            let pdf = PathBuf::from(path);
            let data = std::fs::read(&pdf).unwrap_or_else(|e| panic!("{path}: {e}"));
            let pages = ingest_pipeline::render::page_count(data, &RenderConfig::default())
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            let name = format!("{} ({pages} pages)", pdf.display());
            (pdf, pages, name)
        }
        other => {
            let pages = other.map_or(24, |(_, n)| n.expect("PAGES"));
            let pdf = work.join("born-digital.pdf");
            std::fs::write(&pdf, born_digital_pdf(pages as usize)).unwrap();
            let name = format!("{pages} generated born-digital Letter pages");
            (pdf, pages, name)
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads: usize = args.get(1).map_or(2, |a| a.parse().expect("THREADS"));
    let dpi: f32 = args.get(2).map_or(150.0, |a| a.parse().expect("DPI"));
    let work = tempfile::tempdir().unwrap();
    let (pdf, pages, name) = document(args.first(), work.path());
    println!("machine: {}; load before: {}", machine(), load());
    println!("document: {name}, {dpi} dpi, {threads} threads");

    let (secs, by_layer) = pipeline(
        &pdf,
        threads,
        dpi,
        TextLayerMode::Auto,
        &work.path().join("auto"),
    );
    let pipeline_pps = f64::from(pages) / secs;
    println!(
        "pipeline, text_layer = auto:   {secs:7.2} s  {pipeline_pps:7.2} pages/s  \
         ({by_layer}/{pages} pages kept their text layer)"
    );
    let (base_secs, words) = baseline(&pdf, pages, threads, dpi, work.path());
    let base_pps = f64::from(pages) / base_secs;
    println!(
        "baseline, pdftoppm+tesseract:  {base_secs:7.2} s  {base_pps:7.2} pages/s  ({words} words read)"
    );
    println!("ratio pipeline / baseline: {:.1}x", pipeline_pps / base_pps);
    let (ocr_secs, _) = pipeline(
        &pdf,
        threads,
        dpi,
        TextLayerMode::Ignore,
        &work.path().join("ignore"),
    );
    println!(
        "pipeline, text_layer = ignore: {ocr_secs:7.2} s  {:7.2} pages/s  (OCR path, orientation detection on)",
        f64::from(pages) / ocr_secs
    );
    let manual = common::samples().map(|d| d.join("manual.pdf"));
    let docs = [
        ("this document", Some(pdf.clone())),
        ("camlidl manual (26 pages)", manual.filter(|m| *m != pdf)),
    ];
    for (name, path) in docs {
        let Some(data) = path.and_then(|p| std::fs::read(p).ok()) else {
            continue;
        };
        let n = ingest_pipeline::render::page_count(data.clone(), &RenderConfig::default())
            .unwrap_or(1)
            .max(1);
        let plain = render_seconds(&data, dpi, TextLayerMode::Ignore);
        let with = render_seconds(&data, dpi, TextLayerMode::Auto);
        println!(
            "render only, {name}: {:.1} ms/page; with the text layer read: {:.1} ms/page (+{:.0} %)",
            plain * 1000.0 / f64::from(n),
            with * 1000.0 / f64::from(n),
            (with / plain - 1.0) * 100.0
        );
    }
    println!("load after: {}", load());
}
