//! Pages scanned sideways and upside down are turned upright once, when they are rendered
//! (`PipelineConfig::orientation`), so that whatever reads them (Tesseract, a vision model) and
//! the visual embedder get them upright, and each records its rotation; a page that keeps its
//! text layer is left as it is. A Tesseract reader alone still detects it itself. The tests
//! with real orientation detection need Tesseract (skipped without it, unless
//! HOROS_REQUIRE_OCR=1); the others use a stand-in `tesseract` script.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{TestPage, mixed_pdf, prose, rasterised};
use base64::Engine as _;
use horos_fakeai::{FakeConfig, FakeServer};
use ingest_pipeline::embed::HashingEmbedder;
use ingest_pipeline::openai::OpenAiVisionReader;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::pooling::PoolingEmbedder;
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::{ReadBy, Reading, TesseractReader, VisionError, VisionReader};

/// Share of `want`'s lines found whole, in order of words, among `text`'s lines (the words
/// alone would not do: the pages share a small vocabulary).
fn recall(want: &[String], text: &str) -> f64 {
    let got: Vec<&str> = text.lines().map(str::trim).collect();
    want.iter().filter(|l| got.contains(&l.as_str())).count() as f64 / want.len() as f64
}

/// The page images `server` was sent on requests to `path` (`/v1/chat/completions`: the vision
/// reader's; `/pooling`: the visual embedder's), decoded from their data URLs.
fn images_sent(server: &FakeServer, path: &str) -> Vec<image::RgbImage> {
    let mut images = Vec::new();
    for r in server.requests().iter().filter(|r| r.path == path) {
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        for m in body["messages"].as_array().unwrap() {
            for part in m["content"].as_array().into_iter().flatten() {
                let Some(url) = part["image_url"]["url"].as_str() else {
                    continue;
                };
                let (_, data) = url.split_once("base64,").unwrap();
                let png = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap();
                images.push(image::load_from_memory(&png).unwrap().into_rgb8());
            }
        }
    }
    images
}

