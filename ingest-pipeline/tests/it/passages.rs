//! The pages an answer is written from carry their rendered image when asked: the best
//! `images` pages only, each the PNG the pipeline stored, none over `max_image_bytes`; a page
//! whose image file is gone keeps its text.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::common::{CountingReader, TestPage, mixed_pdf, prose};
use horos_server_control::PassageQuery;
use ingest_pipeline::pipeline::PipelineConfig;
use ingest_pipeline::store::{self, DocStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_best_pages_come_with_their_stored_images_within_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    // Three born-digital pages, each naming quartz crystals.
    let page = |seed| {
        let mut lines = prose(seed, 12);
        lines.push(format!("quartz crystals glow {seed}"));
        TestPage::Text(lines)
    };
    let file = dir.path().join("quartz.pdf");
    std::fs::write(&file, mixed_pdf(&[page(1), page(2), page(3)])).unwrap();
    let reader = CountingReader {
        calls: Arc::new(AtomicUsize::new(0)),
        text: "read",
        delay: Duration::ZERO,
    };
    let (pipeline, doc) =
        crate::common::ingest_with(PipelineConfig::new(dir.path()), reader, &file).await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let query = |images, max_image_bytes| PassageQuery {
        question: "quartz crystals".into(),
        k: 3,
        document: Some(doc.id),
        min_similarity: 0.35,
        max_chars: 1500,
        images,
        max_image_bytes,
        collections: Default::default(),
    };
    let stored = |page_no| {
        let mut conn = pipeline.connection().unwrap();
        let info = store::page_info(&mut conn, doc.id, page_no)
            .unwrap()
            .unwrap();
        (
            info.image_path.clone(),
            std::fs::read(&info.image_path).unwrap(),
        )
    };

    // The best two pages: their stored PNGs; the third: its text only.
    let got = pipeline.passages(&query(2, 4 << 20)).await.unwrap();
    assert_eq!(got.len(), 3, "{got:?}");
    for p in &got[..2] {
        let png = p.image.as_ref().expect("an image for a best page");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(*png, stored(p.page).1);
    }
    assert!(got[2].image.is_none());
    assert!(got.iter().all(|p| p.text.contains("quartz crystals")));

    // None asked for, or every image over the limit: none given, the text kept.
    let got = pipeline.passages(&query(0, 4 << 20)).await.unwrap();
    assert!(got.iter().all(|p| p.image.is_none()));
    let got = pipeline.passages(&query(3, 100)).await.unwrap();
    assert_eq!(got.len(), 3);
    assert!(
        got.iter()
            .all(|p| p.image.is_none() && p.text.contains("quartz"))
    );

    // The best page's image file gone: that page keeps its text, the others their images.
    let best = got[0].page;
    std::fs::remove_file(stored(best).0).unwrap();
    let got = pipeline.passages(&query(3, 4 << 20)).await.unwrap();
    for p in &got {
        assert_eq!(p.image.is_none(), p.page == best, "{p:?}");
        assert!(p.text.contains("quartz"), "{p:?}");
    }
}
