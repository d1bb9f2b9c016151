//! A document exported whole: its stored pages with their text, tables and figures, what read
//! each and how far it was turned, rendered as Markdown ([`DocumentMarkdown`]) or as JSON Lines
//! (one [`PageLine`] per page). Every export of the binary (`docs export`, `docs export --all`,
//! `convert`) renders through [`DocumentExport::render`].

use serde::{Deserialize, Serialize};
use squeueha::params;

use horos_pdf::layout::PageLayout;
use horos_pdf::structure::{self, Block};

use super::markdown::{DocumentMarkdown, PageMarkdown, page_markdown};
use super::{Db, Document, Result, document, page_tables};
use crate::vision::ReadBy;

/// How a document is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// One Markdown file: a title heading, then each page after its `<!-- page N -->` mark
    /// ([`DocumentMarkdown::to_markdown`]).
    #[default]
    Markdown,
    /// JSON Lines: one [`PageLine`] per page, in page order.
    Jsonl,
}

impl ExportFormat {
    /// The file extension of its files: `md` or `jsonl`.
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Markdown => "md",
            ExportFormat::Jsonl => "jsonl",
        }
    }

    /// Its name: `markdown` or `jsonl`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Markdown => "markdown",
            ExportFormat::Jsonl => "jsonl",
        }
    }
}

/// One stored page, as it was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedPage {
    /// Page number, from 1.
    pub page_no: u32,
    /// Its text, in the reading order its reader gave.
    pub text: String,
    /// The tables its reader found (`{"caption", "header", "rows"}` from a vision model).
    pub tables: Vec<serde_json::Value>,
    /// Its figures' descriptions.
    pub figures: Vec<String>,
    /// What read it (`None` for pages stored before schema version 4).
    pub read_by: Option<ReadBy>,
    /// The reader's name (`text_layer`, `tesseract`, the vision model's name).
    pub reader: Option<String>,
    /// Degrees the image was turned clockwise before it was read.
    pub rotation: u16,
    /// The page's structure, when its text layer was laid out (headings, paragraphs, list
    /// items, code, tables as rows, footnotes: [`horos_pdf::structure`], read over the whole
    /// document); empty for a page read by OCR or a model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Block>,
    /// Its running header, footer and page number, taken out of `blocks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub furniture: Vec<String>,
    /// Whether `blocks` is the page's structure (its text layer was laid out), even when empty
    /// (its text all joined to the page before: the end of a paragraph, a table's last rows).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub structured: bool,
}

/// A document and its stored pages, in order (a page not stored yet is absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentExport {
    /// The document (its title, source path, SHA-256, page count, status).
    pub document: Document,
    /// Its stored pages, in order.
    pub pages: Vec<ExportedPage>,
}

/// One line of a document's JSON Lines export: a page, with the document it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageLine {
    /// The file the document was submitted from (shown lossily when not UTF-8).
    pub source: String,
    /// SHA-256 of the file's bytes, hex.
    pub sha256: String,
    /// The document's title.
    pub title: String,
    /// The document's page count.
    pub pages: Option<u32>,
    /// The page: its number, text, tables, figures, reader and rotation.
    #[serde(flatten)]
    pub page: ExportedPage,
}

impl DocumentExport {
    /// As Markdown, whole and per page.
    pub fn markdown(&self) -> DocumentMarkdown {
        DocumentMarkdown {
            doc_id: self.document.id,
            title: self.document.title.clone(),
            pages: self
                .pages
                .iter()
                .map(|p| {
                    let (markdown, footnotes) = if !p.structured {
                        (page_markdown(&p.text, &p.tables, &p.figures), String::new())
                    } else {
                        let (notes, body): (Vec<Block>, Vec<Block>) = p
                            .blocks
                            .iter()
                            .cloned()
                            .partition(|b| matches!(b, Block::Footnote { .. }));
                        (
                            structure::markdown::page(&body),
                            structure::markdown::page(&notes),
                        )
                    };
                    PageMarkdown {
                        page_no: p.page_no,
                        read_by: p.read_by,
                        markdown,
                        footnotes,
                    }
                })
                .collect(),
        }
    }

