//! Pages scanned sideways and upside down are detected by Tesseract's orientation detection,
//! read upright, and record their rotation. Needs Tesseract (skipped without it, unless
//! HOROS_REQUIRE_OCR=1).
#![allow(clippy::unwrap_used)]

mod common;

use common::{TestPage, mixed_pdf, prose, rasterised};
use ingest_pipeline::pipeline::PipelineConfig;
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::{ReadBy, TesseractReader};

/// Share of `want`'s lines found whole, in order of words, among `text`'s lines (the words
/// alone would not do: the pages share a small vocabulary).
fn recall(want: &[String], text: &str) -> f64 {
    let got: Vec<&str> = text.lines().map(str::trim).collect();
    want.iter().filter(|l| got.contains(&l.as_str())).count() as f64 / want.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideways_and_upside_down_scans_are_read_upright() {
    if !common::tesseract_available() {
        return;
    }
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
    let (pipeline, doc) = common::ingest_with(
        PipelineConfig::new(dir.path()),
        TesseractReader::default(),
        &file,
    )
    .await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let id = doc.id;
    let conn = pipeline.connection().unwrap();
    let pages = store::document_pages(&conn, id).unwrap();
    let rotations: Vec<(u32, u16)> = pages.iter().map(|p| (p.page_no, p.rotation)).collect();
    assert_eq!(rotations, vec![(1, 0), (2, 270), (3, 180)]);
    assert!(pages.iter().all(|p| p.read_by == Some(ReadBy::Tesseract)));
    for (page, text) in (1..).zip(&texts) {
        let read = store::page_text(&conn, id, page).unwrap().unwrap();
        let r = recall(text, &read);
        assert!(r >= 0.8, "page {page}: recall {r}\n{read}");
    }
}

#[test]
fn the_reader_turns_a_sideways_png_unless_told_not_to() {
    if !common::tesseract_available() {
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
