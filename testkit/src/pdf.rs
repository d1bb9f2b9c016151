//! Small PDFs written by hand for the tests that need one: [`from_objects`] (any objects, the
//! cross-reference table at the right offsets; [`from_object_bytes`] for binary ones),
//! [`blank`] (a page without a text layer: a scan to OCR), [`text`] (a born-digital page whose
//! text layer needs no OCR) and [`bomb_then_text`] (a decompression bomb's page, then a text
//! page), whose bomb is [`flate_zeros`] in a [`stream`].

/// A PDF of `objects`, numbered from 1 in order; object 1 is the catalog (`/Root`).
pub fn from_objects(objects: &[String]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> = objects.iter().map(|o| o.as_bytes().to_vec()).collect();
    from_object_bytes(&bytes)
}

/// [`from_objects`] of objects that may hold binary data (a compressed stream's).
pub fn from_object_bytes(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        pdf.extend_from_slice(body);
        pdf.extend_from_slice(b"\nendobj\n");
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

/// A zlib stream (`/FlateDecode`) of `n` zero bytes, written by hand in fixed-Huffman blocks of
/// 258-byte copies: 13 bits per 258 bytes (about 1/159 of `n`), made in milliseconds whatever
/// `n` is, where a compressor would read all of `n`.
pub fn flate_zeros(n: u64) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut bits = Bits::default();
    // BFINAL = 1, BTYPE = 01 (fixed Huffman).
    bits.put(0b1, 1);
    bits.put(0b01, 2);
    let literal_zero = |bits: &mut Bits| bits.put_code(0b0011_0000, 8);
    if n > 0 {
        literal_zero(&mut bits);
    }
    let copies = n.saturating_sub(1) / 258;
    for _ in 0..copies {
        // Length 258: symbol 285 (11000101); distance 1: code 0 (00000), no extra bits.
        bits.put_code(0b1100_0101, 8);
        bits.put_code(0, 5);
    }
    for _ in 0..n.saturating_sub(1) % 258 {
        literal_zero(&mut bits);
    }
    // End of block: symbol 256 (0000000).
    bits.put_code(0, 7);
    out.append(&mut bits.finish());
    // Adler-32 of n zeros: a = 1, b = n (mod 65521).
    let adler = (((n % 65_521) as u32) << 16) | 1;
    out.extend_from_slice(&adler.to_be_bytes());
    out
}

/// A deflate bit writer: values least significant bit first, Huffman codes most first.
#[derive(Default)]
struct Bits {
    acc: u64,
    len: u32,
    bytes: Vec<u8>,
}

impl Bits {
    fn put(&mut self, value: u32, n: u32) {
        self.acc |= u64::from(value) << self.len;
        self.len += n;
        while self.len >= 8 {
            self.bytes.push(self.acc as u8);
            self.acc >>= 8;
            self.len -= 8;
        }
    }

    fn put_code(&mut self, code: u32, n: u32) {
        let reversed = code.reverse_bits() >> (32 - n);
        self.put(reversed, n);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.len > 0 {
            self.bytes.push(self.acc as u8);
        }
        self.bytes
    }
}

/// A two-page PDF (US Letter): page 1 is drawn by a content stream of `zeros` zero bytes (blank
/// space to a PDF reader) stored as [`flate_zeros`], a decompression bomb for a large `zeros`;
/// page 2 is `lines` of text as [`text`] writes them.
pub fn bomb_then_text(zeros: u64, lines: &[&str]) -> Vec<u8> {
    let mut content = String::from("BT /F1 12 Tf 16 TL 72 720 Td\n");
    for l in lines {
        content.push_str(&format!("({l}) Tj T*\n"));
    }
    content.push_str("ET");
    let bomb = flate_zeros(zeros);
    let mut bomb_stream = format!(
        "<< /Length {} /Filter /FlateDecode >>\nstream\n",
        bomb.len()
    )
    .into_bytes();
    bomb_stream.extend_from_slice(&bomb);
    bomb_stream.extend_from_slice(b"\nendstream");
    let page = |contents: u32| {
        format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
             /Resources << /Font << /F1 3 0 R >> >> /Contents {contents} 0 R >>"
        )
        .into_bytes()
    };
    from_object_bytes(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [4 0 R 5 0 R] /Count 2 >>".to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
        page(6),
        page(7),
        stream("/Filter /FlateDecode", &flate_zeros(zeros)),
        stream("", content.as_bytes()),
    ])
}

/// A stream object's body: `dict`'s entries and its `/Length`, then `data`.
pub fn stream(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut s = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
    s.extend_from_slice(data);
    s.extend_from_slice(b"\nendstream");
    s
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