    /// One line per page.
    pub fn lines(&self) -> Vec<PageLine> {
        let d = &self.document;
        self.pages
            .iter()
            .map(|p| PageLine {
                source: d.path.clone(),
                sha256: d.sha256.clone(),
                title: d.title.clone(),
                pages: d.pages,
                page: p.clone(),
            })
            .collect()
    }

    /// The file's contents in `format`: the Markdown, or the JSON lines, each ended by `\n`.
    pub fn render(&self, format: ExportFormat) -> Result<String> {
        Ok(match format {
            ExportFormat::Markdown => self.markdown().to_markdown(),
            ExportFormat::Jsonl => {
                let mut out = String::new();
                for line in self.lines() {
                    out.push_str(&serde_json::to_string(&line)?);
                    out.push('\n');
                }
                out
            }
        })
    }
}

/// Pages whose layouts are structured together (read at once: a page's layout is tens of
/// kilobytes); a longer document is structured in windows of this many pages.
pub const STRUCTURE_WINDOW: usize = 256;

/// Document `doc_id` with its stored pages; `None` when there is no such document.
pub fn document_export(db: &mut dyn Db, doc_id: i64) -> Result<Option<DocumentExport>> {
    let Some(doc) = document(db, doc_id)? else {
        return Ok(None);
    };
    let rows = db
        .query(
            "SELECT page_no, text, figures, read_by, reader, rotation FROM ip_pages
             WHERE doc_id = ?1 AND stored = 1 ORDER BY page_no",
            params![doc_id],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.get::<u32>(0)?,
                r.get::<Option<String>>(1)?,
                r.get::<Option<String>>(2)?,
                r.get::<Option<String>>(3)?,
                r.get::<Option<String>>(4)?,
                r.get::<u16>(5)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut pages = Vec::with_capacity(rows.len());
    for (page_no, text, figures, read_by, reader, rotation) in rows {
        pages.push(ExportedPage {
            page_no,
            text: text.unwrap_or_default(),
            tables: page_tables(db, doc_id, page_no)?,
            figures: match figures {
                Some(f) => serde_json::from_str(&f)?,
                None => Vec::new(),
            },
            read_by: read_by.as_deref().and_then(ReadBy::parse),
            reader,
            rotation,
            blocks: Vec::new(),
            furniture: Vec::new(),
            structured: false,
        });
    }
    for window in pages.chunks_mut(STRUCTURE_WINDOW) {
        structure_pages(db, doc_id, window)?;
    }
    Ok(Some(DocumentExport {
        document: doc,
        pages,
    }))
}

/// Fills in the structure of `pages` (consecutive pages of document `doc_id`) from the layouts
/// kept in their stored readings, read over them all (body size, heading levels, running
/// headers, the vocabulary for de-hyphenation); a page without a layout (read by OCR or a
/// model) takes no part.
fn structure_pages(db: &mut dyn Db, doc_id: i64, pages: &mut [ExportedPage]) -> Result<()> {
    let laid_out: Vec<u32> = pages
        .iter()
        .filter(|p| p.read_by == Some(ReadBy::TextLayer))
        .map(|p| p.page_no)
        .collect();
    let (Some(&first), Some(&last)) = (laid_out.first(), laid_out.last()) else {
        return Ok(());
    };
    let mut layouts: std::collections::HashMap<u32, PageLayout> = Default::default();
    for r in db.query(
        "SELECT page_no, reading FROM ip_pages
         WHERE doc_id = ?1 AND page_no BETWEEN ?2 AND ?3 AND read_by = 'text_layer'",
        params![doc_id, first, last],
    )? {
        let (page_no, reading) = (r.get::<u32>(0)?, r.get::<Option<String>>(1)?);
        if let Some(layout) = reading.as_deref().and_then(page_layout) {
            layouts.insert(page_no, layout);
        }
    }
    if layouts.is_empty() {
        return Ok(());
    }
    let empty = PageLayout::default();
    let refs: Vec<&PageLayout> = pages
        .iter()
        .map(|p| layouts.get(&p.page_no).unwrap_or(&empty))
        .collect();
    for (page, st) in pages.iter_mut().zip(structure::document(&refs)) {
        if layouts.contains_key(&page.page_no) {
            page.blocks = st.blocks;
            page.furniture = st.furniture;
            page.structured = true;
        }
    }
    Ok(())
}

/// The layout kept in a page's stored reading (its other fields are skipped unread); `None` for
/// a reading without one, or one that does not parse.
fn page_layout(reading: &str) -> Option<PageLayout> {
    #[derive(Deserialize)]
    struct LayoutOnly {
        #[serde(default)]
        layout: Option<PageLayout>,
    }
    serde_json::from_str::<LayoutOnly>(reading).ok()?.layout
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::{PageImage, insert_document, insert_page, migrate, store_page_text};
    use crate::vision::Reading;

    /// A store holding one two-page document: page 1 from the text layer with a table, page 2
    /// read by Tesseract, turned 90 degrees.
    fn store() -> (tempfile::TempDir, rusqlite::Connection, i64) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let (doc, _) = insert_document(&mut conn, "ab12", "Manual", "/in/manual.pdf").unwrap();
        crate::store::set_page_count(&mut conn, doc.id, 2).unwrap();
        for (page_no, text, read_by, rotation, tables) in [
            (
                1,
                "# Contents",
                ReadBy::TextLayer,
                0,
                vec![serde_json::json!({"header": ["a"], "rows": [["1"]]})],
            ),
            (2, "Scanned words", ReadBy::Tesseract, 90, Vec::new()),
        ] {
            insert_page(
                &mut conn,
                &PageImage {
                    doc_id: doc.id,
                    page_no,
                    width: 10,
                    height: 10,
                    image_bytes: 0,
                    image_path: "p.png",
                    tiles: 1,
                },
            )
            .unwrap();
            let reading = Reading {
                text: text.into(),
                tables,
                read_by: Some(read_by),
                rotation,
                ..Default::default()
            };
            store_page_text(&mut conn, doc.id, page_no, &reading, read_by.as_str(), &[]).unwrap();
        }
        (dir, conn, doc.id)
    }

    #[test]
    fn each_page_is_one_json_line_with_its_document() {
        let (_dir, mut conn, id) = store();
        let export = document_export(&mut conn, id).unwrap().unwrap();
        let jsonl = export.render(ExportFormat::Jsonl).unwrap();
        let lines: Vec<serde_json::Value> = jsonl
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{jsonl}");
        assert!(jsonl.ends_with('\n'));
        assert_eq!(
            lines[0],
            serde_json::json!({
                "source": "/in/manual.pdf", "sha256": "ab12", "title": "Manual",
                "page_no": 1, "pages": 2, "text": "# Contents",
                "tables": [{"header": ["a"], "rows": [["1"]]}], "figures": [],
                "read_by": "text_layer", "reader": "text_layer", "rotation": 0
            })
        );
        assert_eq!(
            (
                &lines[1]["read_by"],
                &lines[1]["rotation"],
                &lines[1]["text"]
            ),
            (
                &serde_json::json!("tesseract"),
                &serde_json::json!(90),
                &serde_json::json!("Scanned words")
            )
        );
        // The Markdown of the same read: text escaped, the table as a Markdown table.
        let md = export.render(ExportFormat::Markdown).unwrap();
        assert!(
            md.starts_with("# Manual\n\n<!-- page 1 -->\n\n\\# Contents\n\n| a |"),
            "{md}"
        );
        assert!(md.contains("<!-- page 2 -->\n\nScanned words\n"), "{md}");
        assert!(document_export(&mut conn, id + 1).unwrap().is_none());
    }

    #[test]
    fn formats_are_named_by_their_extension() {
        assert_eq!(ExportFormat::default(), ExportFormat::Markdown);
        assert_eq!(
            [ExportFormat::Markdown, ExportFormat::Jsonl].map(ExportFormat::extension),
            ["md", "jsonl"]
        );
        let f: ExportFormat = serde_json::from_str("\"jsonl\"").unwrap();
        assert_eq!(f.as_str(), "jsonl");
    }
}
