//! A document's structure from its pages' text layers ([`PageLayout`]), with no model: what a
//! reader of the Markdown expects to find.
//!
//! Read over the whole document, because what a line is depends on the others:
//!
//! - **Body text** is the font size most characters are set in (monospaced text aside).
//! - **Running headers, footers and page numbers** ([`furniture`]): a line in a page's top or
//!   bottom eighth whose text (digits aside) comes back at the same height on at least two pages
//!   and two fifths of them, or that is only a page number (`12`, `Page 12`, `12 of 40`, `xii`).
//!   Dropped from the text, kept in [`PageStructure::furniture`].
//! - **Headings**: a line (or two or three) set larger than the body (1.15×), or wholly bold,
//!   short (at most 20 words) and standing alone. Levels follow the heading styles found in the
//!   document, largest first (a bold style before a plain one of the same size).
//! - **Paragraphs**: lines joined across line breaks, a new paragraph where the gap above a line
//!   is wider than a blank line's share of the lines', where the line before stops short after
//!   a full stop, or on a change of style. A line ending in a hyphen is joined to the next
//!   without it when the joined word is seen elsewhere in the document, or when the part before
//!   the hyphen is no word of the document (`con-` / `verted`); the hyphen is kept when both
//!   parts are (`well-` / `known`) or the hyphenated word is seen elsewhere. No dictionary: the
//!   document is its own (a word cut at a line's end counts for neither part). A paragraph cut
//!   by a page break is joined to its start.
//! - **Lists** ([`page`]): a line opening with a bullet (`•`, `◦`, `-`, `–`, ...) or an
//!   enumerator (`3.`, `b)`, `(iv)`), its continuation lines indented to its text; nesting
//!   from the markers' indentation.
//! - **Code**: lines mostly in a monospaced font, kept line by line with their indentation.
//! - **Tables** ([`table`]): cells from ruling lines where the page draws a grid (pdfplumber's
//!   lattice), else columns from the gaps that every row of a run of lines leaves empty
//!   (pdfplumber's text strategy); header row first.
//! - **Footnotes**: smaller lines at the foot of a page opening with a mark, and the raised mark
//!   in the text that points at them.
//! - **Links**: a word inside a link's area, with its target.
//!
//! Reading order is the content stream's (producers write columns one after the other), but
//! for a page whose two columns are drawn line by line across ([`columns`]): cut at its gutter
//! and read column by column.
//!
//! [`markdown`] writes the blocks as Markdown.

pub mod columns;
pub mod furniture;
pub mod markdown;
pub mod page;
pub mod table;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::layout::{Line, PageLayout};

/// One block of a page's structure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// A heading and its level (1 is the largest).
    Heading {
        /// 1 to 6.
        level: u8,
        /// Its text.
        text: String,
    },
    /// A paragraph: its lines joined, inline Markdown (emphasis, code, links, footnote marks).
    Paragraph {
        /// Its text.
        text: String,
    },
    /// A list item.
    ListItem {
        /// Nesting, from 0.
        depth: u8,
        /// Its enumerator (`3`, `b`, `iv`) when numbered, `None` for a bullet.
        number: Option<String>,
        /// Its text (inline Markdown).
        text: String,
    },
    /// Preformatted text in a monospaced font, line by line.
    Code {
        /// The lines, indentation kept.
        text: String,
    },
    /// A table: its header row and the rows under it.
    Table {
        /// The first row's cells.
        header: Vec<String>,
        /// The other rows, each as wide as the header.
        rows: Vec<Vec<String>>,
    },
    /// A footnote at the foot of the page.
    Footnote {
        /// Its mark (`1`, `*`).
        label: String,
        /// Its text.
        text: String,
    },
}

/// A page's structure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageStructure {
    /// Its blocks in reading order.
    pub blocks: Vec<Block>,
    /// The running headers, footers and page numbers taken out of its text.
    pub furniture: Vec<String>,
}

impl PageStructure {
    /// The page as Markdown ([`markdown::page`]).
    pub fn to_markdown(&self) -> String {
        markdown::page(&self.blocks)
    }
}

/// What is learnt from the whole document before any page is structured.
#[derive(Debug, Clone, Default)]
pub struct DocumentStats {
    /// The body text's font size, in pixels.
    pub body_size: f32,
    /// Every word seen, lowercased, without surrounding punctuation (for de-hyphenation).
    pub words: HashSet<String>,
    /// Heading styles (size in half pixels, bold) from largest to smallest: their levels.
    pub heading_styles: Vec<(i32, bool)>,
    /// The raised words of the text (footnote marks, exponents).
    pub marks: HashSet<String>,
    /// The marks of the document's footnotes: a raised one in the text is written `[^mark]`.
    pub labels: HashSet<String>,
}

