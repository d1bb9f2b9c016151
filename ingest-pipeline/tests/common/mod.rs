//! Shared helpers of the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;

/// Directory of the real sample PDFs (scripts/fetch_sample_pdfs.sh), fetched on first use.
/// Returns `None` (the test prints why and skips) when they cannot be had, unless
/// `HOROS_REQUIRE_SAMPLES=1`, where it panics.
pub fn samples() -> Option<PathBuf> {
    let dir = std::env::var("HOROS_SAMPLE_PDFS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()))
                .join(".cache/horos-rs/sample-pdfs")
        });
    if !dir.join(".complete-v3").exists() {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch_sample_pdfs.sh");
        let ok = std::process::Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok || !dir.join(".complete-v3").exists() {
            horos_testkit::skip_or_fail(
                "HOROS_REQUIRE_SAMPLES",
                &format!("sample PDFs unavailable ({} failed)", script.display()),
            );
            return None;
        }
    }
    Some(dir)
}

/// Whether `tesseract` runs; prints a skip message otherwise (panics under HOROS_REQUIRE_OCR=1).
pub fn tesseract_available() -> bool {
    let ok = std::process::Command::new("tesseract")
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        horos_testkit::skip_or_fail(
            "HOROS_REQUIRE_OCR",
            "tesseract is not installed (run scripts/setup_ocr.sh)",
        );
    }
    ok
}

/// A minimal image-only PDF (one page, one uncompressed DeviceGray image filling it): a
/// scanned-like page with no text layer.
pub fn image_only_pdf(gray: &image::GrayImage, width_pt: f32, height_pt: f32) -> Vec<u8> {
    let (w, h) = gray.dimensions();
    let content = format!("q {width_pt} 0 0 {height_pt} 0 0 cm /Im1 Do Q");
    pdf_from_objects(
        &[
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width_pt} {height_pt}] \
                 /Resources << /XObject << /Im1 5 0 R >> >> /Contents 4 0 R >>"
            )
            .into_bytes(),
            pdf_stream("", content.as_bytes()),
            pdf_stream(
                &format!(
                    "/Type /XObject /Subtype /Image /Width {w} /Height {h} \
                     /ColorSpace /DeviceGray /BitsPerComponent 8"
                ),
                gray.as_raw(),
            ),
        ],
        "",
    )
}

/// A stream object: `dict`'s entries plus its `/Length`, then `data`.
pub fn pdf_stream(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut s = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
    s.extend_from_slice(data);
    s.extend_from_slice(b"\nendstream");
    s
}

/// A PDF file of these objects, numbered from 1 (the first is the catalog), with its
/// cross-reference table; `trailer` is added to the trailer dictionary.
pub fn pdf_from_objects(bodies: &[Vec<u8>], trailer: &str) -> Vec<u8> {
    let mut out: Vec<u8> = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).as_bytes(),
    );
    for o in &offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R {trailer} >>\nstartxref\n{xref}\n%%EOF\n",
            offsets.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// A minimal PDF with one blank page per media box (width, height in points); `extra` objects
/// are numbered after the pages (the first is `3 + pages`), `trailer` is added to the trailer
/// dictionary (an `/Encrypt` reference, say).
pub fn blank_pdf(media: &[(f32, f32)], extra: &[&str], trailer: &str) -> Vec<u8> {
    let kids: Vec<String> = (0..media.len()).map(|i| format!("{} 0 R", 3 + i)).collect();
    let mut bodies = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {} >>",
            kids.join(" "),
            media.len()
        )
        .into_bytes(),
    ];
    for (w, h) in media {
        bodies
            .push(format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w} {h}] >>").into_bytes());
    }
    bodies.extend(extra.iter().map(|body| body.as_bytes().to_vec()));
    pdf_from_objects(&bodies, trailer)
}

/// `n` blank A6 pages.
pub fn pages_pdf(n: usize) -> Vec<u8> {
    blank_pdf(&vec![(298.0, 420.0); n], &[], "")
}

/// A page of [`mixed_pdf`].
pub enum TestPage {
    /// Born-digital: these lines in Helvetica 12 pt, 16 pt apart, from the top left.
    Text(Vec<String>),
    /// Scanned at 150 dpi: this image filling the page (its size: the image's at 150 dpi), no
    /// text layer.
    Image(image::GrayImage),
}

