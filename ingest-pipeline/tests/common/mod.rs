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
            let msg = format!("sample PDFs unavailable ({} failed)", script.display());
            if std::env::var("HOROS_REQUIRE_SAMPLES").as_deref() == Ok("1") {
                panic!("{msg} and HOROS_REQUIRE_SAMPLES=1");
            }
            eprintln!("SKIP: {msg}");
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
        if std::env::var("HOROS_REQUIRE_OCR").as_deref() == Ok("1") {
            panic!("tesseract missing and HOROS_REQUIRE_OCR=1 (run scripts/setup_ocr.sh)");
        }
        eprintln!("SKIP: tesseract not installed (run scripts/setup_ocr.sh)");
    }
    ok
}

/// A minimal image-only PDF (one page, one uncompressed DeviceGray image filling it): a
/// scanned-like page with no text layer.
pub fn image_only_pdf(gray: &image::GrayImage, width_pt: f32, height_pt: f32) -> Vec<u8> {
    let (w, h) = gray.dimensions();
    let content = format!("q {width_pt} 0 0 {height_pt} 0 0 cm /Im1 Do Q");
    let mut out: Vec<u8> = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    let mut obj = |out: &mut Vec<u8>, body: Vec<u8>| {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", offsets.len()).as_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(b"\nendobj\n");
    };
    obj(&mut out, b"<< /Type /Catalog /Pages 2 0 R >>".to_vec());
    obj(
        &mut out,
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
    );
    obj(
        &mut out,
        format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width_pt} {height_pt}] \
             /Resources << /XObject << /Im1 5 0 R >> >> /Contents 4 0 R >>"
        )
        .into_bytes(),
    );
    let mut c = format!("<< /Length {} >>\nstream\n", content.len()).into_bytes();
    c.extend_from_slice(content.as_bytes());
    c.extend_from_slice(b"\nendstream");
    obj(&mut out, c);
    let raw = gray.as_raw();
    let mut im = format!(
        "<< /Type /XObject /Subtype /Image /Width {w} /Height {h} /ColorSpace /DeviceGray \
         /BitsPerComponent 8 /Length {} >>\nstream\n",
        raw.len()
    )
    .into_bytes();
    im.extend_from_slice(raw);
    im.extend_from_slice(b"\nendstream");
    obj(&mut out, im);
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).as_bytes(),
    );
    for o in &offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
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
    let mut out: Vec<u8> = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    let mut obj = |out: &mut Vec<u8>, body: &str| {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", offsets.len()).as_bytes());
    };
    obj(&mut out, "<< /Type /Catalog /Pages 2 0 R >>");
    let kids: Vec<String> = (0..media.len()).map(|i| format!("{} 0 R", 3 + i)).collect();
    obj(
        &mut out,
        &format!(
            "<< /Type /Pages /Kids [{}] /Count {} >>",
            kids.join(" "),
            media.len()
        ),
    );
    for (w, h) in media {
        obj(
            &mut out,
            &format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w} {h}] >>"),
        );
    }
    for body in extra {
        obj(&mut out, body);
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

/// `n` blank A6 pages.
pub fn pages_pdf(n: usize) -> Vec<u8> {
    blank_pdf(&vec![(298.0, 420.0); n], &[], "")
}
