//! Rendering real PDFs from Debian packages, and the malformed inputs derived from them.
#![allow(clippy::unwrap_used)]

use std::ops::ControlFlow;

use ingest_pipeline::render::{RenderConfig, RenderError, page_count, render_pages};

#[test]
fn renders_real_manual_page_by_page() {
    let Some(dir) = crate::common::samples() else {
        return;
    };
    let data = std::fs::read(dir.join("manual.pdf")).unwrap();
    let config = RenderConfig {
        dpi: 100.0,
        ..RenderConfig::default()
    };
    let mut seen = Vec::new();
    let n = render_pages(data, &config, 1, |p| {
        // A4 at 100 dpi.
        assert_eq!((p.image.width(), p.image.height()), (827, 1170));
        let dark = p.image.pixels().filter(|px| px.0[0] < 128).count();
        seen.push((p.page_no, dark));
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(n, 26);
    assert_eq!(seen.len(), 26);
    assert_eq!(seen[0].0, 1);
    // Every page of the manual has ink (text), rendered rather than blank.
    assert!(seen.iter().all(|(_, dark)| *dark > 500), "{seen:?}");
}

#[test]
fn resumes_from_a_page_and_stops_early() {
    let Some(dir) = crate::common::samples() else {
        return;
    };
    let data = std::fs::read(dir.join("manual.pdf")).unwrap();
    let config = RenderConfig {
        dpi: 50.0,
        ..RenderConfig::default()
    };
    let mut pages = Vec::new();
    render_pages(data, &config, 24, |p| {
        pages.push(p.page_no);
        if p.page_no == 25 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(pages, vec![24, 25]);
}

#[test]
fn malformed_inputs_are_typed_errors() {
    let Some(dir) = crate::common::samples() else {
        return;
    };
    let c = RenderConfig::default();
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    assert_eq!(page_count(read("empty.pdf"), &c), Err(RenderError::Empty));
    assert_eq!(
        page_count(read("not-a-pdf.pdf"), &c),
        Err(RenderError::NotPdf)
    );
    assert_eq!(
        page_count(read("truncated.pdf"), &c),
        Err(RenderError::Truncated)
    );
    assert!(
        matches!(
            page_count(read("encrypted.pdf"), &c),
            Err(RenderError::Encrypted(_))
        ),
        "{:?}",
        page_count(read("encrypted.pdf"), &c)
    );
    let huge = page_count(read("huge-page.pdf"), &c);
    assert!(
        matches!(
            huge,
            Err(RenderError::PageTooLarge {
                page: 1,
                width_px: 41667,
                height_px: 41667,
                ..
            })
        ),
        "{huge:?}"
    );
    // The same document renders when its pages are of normal size.
    assert_eq!(page_count(read("manual.pdf"), &c), Ok(26));
    assert_eq!(page_count(read("amc-sample.pdf"), &c), Ok(30));
}

#[test]
fn image_only_page_renders() {
    let Some(dir) = crate::common::samples() else {
        return;
    };
    let data = std::fs::read(dir.join("manual.pdf")).unwrap();
    let config = RenderConfig {
        dpi: 100.0,
        ..RenderConfig::default()
    };
    let mut first = None;
    render_pages(data, &config, 1, |p| {
        first = Some(p.image);
        ControlFlow::Break(())
    })
    .unwrap();
    let gray = image::DynamicImage::ImageRgb8(first.unwrap()).to_luma8();
    let pdf = crate::common::image_only_pdf(&gray, 595.0, 842.0);
    let mut out = None;
    render_pages(pdf, &config, 1, |p| {
        out = Some(p.image);
        ControlFlow::Continue(())
    })
    .unwrap();
    let out = image::DynamicImage::ImageRgb8(out.unwrap()).to_luma8();
    let dark_in = gray.pixels().filter(|p| p.0[0] < 128).count() as f64;
    let dark_out = out.pixels().filter(|p| p.0[0] < 128).count() as f64;
    assert!(
        (dark_out / dark_in - 1.0).abs() < 0.1,
        "{dark_in} vs {dark_out}"
    );
}

/// The manual is born-digital (pdfTeX, Type 1 fonts): every page but the nearly empty ones keeps
/// its text layer, which holds the words the page shows, in reading order.
#[test]
fn the_real_manuals_text_layer_is_its_text() {
    let Some(dir) = crate::common::samples() else {
        return;
    };
    let data = std::fs::read(dir.join("manual.pdf")).unwrap();
    let mut layers = Vec::new();
    render_pages(data, &RenderConfig::default(), 1, |p| {
        layers.push(p.text_layer.unwrap());
        ControlFlow::Continue(())
    })
    .unwrap();
    let usable = layers.iter().filter(|l| l.is_usable()).count();
    let summary: Vec<(usize, usize, usize)> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, l.legible, l.illegible))
        .collect();
    assert!(usable >= 24, "{summary:?}");
    // Page 5 holds the attribute table.
    let page5 = &layers[4].text;
    for w in ["bigarray", "null_terminated", "pointer_default"] {
        assert!(page5.contains(w), "{w} not in\n{page5}");
    }
    // Ligatures are letters again: full-text search finds "defined" in "well-deﬁned".
    assert!(
        layers[0].text.contains("well-defined C interface"),
        "{}",
        layers[0].text
    );
    // Word boxes lie on the A4 page at 150 dpi (1240 x 1754 px).
    assert!(
        layers
            .iter()
            .flat_map(|l| &l.words)
            .all(|w| w.x + w.w <= 1245 && w.y + w.h <= 1760),
        "a word off the page"
    );
}

/// A page kept by its text layer is not rasterized when nothing reads its pixels; a scan is.
#[test]
fn text_pages_are_not_rasterized_unless_asked() {
    use crate::common::{TestPage, mixed_pdf, prose, rasterised};
    let pdf = mixed_pdf(&[
        TestPage::Text(prose(1, 30)),
        TestPage::Image(rasterised(&prose(2, 10), 150.0)),
    ]);
    for raster_text_pages in [true, false] {
        let config = RenderConfig {
            raster_text_pages,
            ..RenderConfig::default()
        };
        let mut seen = Vec::new();
        render_pages(pdf.clone(), &config, 1, |p| {
            let usable = p.text_layer.as_ref().is_some_and(|t| t.is_usable());
            seen.push((usable, p.image.dimensions(), p.size));
            ControlFlow::Continue(())
        })
        .unwrap();
        // US Letter at 150 dpi (792 pt rounds up to 1651 px).
        let letter = (1275, 1651);
        let text_image = if raster_text_pages { letter } else { (0, 0) };
        assert_eq!(seen[0], (true, text_image, letter), "{raster_text_pages}");
        assert!(!seen[1].0, "the scan has no text layer");
        assert_eq!(seen[1].1, seen[1].2, "the scan is rasterized");
    }
}
