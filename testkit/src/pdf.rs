//! Small PDFs written by hand for the tests that need one: [`from_objects`] (any objects, the
//! cross-reference table at the right offsets), [`blank`] (a page without a text layer: a scan
//! to OCR) and [`text`] (a born-digital page whose text layer needs no OCR).

/// A PDF of `objects`, numbered from 1 in order; object 1 is the catalog (`/Root`).
pub fn from_objects(objects: &[String]) -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    let n = objects.len() + 1;
    let mut tail = format!("xref\n0 {n}\n0000000000 65535 f \n");
    for off in offsets {
        tail += &format!("{off:010} 00000 n \n");
    }
    tail += &format!("trailer\n<< /Size {n} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n");
    pdf.extend_from_slice(tail.as_bytes());
    pdf
}

/// A one-page blank PDF (A6): no text layer.
pub fn blank() -> Vec<u8> {
    from_objects(&[
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 298 420] >>".to_owned(),
    ])
}

/// A one-page PDF (US Letter) of `lines` in Helvetica `size` pt from the top left: its text
/// layer is the lines (no parenthesis or backslash in them).
pub fn text(lines: &[&str], size: u32) -> Vec<u8> {
    let mut content = format!("BT /F1 {size} Tf {} TL 72 720 Td\n", size * 4 / 3);
    for l in lines {
        content.push_str(&format!("({l}) Tj T*\n"));
    }
    content.push_str("ET");
    page(&content)
}

/// A one-page PDF (US Letter, 612 × 792 points) drawn by the content stream `content`, with
/// Helvetica as font `/F1` (e.g. `"1 0 0 rg 0 0 612 792 re f"` fills the page in red).
pub fn page(content: &str) -> Vec<u8> {
    from_objects(&[
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
         /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"
            .to_owned(),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_owned(),
        format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cross_reference_table_points_at_each_object() {
        let pdf = String::from_utf8(text(&["Hello"], 12)).unwrap_or_default();
        let xref = pdf.find("xref\n").unwrap_or_default();
        for (i, line) in pdf[xref..].lines().skip(3).take(5).enumerate() {
            let off: usize = line[..10].parse().unwrap_or_default();
            assert!(
                pdf[off..].starts_with(&format!("{} 0 obj", i + 1)),
                "{line}"
            );
        }
        assert!(pdf.ends_with(&format!("startxref\n{xref}\n%%EOF\n")));
        assert!(blank().starts_with(b"%PDF-1.4\n"));
    }
}