impl DocumentStats {
    /// Reads the body size and the vocabulary of `pages`.
    pub fn of(pages: &[&PageLayout]) -> DocumentStats {
        let mut sizes: HashMap<i32, usize> = HashMap::new();
        let mut words = HashSet::new();
        let mut marks = HashSet::new();
        let mut after_hyphen = false;
        for line in pages.iter().flat_map(|p| &p.lines) {
            let n = line.spans.len();
            for (k, s) in line.spans.iter().enumerate() {
                // A word cut at a line's end is no evidence of either part.
                let cut_here = k + 1 == n && s.text.ends_with(['-', '\u{00AD}', '\u{2010}']);
                let cut_before = k == 0 && after_hyphen;
                if !s.mono && !s.raised && s.size.is_finite() && s.size > 0.0 {
                    *sizes.entry(size_key(s.size)).or_default() += s.text.chars().count();
                }
                if s.raised {
                    marks.insert(s.text.trim().to_owned());
                }
                let w = word_key(&s.text);
                if !w.is_empty() && !cut_here && !cut_before {
                    words.insert(w);
                }
            }
            after_hyphen = line
                .spans
                .last()
                .is_some_and(|s| s.text.ends_with(['-', '\u{00AD}', '\u{2010}']));
        }
        let body = sizes
            .into_iter()
            .max_by_key(|(k, n)| (*n, std::cmp::Reverse(*k)))
            .map_or(0.0, |(k, _)| k as f32 / 2.0);
        DocumentStats {
            body_size: body,
            words,
            heading_styles: Vec::new(),
            marks,
            labels: HashSet::new(),
        }
    }

    /// The level of a heading set in `size` (bold or not), from [`Self::heading_styles`].
    pub fn level(&self, size: f32, bold: bool) -> u8 {
        let key = (size_key(size), bold);
        let i = self
            .heading_styles
            .iter()
            .position(|s| *s == key)
            .unwrap_or(self.heading_styles.len());
        u8::try_from(i + 1).unwrap_or(6).min(6)
    }
}

/// A font size in half pixels (sizes closer than that are one size).
fn size_key(size: f32) -> i32 {
    (size * 2.0).round() as i32
}

/// A word as the vocabulary keeps it: lowercased, punctuation around it removed.
pub(crate) fn word_key(w: &str) -> String {
    w.trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
}

/// Most lines of a page that is structured (the rules compare lines pairwise); a page with more
/// gets an empty structure, and its text stays as read.
pub const MAX_LINES: usize = 4000;
/// Most ruling lines of a page that is structured.
pub const MAX_RULES: usize = 4096;

/// The structure of each page of a document (pages without a text layer: pass an empty
/// [`PageLayout`], and get an empty structure back; so is a page past [`MAX_LINES`] or
/// [`MAX_RULES`]).
pub fn document(pages: &[&PageLayout]) -> Vec<PageStructure> {
    // A page past the ceilings is left out (its text stays as read).
    let empty = PageLayout::default();
    let pages: Vec<&PageLayout> = pages
        .iter()
        .map(|p| {
            if p.lines.len() > MAX_LINES || p.rules.len() > MAX_RULES {
                &empty
            } else {
                *p
            }
        })
        .collect();
    let pages = &pages[..];
    let mut stats = DocumentStats::of(pages);
    let furniture = furniture::find(pages);
    // Lines left once the furniture is out, per page.
    let kept: Vec<Vec<&Line>> = pages
        .iter()
        .zip(&furniture)
        .map(|(p, f)| {
            p.lines
                .iter()
                .enumerate()
                .filter(|(i, _)| !f.contains(i))
                .map(|(_, l)| l)
                .collect()
        })
        .collect();
    // Two columns drawn across the page are read column by column.
    let body = stats.body_size.max(1.0);
    let reordered: Vec<Option<Vec<Line>>> =
        kept.iter().map(|k| columns::reorder(k, body)).collect();
    let kept: Vec<Vec<&Line>> = kept
        .into_iter()
        .zip(&reordered)
        .map(|(k, r)| match r {
            Some(lines) => lines.iter().collect(),
            None => k,
        })
        .collect();
    // Footnotes' marks and heading styles first (a mark may point at the next page, levels
    // need every page), then the pages.
    stats.labels = kept
        .iter()
        .flat_map(|lines| page::footnote_labels(lines, &stats))
        .collect();
    let drafts: Vec<Vec<page::Draft>> = pages
        .iter()
        .zip(&kept)
        .map(|(p, lines)| page::draft(p, lines, &stats))
        .collect();
    let mut styles: Vec<(i32, bool)> = drafts
        .iter()
        .flatten()
        .filter_map(|d| match d {
            page::Draft::Heading { size, bold, .. } => Some((size_key(*size), *bold)),
            _ => None,
        })
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    styles.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    stats.heading_styles = styles;
    let mut out: Vec<PageStructure> = drafts
        .into_iter()
        .zip(pages.iter().zip(&furniture))
        .map(|(drafts, (p, f))| PageStructure {
            blocks: drafts.into_iter().map(|d| d.finish(&stats)).collect(),
            furniture: f.iter().map(|&i| p.lines[i].text()).collect(),
        })
        .collect();
    join_across_pages(&mut out, &stats);
    out
}

