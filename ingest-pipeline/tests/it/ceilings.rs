//! The ceilings a document meets in the pipeline: a page whose streams decode past
//! `max_decoded_mb` fails alone, recorded as `too_large` in its document's report and pages, and
//! its document, its other pages and the other documents go on to the end.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::render::FailureReason;
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::{Reading, VisionError, VisionReader};

/// A reader that needs no OCR engine (the pages here keep their text layer: it is not called).
struct Fixed;

impl VisionReader for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }

    async fn read(&self, _png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        Ok(Reading::default())
    }
}

const AFTER: &str = "the page after the bomb keeps its own text layer";
const OTHER: &str = "another document arrives while the first is being read";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_past_the_ceiling_fails_alone_and_everything_else_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.render.dpi = 20.0;
    cfg.render.max_decoded_bytes = 8 << 20;
    let pipeline = Pipeline::open(
        cfg,
        Fixed,
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    // 64 MiB of zeros in a 420 KB content stream, then a born-digital page.
    let bomb = dir.path().join("bomb.pdf");
    std::fs::write(
        &bomb,
        horos_testkit::pdf::bomb_then_text(64 << 20, &[AFTER]),
    )
    .unwrap();
    let other = dir.path().join("other.pdf");
    std::fs::write(&other, horos_testkit::pdf::text(&[OTHER], 12)).unwrap();
    let ids = [
        pipeline.submit(&bomb).await.unwrap().document().id,
        pipeline.submit(&other).await.unwrap().document().id,
    ];
    let mut ended = Vec::new();
    for id in ids {
        ended.push(
            pipeline
                .wait_for(id, Duration::from_secs(120))
                .await
                .unwrap(),
        );
    }
    running.shutdown().await;
    assert_eq!(
        ended.iter().map(|d| d.status).collect::<Vec<_>>(),
        [DocStatus::Done, DocStatus::Done],
        "{ended:?}"
    );

    let report = pipeline.report(ids[0]).unwrap();
    assert_eq!(report.pages, 2);
    assert_eq!(report.failed_pages.len(), 1, "{:?}", report.failed_pages);
    let failed = &report.failed_pages[0];
    assert_eq!(failed.page_no, 1);
    assert_eq!(failed.failure.reason, FailureReason::TooLarge);
    assert!(
        failed.failure.message.contains("8388608 bytes"),
        "{}",
        failed.failure.message
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["failed_pages"][0]["reason"], "too_large");

    let mut conn = pipeline.connection().unwrap();
    let pages = store::document_pages(&mut conn, ids[0]).unwrap();
    assert_eq!(
        pages
            .iter()
            .map(|p| p.failure.is_some())
            .collect::<Vec<_>>(),
        [true, false]
    );
    assert!(pages[1].chars > 0);
    let hits = store::search_text(&mut conn, "bomb", 5).unwrap();
    assert_eq!(
        hits.iter()
            .map(|h| (h.doc_id, h.page_no))
            .collect::<Vec<_>>(),
        [(ids[0], 2)]
    );
    assert!(pipeline.report(ids[1]).unwrap().failed_pages.is_empty());
}
