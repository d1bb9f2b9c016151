//! The ceiling on what a PDF's streams decode to ([`RenderConfig::max_decoded_bytes`]): a page
//! whose content stream inflates past it fails alone, as `too_large`, before any of it is
//! inflated for real, and the page after it is rendered; a page under it renders as before.
#![allow(clippy::unwrap_used)]

use std::ops::ControlFlow;

use horos_pdf::ceiling::{Decoded, TooLarge};
use horos_pdf::render::{FailureReason, PageFailure, RenderConfig, RenderError, render_pages};
use horos_testkit::memory;
use horos_testkit::pdf::{bomb_then_text, flate_zeros, from_object_bytes, stream};

/// The bomb: 512 MiB of zeros in a 3.3 MB stream.
const BOMB: u64 = 512 << 20;

/// A page as the test looks at it: its number, its failure, its text layer's text.
type Seen = (u32, Option<PageFailure>, String);

/// Renders `pdf` under a ceiling of `limit` bytes: its pages, and how far the process's peak
/// resident memory rose above what was resident before (`None` where it cannot be read).
fn render(pdf: Vec<u8>, limit: u64) -> (Vec<Seen>, Option<u64>) {
    let config = RenderConfig {
        dpi: 72.0,
        max_decoded_bytes: limit,
        ..RenderConfig::default()
    };
    let reset = memory::reset_peak_rss();
    let before = memory::rss_bytes();
    let mut pages = Vec::new();
    render_pages(pdf, &config, 1, |p| {
        let text = p.text_layer.map(|t| t.text).unwrap_or_default();
        pages.push((p.page_no, p.failure, text));
        ControlFlow::Continue(())
    })
    .unwrap();
    let growth = match (reset, before, memory::peak_rss_bytes()) {
        (true, Some(before), Some(peak)) => Some(peak.saturating_sub(before)),
        _ => None,
    };
    (pages, growth)
}

#[test]
fn a_page_that_inflates_past_the_ceiling_fails_alone_before_taking_the_memory() {
    let pdf = bomb_then_text(BOMB, &["after the bomb"]);
    assert!(pdf.len() < 4 << 20, "{}", pdf.len());
    let (pages, growth) = render(pdf, 8 << 20);
    assert_eq!(pages.len(), 2);
    let failure = pages[0].1.clone().unwrap();
    assert_eq!(
        failure,
        PageFailure::TooLarge {
            page: 1,
            cause: TooLarge {
                what: Decoded::Stream {
                    object: 6,
                    generation: 0
                },
                limit: 8 << 20,
            },
        }
    );
    assert_eq!(failure.reason(), FailureReason::TooLarge);
    assert_eq!(failure.reason().as_str(), "too_large");
    assert!(failure.to_string().contains("stream 6 0 R"), "{failure}");
    assert_eq!(pages[1].1, None);
    assert!(pages[1].2.contains("after the bomb"), "{:?}", pages[1]);
    // Counted 8 MiB at a time through 64 KiB: the 512 MiB are never held.
    if let Some(growth) = growth {
        eprintln!("with the ceiling the peak grew by {} MiB", growth >> 20);
        assert!(growth < 200 << 20, "peak grew by {} MiB", growth >> 20);
    }
}

#[test]
fn a_page_under_the_ceiling_renders_and_its_streams_add_up_against_it() {
    // 2 MiB of zeros under a 8 MiB ceiling: rendered as before.
    let (pages, _) = render(bomb_then_text(2 << 20, &["below"]), 8 << 20);
    assert_eq!((pages[0].1.clone(), pages[1].1.clone()), (None, None));
    // Two content streams of 5 MiB each: each under the ceiling, together past it.
    let zeros = |n| stream("/Filter /FlateDecode", &flate_zeros(n));
    let pdf = from_object_bytes(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [4 0 R 5 0 R] >>".to_vec(),
        zeros(5 << 20),
        zeros(5 << 20),
    ]);
    let (pages, _) = render(pdf, 8 << 20);
    assert!(
        matches!(
            pages[0].1,
            Some(PageFailure::TooLarge {
                page: 1,
                cause: TooLarge {
                    what: Decoded::Page,
                    ..
                }
            })
        ),
        "{:?}",
        pages[0].1
    );
}

#[test]
fn a_page_counts_the_resources_its_content_names_not_every_one_listed() {
    // Two images in the page's resources: 200 x 200 (160 KB at 4 bytes a pixel) and
    // 10,000 x 10,000 (400 MB), each a 1-byte stream. Only the one the content draws counts.
    let image = |side: u32| {
        let dict = format!(
            "/Type /XObject /Subtype /Image /Width {side} /Height {side} \
             /ColorSpace /DeviceGray /BitsPerComponent 8"
        );
        stream(&dict, b"\x7f")
    };
    let pdf = |drawn: &str| {
        let content = format!("q 100 0 0 100 0 0 cm /{drawn} Do Q");
        from_object_bytes(&[
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
              /Resources << /XObject << /Small 5 0 R /Huge 6 0 R >> >> /Contents 4 0 R >>"
                .to_vec(),
            format!(
                "<< /Length {} >>\nstream\n{content}\nendstream",
                content.len()
            )
            .into_bytes(),
            image(200),
            image(10_000),
        ])
    };
    let (pages, _) = render(pdf("Small"), 64 << 20);
    assert_eq!(pages[0].1, None);
    let (pages, _) = render(pdf("Huge"), 64 << 20);
    assert_eq!(
        pages[0].1.clone().map(|f| match f {
            PageFailure::TooLarge { cause, .. } => cause.what,
            other => panic!("{other:?}"),
        }),
        Some(Decoded::Stream {
            object: 6,
            generation: 0
        })
    );
}

#[test]
fn an_object_stream_past_the_ceiling_fails_the_document_before_it_is_opened() {
    // hayro inflates object streams while it opens a file, before any page: the file fails.
    let objstm = stream(
        "/Type /ObjStm /N 1 /First 2 /Filter /FlateDecode",
        &flate_zeros(64 << 20),
    );
    let pdf = from_object_bytes(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_vec(),
        objstm,
    ]);
    let config = RenderConfig {
        max_decoded_bytes: 8 << 20,
        ..RenderConfig::default()
    };
    let e = render_pages(pdf, &config, 1, |_| ControlFlow::Continue(())).unwrap_err();
    assert_eq!(
        e,
        RenderError::StreamTooLarge(TooLarge {
            what: Decoded::Stream {
                object: 4,
                generation: 0
            },
            limit: 8 << 20
        })
    );
}

/// What the ceiling saves, measured: the same bomb without it. Not run by default (it takes the
/// bomb's 512 MiB and more): `cargo test -p horos-pdf --test ceilings -- --ignored --nocapture`.
#[test]
#[ignore = "takes more than the bomb's 512 MiB; run by hand to measure"]
fn without_the_ceiling_the_same_page_takes_its_inflated_size() {
    let (pages, growth) = render(bomb_then_text(BOMB, &["after the bomb"]), u64::MAX);
    assert_eq!((pages[0].1.clone(), pages[1].1.clone()), (None, None));
    let growth = growth.unwrap();
    eprintln!("without the ceiling the peak grew by {} MiB", growth >> 20);
    assert!(growth > BOMB, "{} MiB", growth >> 20);
}
