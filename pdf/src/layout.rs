//! A page's text layer as laid out: its lines in reading order, each line's words with their
//! font size and style (bold, italic, monospace, raised), the ruling lines drawn on the page and
//! its links. What [`text_layer`](crate::text_layer) reads, and what
//! [`structure`](crate::structure) turns into headings, paragraphs, lists, code, tables and
//! footnotes once it has seen the whole document. A leaf module: plain data, no PDF syntax.
//!
//! Coordinates are the page image's pixels (y grows downwards), as for [`Word`](crate::reading::Word).

use serde::{Deserialize, Serialize};

/// One page of a document's text layer, laid out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageLayout {
    /// The page's width in pixels.
    pub width: f32,
    /// The page's height in pixels.
    pub height: f32,
    /// The text's lines, in reading order.
    pub lines: Vec<Line>,
    /// Horizontal and vertical ruling lines (table borders, separators), thin boxes.
    pub rules: Vec<Rule>,
    /// Links: an area of the page and where it points.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
}

/// One line of text: words on one baseline, in reading order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// The words, left to right.
    pub spans: Vec<Span>,
    /// Whether the gap above it (more than 1.6 font sizes) starts a paragraph.
    pub gap_above: bool,
}

impl Line {
    /// The line's text: its words joined by spaces (none before an attached word).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.spans.iter().enumerate() {
            if i > 0 && !s.attached {
                out.push(' ');
            }
            out.push_str(&s.text);
        }
        out
    }

    /// Left edge.
    pub fn x0(&self) -> f32 {
        self.spans
            .iter()
            .map(|s| s.x0)
            .fold(f32::INFINITY, f32::min)
    }

    /// Right edge.
    pub fn x1(&self) -> f32 {
        self.spans
            .iter()
            .map(|s| s.x1)
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// Top edge.
    pub fn y0(&self) -> f32 {
        self.spans
            .iter()
            .map(|s| s.y0)
            .fold(f32::INFINITY, f32::min)
    }

    /// Bottom edge.
    pub fn y1(&self) -> f32 {
        self.spans
            .iter()
            .map(|s| s.y1)
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// The font size most of its characters are set in (raised words aside).
    pub fn size(&self) -> f32 {
        let mut best = (0usize, 0.0f32);
        for s in self.spans.iter().filter(|s| !s.raised) {
            let n: usize = self
                .spans
                .iter()
                .filter(|t| !t.raised && (t.size - s.size).abs() < 0.5)
                .map(|t| t.text.chars().count())
                .sum();
            if n > best.0 {
                best = (n, s.size);
            }
        }
        if best.0 == 0 {
            self.spans.first().map_or(0.0, |s| s.size)
        } else {
            best.1
        }
    }

    /// The share of its characters for which `pred` holds.
    pub fn share(&self, pred: impl Fn(&Span) -> bool) -> f32 {
        let (mut yes, mut all) = (0usize, 0usize);
        for s in &self.spans {
            let n = s.text.chars().count();
            all += n;
            if pred(s) {
                yes += n;
            }
        }
        if all == 0 {
            0.0
        } else {
            yes as f32 / all as f32
        }
    }
}

/// One word and how it is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// The word.
    pub text: String,
    /// Left edge.
    pub x0: f32,
    /// Top edge.
    pub y0: f32,
    /// Right edge.
    pub x1: f32,
    /// Bottom edge.
    pub y1: f32,
    /// Font size in pixels (the em's height).
    pub size: f32,
    /// A bold font (weight 600 or more, or a bold name).
    #[serde(default, skip_serializing_if = "is_false")]
    pub bold: bool,
    /// An italic or oblique font.
    #[serde(default, skip_serializing_if = "is_false")]
    pub italic: bool,
    /// A monospaced font (its flags or name, or every glyph of its line the same width).
    #[serde(default, skip_serializing_if = "is_false")]
    pub mono: bool,
    /// Smaller and above the line's baseline: a superscript (a footnote's mark).
    #[serde(default, skip_serializing_if = "is_false")]
    pub raised: bool,
    /// Set against the word before it with no space between (a mark after its word).
    #[serde(default, skip_serializing_if = "is_false")]
    pub attached: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A ruling line: a thin horizontal or vertical box.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Left edge.
    pub x0: f32,
    /// Top edge.
    pub y0: f32,
    /// Right edge.
    pub x1: f32,
    /// Bottom edge.
    pub y1: f32,
}

impl Rule {
    /// Wider than tall.
    pub fn is_horizontal(&self) -> bool {
        self.x1 - self.x0 >= self.y1 - self.y0
    }
}

/// A link annotation: the area it covers and its target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Left edge.
    pub x0: f32,
    /// Top edge.
    pub y0: f32,
    /// Right edge.
    pub x1: f32,
    /// Bottom edge.
    pub y1: f32,
    /// The URI it opens.
    pub uri: String,
}
