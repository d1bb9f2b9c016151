//! The documents the soak ingests, each made unique by a nonce (the system knows a document by
//! its SHA-256): text pages, a scan to read, and hostile files: malformed, encrypted, a
//! decompression bomb.

use horos_testkit::pdf;

/// What a document is, and what it must come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A born-digital text page: must be ingested.
    Good,
    /// A page without a text layer, read by the vision model: must be ingested.
    Scan,
    /// Bytes that are no PDF past their header: must fail, alone.
    Malformed,
    /// An encrypted PDF: may fail or be read; must end, alone.
    Encrypted,
    /// A page whose content stream inflates to 2 GiB, then a text page: the bomb's page must
    /// fail (or the document), the process must not grow.
    Bomb,
}

impl Class {
    /// Every class, in the order of a batch.
    pub const ALL: [Class; 5] = [
        Class::Good,
        Class::Scan,
        Class::Malformed,
        Class::Encrypted,
        Class::Bomb,
    ];

    /// Its name in the ledger and the report.
    pub fn name(self) -> &'static str {
        match self {
            Class::Good => "good",
            Class::Scan => "scan",
            Class::Malformed => "malformed",
            Class::Encrypted => "encrypted",
            Class::Bomb => "bomb",
        }
    }

    /// Whether a document of this class must end ingested (`done`).
    pub fn must_finish(self) -> bool {
        matches!(self, Class::Good | Class::Scan)
    }

    /// The class named `name`.
    pub fn from_name(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The bytes of a document of `class` carrying `nonce`.
pub fn document(class: Class, nonce: &str) -> Vec<u8> {
    match class {
        Class::Good => pdf::text(&["soak walrus lighthouse", nonce, "the end"], 14),
        Class::Scan => {
            // A grey rectangle and no text: the reader is asked to read it.
            let page = pdf::page(&format!("0.5 g 72 72 200 {} re f", 100 + nonce.len()));
            let mut bytes = page;
            bytes.extend_from_slice(format!("% {nonce}\n").as_bytes());
            bytes
        }
        Class::Malformed => {
            let mut bytes = b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R".to_vec();
            bytes.extend_from_slice(format!("\n% {nonce} truncated here").as_bytes());
            bytes
        }
        Class::Encrypted => encrypted(nonce),
        Class::Bomb => pdf::bomb_then_text(2 << 30, &["soak bomb survivor", nonce]),
    }
}

/// A text page whose trailer names a standard security handler (RC4, 40 bits) whose keys are
/// not the ones that encrypted anything: a reader must find it encrypted and cope.
fn encrypted(nonce: &str) -> Vec<u8> {
    let plain = pdf::text(&["secret", nonce], 12);
    let text = String::from_utf8_lossy(&plain).into_owned();
    let junk = "<".to_owned() + &"ab".repeat(32) + ">";
    let encrypt = format!("<< /Filter /Standard /V 1 /R 2 /O {junk} /U {junk} /P -44 >>");
    // Appended as an incremental update: object 6, and a trailer that names it.
    let xref_at = plain.len() + encrypt.len() + 20;
    let obj_at = plain.len();
    let update = format!(
        "6 0 obj\n{encrypt}\nendobj\nxref\n6 1\n{obj_at:010} 00000 n \ntrailer\n\
         << /Size 7 /Root 1 0 R /Encrypt 6 0 R /ID [<{id}> <{id}>] /Prev {prev} >>\nstartxref\n{xref_at}\n%%EOF\n",
        id = "00".repeat(16),
        prev = text
            .rfind("startxref\n")
            .and_then(|i| text[i + 10..].lines().next()?.trim().parse::<usize>().ok())
            .unwrap_or(0),
    );
    // The xref offset written above is the update's `xref` keyword.
    let xref_real = obj_at + update.find("xref\n").unwrap_or(0);
    let update = update.replace(
        &format!("startxref\n{xref_at}\n"),
        &format!("startxref\n{xref_real}\n"),
    );
    let mut bytes = plain;
    bytes.extend_from_slice(update.as_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_document_is_unique_by_its_nonce() {
        for class in Class::ALL {
            assert_ne!(document(class, "n-1"), document(class, "n-2"), "{class:?}");
            assert!(document(class, "n-1").starts_with(b"%PDF-"));
        }
        let e = String::from_utf8_lossy(&document(Class::Encrypted, "x")).into_owned();
        let at: usize = e
            .rsplit("startxref\n")
            .next()
            .and_then(|s| s.lines().next()?.parse().ok())
            .unwrap_or(0);
        assert!(e[at..].starts_with("xref\n6 1\n"), "{}", &e[at..]);
    }
}