/// A stand-in `tesseract` in `dir` whose orientation detection always answers "turn 90°
/// clockwise" with good confidence; it appends a line to `dir/runs` each time it runs.
fn turn_90_tesseract(dir: &Path) -> PathBuf {
    let script = dir.join("tesseract");
    let runs = dir.join("runs");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho \"$*\" >> '{}'\n\
             printf 'Page number: 0\\nOrientation in degrees: 270\\nRotate: 90\\n\
             Orientation confidence: 9.50\\nScript: Latin\\nScript confidence: 3.00\\n'\n",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

fn dark(img: &image::RgbImage, x: u32, y: u32) -> bool {
    img.get_pixel(x, y).0.iter().all(|&v| v < 64)
}

/// Whatever it is given, it reads a fixed text, as a vision model.
struct Fixed;

impl VisionReader for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }

    async fn read(&self, _png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        Ok(Reading {
            text: "a scanned page".into(),
            ..Reading::default()
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vision_reader_and_the_visual_embedder_get_the_page_turned_once() {
    let server = FakeServer::start(FakeConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A landscape scan, 300 x 200, white with a black square in its top left corner.
    let mut scan = image::GrayImage::from_pixel(300, 200, image::Luma([255]));
    for x in 0..40 {
        for y in 0..40 {
            scan.put_pixel(x, y, image::Luma([0]));
        }
    }
    let file = dir.path().join("mixed.pdf");
    std::fs::write(
        &file,
        mixed_pdf(&[TestPage::Text(prose(1, 30)), TestPage::Image(scan)]),
    )
    .unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.orientation = Some(
        TesseractReader::default().with_program(turn_90_tesseract(dir.path()).to_str().unwrap()),
    );
    let pipeline = Pipeline::open(
        cfg,
        OpenAiVisionReader::new(&server.url(), "vision-model").unwrap(),
        HashingEmbedder::default(),
        PoolingEmbedder::new(&server.url(), "colpali").unwrap(),
    )
    .unwrap();
    let running = pipeline.start();
    let doc = crate::common::submit_and_wait(&pipeline, &file).await;
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");

    // The vision model was sent the scan only, turned: 200 x 300, the square top right.
    let read = images_sent(&server, "/v1/chat/completions");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].dimensions(), (200, 300));
    assert!(dark(&read[0], 179, 20) && !dark(&read[0], 20, 20));
    // The visual embedder got that same upright image, and the born-digital page as rendered
    // (US Letter, portrait).
    let embedded = images_sent(&server, "/pooling");
    assert_eq!(embedded.len(), 2);
    assert!(embedded.contains(&read[0]));
    let mut conn = pipeline.connection().unwrap();
    let letter = store::page_info(&mut conn, doc.id, 1).unwrap().unwrap();
    assert!(letter.height > letter.width, "{letter:?}");
    assert!(
        embedded
            .iter()
            .any(|i| i.dimensions() == (letter.width, letter.height)),
        "{:?}",
        embedded.iter().map(|i| i.dimensions()).collect::<Vec<_>>()
    );
    // Detected once, for the scan; the page keeping its text layer was not looked at.
    let runs = std::fs::read_to_string(dir.path().join("runs")).unwrap();
    assert_eq!(runs.lines().collect::<Vec<_>>(), ["stdin stdout --psm 0"]);

    let pages: Vec<(u32, Option<ReadBy>, u16)> = store::document_pages(&mut conn, doc.id)
        .unwrap()
        .into_iter()
        .map(|p| (p.page_no, p.read_by, p.rotation))
        .collect();
    assert_eq!(
        pages,
        [
            (1, Some(ReadBy::TextLayer), 0),
            (2, Some(ReadBy::VisionModel), 90)
        ]
    );
    let info = store::page_info(&mut conn, doc.id, 2).unwrap().unwrap();
    assert_eq!((info.width, info.height), (200, 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sideways_scan_reaches_the_vision_model_upright() {
    if !crate::common::tesseract_available() {
        return;
    }
    let server = FakeServer::start(FakeConfig::default()).await.unwrap();
    let text = prose(2, 30);
    let upright = rasterised(&text, 150.0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sideways.pdf");
    std::fs::write(
        &file,
        mixed_pdf(&[TestPage::Image(image::imageops::rotate90(&upright))]),
    )
    .unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.orientation = Some(TesseractReader::default());
    let reader = OpenAiVisionReader::new(&server.url(), "vision-model").unwrap();
    let (pipeline, doc) = crate::common::ingest_with(cfg, reader, &file).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let read = images_sent(&server, "/v1/chat/completions");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].dimensions(), upright.dimensions());
    // Upright: Tesseract reads it without turning it.
    let mut png = Vec::new();
    read[0]
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let ocr = TesseractReader::default()
        .with_orientation(false)
        .read_blocking(&png)
        .unwrap();
    assert!(recall(&text, &ocr.text) >= 0.8, "{}", ocr.text);
    let pages = store::document_pages(&mut pipeline.reads(), doc.id).unwrap();
    assert_eq!(
        (pages[0].read_by, pages[0].rotation),
        (Some(ReadBy::VisionModel), 270)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_without_tesseract_fails_a_scan_with_the_reason_not_a_born_digital_page() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.pdf");
    std::fs::write(
        &scan,
        mixed_pdf(&[TestPage::Image(rasterised(&prose(3, 10), 150.0))]),
    )
    .unwrap();
    let born_digital = dir.path().join("text.pdf");
    std::fs::write(&born_digital, mixed_pdf(&[TestPage::Text(prose(4, 30))])).unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.orientation = Some(TesseractReader::default().with_program("/nonexistent/tesseract"));
    let pipeline = Pipeline::open(
        cfg,
        Fixed,
        HashingEmbedder::default(),
        ingest_pipeline::embed::PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let failed = crate::common::submit_and_wait(&pipeline, &scan).await;
    let done = crate::common::submit_and_wait(&pipeline, &born_digital).await;
    running.shutdown().await;
    assert_eq!(failed.status, DocStatus::Failed, "{failed:?}");
    let error = failed.error.unwrap_or_default();
    assert!(
        error.contains("orientation detection") && error.contains("tesseract not found"),
        "{error}"
    );
    assert_eq!(done.status, DocStatus::Done, "{done:?}");
}

/// Three scans (upright, sideways, upside down) ingested with the pipeline's `orientation`
/// detection and `reader` are read upright and record their rotations.
async fn three_scans_read_upright(orientation: Option<TesseractReader>, reader: TesseractReader) {
    let texts = [prose(1, 30), prose(2, 30), prose(3, 30)];
    let upright = rasterised(&texts[0], 150.0);
    // Scanned turned 90° clockwise: turning it 270° more makes it upright.
    let sideways = image::imageops::rotate90(&rasterised(&texts[1], 150.0));
    let upside_down = image::imageops::rotate180(&rasterised(&texts[2], 150.0));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scans.pdf");
    std::fs::write(
        &file,
        mixed_pdf(&[
            TestPage::Image(upright),
            TestPage::Image(sideways),
            TestPage::Image(upside_down),
        ]),
    )
    .unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.orientation = orientation;
    let (pipeline, doc) = crate::common::ingest_with(cfg, reader, &file).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let id = doc.id;
    let mut conn = pipeline.connection().unwrap();
    let pages = store::document_pages(&mut conn, id).unwrap();
    let rotations: Vec<(u32, u16)> = pages.iter().map(|p| (p.page_no, p.rotation)).collect();
    assert_eq!(rotations, vec![(1, 0), (2, 270), (3, 180)]);
    assert!(pages.iter().all(|p| p.read_by == Some(ReadBy::Tesseract)));
    for (page, text) in (1..).zip(&texts) {
        let read = store::page_text(&mut conn, id, page).unwrap().unwrap();
        let r = recall(text, &read);
        assert!(r >= 0.8, "page {page}: recall {r}\n{read}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideways_and_upside_down_scans_are_read_upright_by_the_reader_alone() {
    if !crate::common::tesseract_available() {
        return;
    }
    three_scans_read_upright(None, TesseractReader::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideways_and_upside_down_scans_are_turned_by_the_pipeline_for_the_reader() {
    if !crate::common::tesseract_available() {
        return;
    }
    // As horos-ref configures it: the pipeline detects, the reader does not again.
    three_scans_read_upright(
        Some(TesseractReader::default()),
        TesseractReader::default().with_orientation(false),
    )
    .await;
}

#[test]
fn the_reader_turns_a_sideways_png_unless_told_not_to() {
    if !crate::common::tesseract_available() {
        return;
    }
    let text = prose(4, 30);
    let sideways = image::imageops::rotate90(&rasterised(&text, 150.0));
    let mut png = Vec::new();
    image::DynamicImage::ImageLuma8(sideways)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let turned = TesseractReader::default().read_blocking(&png).unwrap();
    assert_eq!(turned.rotation, 270);
    assert!(recall(&text, &turned.text) >= 0.8, "{}", turned.text);
    let plain = TesseractReader::default()
        .with_orientation(false)
        .read_blocking(&png)
        .unwrap();
    assert_eq!(plain.rotation, 0);
}