/// A PDF of US Letter pages (612 × 792 pt), each born-digital or image-only.
pub fn mixed_pdf(pages: &[TestPage]) -> Vec<u8> {
    let (w_pt, h_pt) = (612.0f32, 792.0f32);
    let mut bodies: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        Vec::new(), // the page tree, once the pages' numbers are known
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
    ];
    let mut kids = Vec::new();
    for page in pages {
        let page_no = bodies.len() + 1;
        kids.push(format!("{page_no} 0 R"));
        let (content, resources, image) = match page {
            TestPage::Text(lines) => {
                let mut c = String::from("BT /F1 12 Tf 16 TL 72 720 Td\n");
                for l in lines {
                    let escaped = l
                        .replace('\\', "\\\\")
                        .replace('(', "\\(")
                        .replace(')', "\\)");
                    c.push_str(&format!("({escaped}) Tj T*\n"));
                }
                c.push_str("ET");
                (c, "<< /Font << /F1 3 0 R >> >>".to_string(), None)
            }
            TestPage::Image(gray) => (
                format!(
                    "q {} 0 0 {} 0 0 cm /Im1 Do Q",
                    image_pt(gray).0,
                    image_pt(gray).1
                ),
                format!("<< /XObject << /Im1 {} 0 R >> >>", page_no + 2),
                Some(gray),
            ),
        };
        let (w_pt, h_pt) = match page {
            TestPage::Text(_) => (w_pt, h_pt),
            TestPage::Image(gray) => image_pt(gray),
        };
        bodies.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w_pt} {h_pt}] \
                 /Resources {resources} /Contents {} 0 R >>",
                page_no + 1
            )
            .into_bytes(),
        );
        bodies.push(pdf_stream("", content.as_bytes()));
        if let Some(gray) = image {
            let (w, h) = gray.dimensions();
            bodies.push(pdf_stream(
                &format!(
                    "/Type /XObject /Subtype /Image /Width {w} /Height {h} \
                     /ColorSpace /DeviceGray /BitsPerComponent 8"
                ),
                gray.as_raw(),
            ));
        }
    }
    bodies[1] = format!(
        "<< /Type /Pages /Kids [{}] /Count {} >>",
        kids.join(" "),
        kids.len()
    )
    .into_bytes();
    pdf_from_objects(&bodies, "")
}

/// The size in points of an image scanned at 150 dpi.
fn image_pt(gray: &image::GrayImage) -> (f32, f32) {
    let (w, h) = gray.dimensions();
    (w as f32 * 72.0 / 150.0, h as f32 * 72.0 / 150.0)
}

/// A born-digital page of `lines` rasterised at `dpi` into a grey image: what a scanner
/// would give for it.
pub fn rasterised(lines: &[String], dpi: f32) -> image::GrayImage {
    let pdf = mixed_pdf(&[TestPage::Text(lines.to_vec())]);
    let cfg = ingest_pipeline::render::RenderConfig {
        dpi,
        ..Default::default()
    };
    let mut out = None;
    ingest_pipeline::render::render_pages(pdf, &cfg, 1, |p| {
        out = Some(image::DynamicImage::ImageRgb8(p.image).into_luma8());
        std::ops::ControlFlow::Break(())
    })
    .unwrap();
    out.unwrap()
}

/// `n` lines of plain English prose, different on each page (`seed`).
pub fn prose(seed: usize, n: usize) -> Vec<String> {
    const WORDS: [&str; 24] = [
        "the", "pipeline", "reads", "every", "page", "of", "a", "document", "and", "stores", "its",
        "text", "with", "tables", "figures", "search", "index", "quickly", "when", "born",
        "digital", "files", "carry", "layers",
    ];
    (0..n)
        .map(|i| {
            (0..9)
                .map(|j| WORDS[(seed * 7 + i * 5 + j * 3) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Ingests `file` with `reader` and the offline embedders, waits for its end and stops the
/// workers: the pipeline and the document as it ended.
pub async fn ingest_with<R: ingest_pipeline::vision::VisionReader>(
    cfg: ingest_pipeline::pipeline::PipelineConfig,
    reader: R,
    file: &std::path::Path,
) -> (
    ingest_pipeline::pipeline::Pipeline<
        R,
        ingest_pipeline::embed::HashingEmbedder,
        ingest_pipeline::embed::PixelPatchFallback,
    >,
    ingest_pipeline::store::Document,
) {
    let pipeline = ingest_pipeline::pipeline::Pipeline::open(
        cfg,
        reader,
        ingest_pipeline::embed::HashingEmbedder::default(),
        ingest_pipeline::embed::PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let id = pipeline.submit(file).await.unwrap().document().id;
    let doc = pipeline
        .wait_for(id, std::time::Duration::from_secs(600))
        .await
        .unwrap();
    running.shutdown().await;
    (pipeline, doc)
}

/// Submits `file` to a started `pipeline` and waits (5 minutes at most) for its document's end.
pub async fn submit_and_wait<R, T, V>(
    pipeline: &ingest_pipeline::pipeline::Pipeline<R, T, V>,
    file: impl AsRef<std::path::Path>,
) -> ingest_pipeline::store::Document
where
    R: ingest_pipeline::vision::VisionReader,
    T: ingest_pipeline::embed::TextEmbedder,
    V: ingest_pipeline::embed::VisualEmbedder,
{
    let id = pipeline.submit(file).await.unwrap().document().id;
    pipeline
        .wait_for(id, std::time::Duration::from_secs(300))
        .await
        .unwrap()
}

/// A reader that answers `text` for every page and tile (as Tesseract would name it), after
/// `delay`, counting its calls.
#[derive(Clone)]
pub struct CountingReader {
    pub calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub text: &'static str,
    pub delay: std::time::Duration,
}

impl ingest_pipeline::vision::VisionReader for CountingReader {
    fn name(&self) -> &str {
        "counting"
    }

    fn read_by(&self) -> ingest_pipeline::vision::ReadBy {
        ingest_pipeline::vision::ReadBy::Tesseract
    }

    async fn read(
        &self,
        _png: std::sync::Arc<Vec<u8>>,
    ) -> Result<ingest_pipeline::vision::Reading, ingest_pipeline::vision::VisionError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Ok(ingest_pipeline::vision::Reading {
            text: self.text.into(),
            ..Default::default()
        })
    }
}