/// A paragraph cut by a page break (the page's last paragraph ends without a full stop and the
/// next page opens with a paragraph) is joined to its start on the earlier page; so is code, and
/// a table whose next page opens with a table as wide (its repeated header dropped).
fn join_across_pages(pages: &mut [PageStructure], stats: &DocumentStats) {
    for i in 1..pages.len() {
        let (before, after) = pages.split_at_mut(i);
        // The rest of a footnote (no mark) goes on the last footnote of the page before.
        if let Some(k) = after[0]
            .blocks
            .iter()
            .position(|b| matches!(b, Block::Footnote { label, .. } if label.is_empty()))
            && let Some(Block::Footnote { text: head, .. }) = before[i - 1]
                .blocks
                .iter_mut()
                .rev()
                .find(|b| matches!(b, Block::Footnote { .. }))
            && let Block::Footnote { text: tail, .. } = after[0].blocks.remove(k)
        {
            *head = page::join_lines(head, &tail, stats);
        }
        // Code cut by a page break goes on.
        if let (Some(Block::Code { text: head }), Some(Block::Code { text: tail })) =
            (before[i - 1].blocks.last_mut(), after[0].blocks.first())
        {
            head.push('\n');
            head.push_str(tail);
            after[0].blocks.remove(0);
            continue;
        }
        // A table cut by a page break (the next page's first table has as many columns; a
        // repeated header row is dropped).
        let last = before[i - 1]
            .blocks
            .iter_mut()
            .rev()
            .find(|b| !matches!(b, Block::Footnote { .. }));
        if let (
            Some(Block::Table { header, rows }),
            Some(Block::Table {
                header: next_header,
                rows: next_rows,
            }),
        ) = (last, after[0].blocks.first())
            && header.len() == next_header.len()
        {
            if next_header != header {
                rows.push(next_header.clone());
            }
            rows.extend(next_rows.iter().cloned());
            after[0].blocks.remove(0);
            continue;
        }
        // The page's last block before its footnotes.
        let Some(Block::Paragraph { text: head }) = before[i - 1]
            .blocks
            .iter_mut()
            .rev()
            .find(|b| !matches!(b, Block::Footnote { .. }))
        else {
            continue;
        };
        let Some(Block::Paragraph { text: tail }) = after[0].blocks.first() else {
            continue;
        };
        let ends = head.trim_end().ends_with(['.', '!', '?', ':', ';']);
        let opens_lower = tail.chars().next().is_some_and(char::is_lowercase);
        if !ends && (opens_lower || head.ends_with('-')) {
            let joined = page::join_lines(head, tail, stats);
            *head = joined;
            after[0].blocks.remove(0);
        }
    }
}

/// A PDF's text layer read in this process (`config`'s ceilings apply) and structured: each
/// page's structure, an empty one for a page with no text layer or that failed alone.
///
/// Untrusted files belong in a [worker](crate::worker) process; this is for trusted ones and
/// for tests.
pub fn read_pdf(
    data: Vec<u8>,
    config: &crate::render::RenderConfig,
) -> Result<Vec<PageStructure>, crate::render::RenderError> {
    let pdf = crate::render::open_pdf(data, config)?;
    let mut renderer = crate::render::PageRenderer::new(&pdf, config)?;
    let mut layouts = Vec::new();
    for n in 1..=renderer.page_count() {
        let page = renderer.text_layer(n)?;
        layouts.push(page.text_layer.map(|t| t.layout).unwrap_or_default());
    }
    let refs: Vec<&PageLayout> = layouts.iter().collect();
    Ok(document(&refs))
}

/// The pages' structures as one Markdown document, pages separated by a blank line, the
/// footnotes last (where Markdown readers look for them).
pub fn to_markdown(pages: &[PageStructure]) -> String {
    let (mut body, mut notes) = (Vec::new(), Vec::new());
    for p in pages {
        for b in &p.blocks {
            if matches!(b, Block::Footnote { .. }) {
                notes.push(b.clone());
            } else {
                body.push(b.clone());
            }
        }
    }
    body.extend(notes);
    markdown::page(&body)
}

#[cfg(test)]
mod tests;
