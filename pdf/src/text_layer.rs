//! The text layer of a born-digital page: the characters its content stream draws, with their
//! boxes, read with hayro's own interpreter (no second PDF library, the same parse as the
//! rendering), so such a page needs no OCR.
//!
//! Reading order is the content stream's: producers write a page's text in the order it is read
//! (column by column), which geometric sorting would break for multi-column pages. Glyphs are
//! grouped into words (a space, or a gap wider than 0.15 of the font size) and lines (the
//! baseline moves by more than half the font size, or the text goes backwards); a line whose
//! baseline is more than 1.6 font sizes below the previous one starts a paragraph.
//!
//! A text layer is *usable* ([`TextLayer::is_usable`]) when it holds at least 20 legible
//! characters, and at least 0.2 per square inch of page (an A4 page: 20; an A0 poster: 380),
//! and at most one character in ten is illegible (no Unicode mapping, a control or
//! private-use character: what fonts without a `ToUnicode` map give). Below that the page is a
//! scan, a figure or a font that cannot be decoded, and is read by OCR or the vision model.
//! Known limit: a font whose `ToUnicode` map is wrong gives legible but false letters, which
//! this test cannot tell from text.

use hayro::hayro_interpret::font::{Glyph, GlyphRun};
use hayro::hayro_interpret::hayro_cmap::BfString;
use hayro::hayro_interpret::kurbo::{Affine, BezPath, PathEl, PathSeg, Point, Rect, Shape, Vec2};
use hayro::hayro_interpret::{BlendMode, util::TransformExt};
use hayro::hayro_interpret::{
    ClipPath, Context, Device, DrawMode, DrawProps, Image, ImageDrawProps, InterpreterCache,
    InterpreterSettings, SoftMask, interpret_page,
};
use hayro::hayro_syntax::page::Page;
use serde::{Deserialize, Serialize};

use crate::layout::{Line, Link, PageLayout, Rule, Span};
use crate::reading::{ReadBy, Reading, Word};

/// Whether pages keep their text layer (`[ingest] text_layer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextLayerMode {
    /// A page with a usable text layer keeps it; the others are read by the reader.
    #[default]
    Auto,
    /// Every page is read by the reader (OCR or the vision model), text layer or not.
    Ignore,
}

/// Fewest legible characters of a usable text layer.
pub const MIN_CHARS: usize = 20;
/// Fewest legible characters per square inch of page of a usable text layer.
pub const MIN_CHARS_PER_SQ_INCH: f64 = 0.2;
/// Largest share of illegible characters of a usable text layer.
pub const MAX_ILLEGIBLE_SHARE: f64 = 0.1;

/// A page's text layer, in the page image's pixels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextLayer {
    /// The words in reading order, with their boxes in the page image's pixels.
    pub words: Vec<Word>,
    /// The text: words joined by spaces, lines by newlines, paragraphs by a blank line.
    pub text: String,
    /// Characters that are letters, digits, punctuation or symbols.
    pub legible: usize,
    /// Characters without a Unicode mapping, control or private-use characters.
    pub illegible: usize,
    /// The page's area in square inches.
    pub page_sq_inches: f64,
    /// The same words laid out: lines with each word's font size and style, and the page's
    /// ruling lines, for [`structure`](crate::structure).
    #[serde(default)]
    pub layout: PageLayout,
}

impl TextLayer {
    /// Whether the layer is the page's text (see the module's documentation for the rule).
    pub fn is_usable(&self) -> bool {
        let wanted = (MIN_CHARS as f64).max(MIN_CHARS_PER_SQ_INCH * self.page_sq_inches);
        let total = (self.legible + self.illegible) as f64;
        self.legible as f64 >= wanted && self.illegible as f64 <= MAX_ILLEGIBLE_SHARE * total
    }

    /// The layer as a page reading (recorded as read by [`ReadBy::TextLayer`]).
    pub fn into_reading(self) -> Reading {
        Reading {
            text: self.text,
            words: Some(self.words),
            read_by: Some(ReadBy::TextLayer),
            layout: Some(self.layout),
            ..Reading::default()
        }
    }
}

/// How a font sets its glyphs, from its descriptor, its program or its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Style {
    bold: bool,
    italic: bool,
    mono: bool,
}

impl Style {
    /// The style of the font of an outline glyph (Type 1 fonts tell nothing: plain).
    fn of(glyph: &Glyph<'_>) -> Style {
        let Glyph::Outline(o) = glyph else {
            return Style::default();
        };
        let Some(data) = o.font_data() else {
            return Style::default();
        };
        let name = data
            .postscript_name
            .as_deref()
            .unwrap_or("")
            .to_ascii_lowercase();
        let has = |parts: &[&str]| parts.iter().any(|p| name.contains(p));
        Style {
            bold: data.weight.is_some_and(|w| w >= 600)
                || has(&["bold", "black", "heavy", "semibold", "demi"]),
            italic: data.is_italic || has(&["italic", "oblique"]),
            mono: data.is_monospace || has(&["mono", "courier", "consol", "code"]),
        }
    }
}

/// One drawn character: its text, baseline origin, advance and up vectors in pixels, and its
/// font's style.
#[derive(Debug, Clone)]
struct Glyph1 {
    text: String,
    origin: Point,
    advance: Vec2,
    up: Vec2,
    style: Style,
}

impl Glyph1 {
    fn size(&self) -> f64 {
        self.up.hypot().max(1e-6)
    }
    fn dir(&self) -> Vec2 {
        let len = self.advance.hypot();
        if len > 1e-9 {
            self.advance / len
        } else {
            // No advance known: perpendicular to up, rotated clockwise (y grows downwards).
            let u = self.up / self.size();
            Vec2::new(-u.y, u.x)
        }
    }
    fn bbox(&self) -> Rect {
        let low = self.origin - self.up * 0.2;
        let high = self.origin + self.up * 0.8;
        Rect::from_points(low, high)
            .union_pt(low + self.advance)
            .union_pt(high + self.advance)
    }
}

/// Most ruling lines kept of one page (a page drawing more is a figure, not a table).
const MAX_RULES: usize = 4096;

/// Collects the glyphs the interpreter draws, and the ruling lines.
#[derive(Default)]
struct Collector {
    glyphs: Vec<Glyph1>,
    rules: Vec<Rule>,
    /// `(first glyph index, count)` of the last run: a fill-and-stroke run is drawn twice.
    last_run: Option<(usize, usize)>,
}

impl<'a> Device<'a> for Collector {
    fn draw_path(&mut self, path: &BezPath, props: DrawProps<'a>, mode: &DrawMode) {
        if self.rules.len() >= MAX_RULES {
            return;
        }
        match mode {
            DrawMode::Fill(_) | DrawMode::FillAndStroke(..) => {
                // A thin filled box is a rule; a box's outline drawn as four of them is too.
                let path = props.transform * path.clone();
                let mut sub = BezPath::new();
                for el in path.elements() {
                    if matches!(el, PathEl::MoveTo(_)) && !sub.elements().is_empty() {
                        push_rule(&mut self.rules, sub.bounding_box());
                        sub = BezPath::new();
                    }
                    sub.push(*el);
                }
                if !sub.elements().is_empty() {
                    push_rule(&mut self.rules, sub.bounding_box());
                }
            }
            DrawMode::Stroke(stroke) => {
                let width = f64::from(stroke.line_width).max(0.5)
                    * props.transform.as_coeffs()[0].hypot(props.transform.as_coeffs()[1]);
                for seg in path.segments() {
                    if let PathSeg::Line(l) = seg {
                        let (a, b) = (props.transform * l.p0, props.transform * l.p1);
                        let r = Rect::from_points(a, b).inflate(width / 2.0, width / 2.0);
                        push_rule(&mut self.rules, r);
                    }
                }
            }
            DrawMode::Invisible => {}
        }
    }
    fn push_clip_path(&mut self, _: &ClipPath) {}
    fn push_transparency_group(&mut self, _: f32, _: Option<SoftMask<'a>>, _: BlendMode) {}
    fn draw_image(&mut self, _: Image<'a, '_>, _: ImageDrawProps<'a>) {}
    fn pop_clip(&mut self) {}
    fn pop_transparency_group(&mut self) {}

    fn draw_glyph_run(&mut self, run: &GlyphRun<'_, 'a>, props: DrawProps<'a>, _: &DrawMode) {
        let start = self.glyphs.len();
        let style = run
            .glyphs()
            .first()
            .map_or_else(Style::default, |g| Style::of(g));
        for g in run.glyphs() {
            let t = props.transform * g.transform();
            let origin = t * Point::ORIGIN;
            let advance_units = match &**g {
                Glyph::Outline(o) => o.advance_width(),
                Glyph::Type3(_) => None,
            }
            .filter(|w| w.is_finite() && *w > 0.0)
            .map_or(500.0, f64::from);
            let text = match g.as_unicode() {
                Some(BfString::Char(c)) => unligature(c).map_or_else(|| c.to_string(), Into::into),
                Some(BfString::String(s)) => s.chars().fold(String::new(), |mut out, c| {
                    match unligature(c) {
                        Some(l) => out.push_str(l),
                        None => out.push(c),
                    }
                    out
                }),
                None => char::REPLACEMENT_CHARACTER.to_string(),
            };
            self.glyphs.push(Glyph1 {
                text,
                origin,
                advance: (t * Point::new(advance_units, 0.0)) - origin,
                // Glyph space is 1000 units per em.
                up: (t * Point::new(0.0, 1000.0)) - origin,
                style,
            });
        }
        let count = self.glyphs.len() - start;
        if let Some((prev, n)) = self.last_run
            && n == count
            && count > 0
            && self.glyphs[prev].origin.distance(self.glyphs[start].origin) < 0.01
            && self.glyphs[prev].text == self.glyphs[start].text
        {
            self.glyphs.truncate(start);
            return;
        }
        self.last_run = Some((start, count));
    }
}

/// Reads the text layer of `page`, in the pixels of the page rendered with `scale` (dpi / 72);
/// `cache` is the document's (fonts are parsed once per document).
pub fn extract<'a>(page: &Page<'a>, cache: &InterpreterCache<'a>, scale: f64) -> TextLayer {
    let transform = Affine::scale(scale) * page.initial_transform(true).to_kurbo();
    let (w_pt, h_pt) = page.render_dimensions();
    let bbox = Rect::new(0.0, 0.0, f64::from(w_pt) * scale, f64::from(h_pt) * scale);
    let mut ctx = Context::new(
        transform,
        bbox,
        cache,
        page.xref(),
        InterpreterSettings::default(),
    );
    let mut collector = Collector::default();
    interpret_page(page, &mut ctx, &mut collector);
    let mut layer = layout(&collector.glyphs);
    layer.page_sq_inches = f64::from(w_pt) * f64::from(h_pt) / (72.0 * 72.0);
    layer.layout.width = bbox.width() as f32;
    layer.layout.height = bbox.height() as f32;
    layer.layout.rules = collector.rules;
    layer.layout.links = links(page, &transform);
    layer
}

/// Most links kept of one page.
const MAX_LINKS: usize = 1024;
/// Longest link target kept, in bytes.
const MAX_URI: usize = 2048;

/// Whether a link's target is one a reader may follow: `http`, `https`, `mailto` or `ftp`
/// (never `javascript:`, `data:` or `file:`, which the Markdown would carry to whoever renders
/// it).
fn safe_scheme(uri: &str) -> bool {
    let lower = uri.trim_start().to_ascii_lowercase();
    ["http://", "https://", "mailto:", "ftp://"]
        .iter()
        .any(|s| lower.starts_with(s))
}

/// The page's link annotations that open a URI a reader may follow ([`safe_scheme`]), their
/// areas in the page image's pixels.
fn links(page: &Page<'_>, transform: &Affine) -> Vec<Link> {
    use hayro::hayro_syntax::object::dict::keys::{A, ANNOTS, RECT, SUBTYPE, URI};
    use hayro::hayro_syntax::object::{Array, Dict, Name, String as PdfString};
    let Some(annots) = page.raw().get::<Array<'_>>(ANNOTS) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for annot in annots.iter::<Dict<'_>>().take(MAX_LINKS) {
        let is_link = annot
            .get::<Name<'_>>(SUBTYPE)
            .is_some_and(|n| n.as_ref() == b"Link");
        let (Some(r), Some(action)) = (
            annot.get::<hayro::hayro_syntax::object::Rect>(RECT),
            annot.get::<Dict<'_>>(A),
        ) else {
            continue;
        };
        let Some(uri) = action.get::<PdfString<'_>>(URI) else {
            continue;
        };
        let uri = String::from_utf8_lossy(uri.as_bytes());
        if !is_link || uri.len() > MAX_URI || !safe_scheme(&uri) {
            continue;
        }
        let area = Rect::from_points(
            *transform * Point::new(r.x0, r.y0),
            *transform * Point::new(r.x1, r.y1),
        );
        if !(area.x0.is_finite()
            && area.y0.is_finite()
            && area.x1.is_finite()
            && area.y1.is_finite())
        {
            continue;
        }
        out.push(Link {
            x0: area.x0 as f32,
            y0: area.y0 as f32,
            x1: area.x1 as f32,
            y1: area.y1 as f32,
            uri: uri.into_owned(),
        });
    }
    out
}

/// Keeps `b` as a rule when it is a thin horizontal or vertical box (at most 4 px across, at
/// least 8 px long).
fn push_rule(rules: &mut Vec<Rule>, b: Rect) {
    let (w, h) = (b.width(), b.height());
    if !(w.is_finite() && h.is_finite()) || w.min(h) > 4.0 || w.max(h) < 8.0 {
        return;
    }
    rules.push(Rule {
        x0: b.x0 as f32,
        y0: b.y0 as f32,
        x1: b.x1 as f32,
        y1: b.y1 as f32,
    });
}

/// The letters of a Latin ligature (TeX's fonts draw "fi" as U+FB01): full-text search and
/// embeddings want the word `defined`, not `deﬁned`.
fn unligature(c: char) -> Option<&'static str> {
    Some(match c {
        '\u{FB00}' => "ff",
        '\u{FB01}' => "fi",
        '\u{FB02}' => "fl",
        '\u{FB03}' => "ffi",
        '\u{FB04}' => "ffl",
        '\u{FB05}' | '\u{FB06}' => "st",
        _ => return None,
    })
}

/// Whether `c` counts against a text layer.
fn illegible(c: char) -> bool {
    c == char::REPLACEMENT_CHARACTER
        || c.is_control()
        || ('\u{E000}'..='\u{F8FF}').contains(&c)
        || ('\u{F0000}'..='\u{10FFFF}').contains(&c)
}

/// A word being built: its text, box, font size, baseline and style counts.
struct WordAcc {
    text: String,
    bbox: Rect,
    size: f64,
    /// How high its first glyph's baseline sits (along `up`: larger is higher on the page).
    baseline: f64,
    chars: usize,
    bold: usize,
    italic: usize,
    mono: usize,
    /// Advances of its glyphs, rounded to tenths of a pixel (a monospaced font has one).
    advances: Vec<i64>,
    /// Set against the word before it, with no space between.
    attached: bool,
}

impl WordAcc {
    fn new(g: &Glyph1) -> Self {
        let up = g.up / g.size();
        let mut w = WordAcc {
            text: String::new(),
            bbox: g.bbox(),
            size: g.size(),
            baseline: g.origin.to_vec2().dot(up),
            chars: 0,
            bold: 0,
            italic: 0,
            mono: 0,
            advances: Vec::new(),
            attached: false,
        };
        w.push(g);
        w
    }

    fn push(&mut self, g: &Glyph1) {
        self.text.push_str(&g.text);
        self.bbox = self.bbox.union(g.bbox());
        self.size = self.size.max(g.size());
        let n = g.text.chars().count();
        self.chars += n;
        self.bold += if g.style.bold { n } else { 0 };
        self.italic += if g.style.italic { n } else { 0 };
        self.mono += if g.style.mono { n } else { 0 };
        self.advances
            .push((g.advance.hypot() * 10.0).round() as i64);
    }

    fn word(&self) -> Word {
        let px = |v: f64| v.max(0.0).round() as u32;
        Word {
            text: self.text.clone(),
            x: px(self.bbox.x0),
            y: px(self.bbox.y0),
            w: px(self.bbox.width()),
            h: px(self.bbox.height()),
        }
    }

    fn span(&self) -> Span {
        let most = |n: usize| 2 * n > self.chars;
        // Tenths of a pixel: enough for the layout, and short in the stored reading's JSON.
        let tenth = |v: f64| ((v * 10.0).round() / 10.0) as f32;
        Span {
            text: self.text.clone(),
            x0: tenth(self.bbox.x0),
            y0: tenth(self.bbox.y0),
            x1: tenth(self.bbox.x1),
            y1: tenth(self.bbox.y1),
            size: tenth(self.size),
            bold: most(self.bold),
            italic: most(self.italic),
            mono: most(self.mono),
            raised: false,
            attached: self.attached,
        }
    }
}

/// A gap between glyphs wider than this share of the font size, with no space drawn, is a
/// word break (TeX shrinks a justified line's spaces to 0.17 em and draws none).
const WORD_GAP: f64 = 0.15;

/// Fewest glyphs of one width that make a line monospaced whatever its font says.
const MONO_GLYPHS: usize = 5;

/// A line's words as spans: a word smaller than the line's font and above its baseline is
/// raised (a superscript); a line of [`MONO_GLYPHS`] or more glyphs all of one width (not only
/// digits) is monospaced, whatever its font says (Type 1 fonts say nothing).
fn line_spans(words: &[WordAcc]) -> Vec<Span> {
    let mut spans: Vec<Span> = words.iter().map(WordAcc::span).collect();
    let main = words
        .iter()
        .max_by(|a, b| (a.chars as f64 * a.size).total_cmp(&(b.chars as f64 * b.size)));
    if let Some(main) = main {
        for (s, w) in spans.iter_mut().zip(words) {
            s.raised = w.size < 0.85 * main.size && w.baseline - main.baseline > 0.2 * main.size;
        }
    }
    let advances: Vec<i64> = words
        .iter()
        .flat_map(|w| w.advances.iter().copied())
        .collect();
    // Digits are of one width in most fonts: a line of them tells nothing.
    let letters = words.iter().any(|w| {
        w.text
            .chars()
            .any(|c| !c.is_ascii_digit() && !c.is_ascii_punctuation())
    });
    if advances.len() >= MONO_GLYPHS
        && letters
        && advances.iter().all(|a| (a - advances[0]).abs() <= 1)
        && advances[0] > 0
    {
        for s in &mut spans {
            s.mono = true;
        }
    }
    spans
}

/// Most characters of a mark drawn apart from its line (a list's bullet or number, a
/// footnote's number: some producers draw them after the text they mark).
const MARK_CHARS: usize = 4;
/// How many lines back a mark's line is looked for.
const MARK_LOOKBACK: usize = 200;

/// Puts a short mark drawn after its line back at the line's start: a line of at most
/// [`MARK_CHARS`] characters on the baseline of one of the few lines before it, just left of it.
fn attach_marks(lines: Vec<(Vec<WordAcc>, bool)>) -> Vec<(Vec<WordAcc>, bool)> {
    let mut out: Vec<(Vec<WordAcc>, bool)> = Vec::with_capacity(lines.len());
    for (words, para) in lines {
        let chars: usize = words.iter().map(|w| w.chars).sum();
        let (Some(first), Some(last)) = (words.first(), words.last()) else {
            continue;
        };
        let host = (chars <= MARK_CHARS)
            .then(|| {
                let from = out.len().saturating_sub(MARK_LOOKBACK);
                (from..out.len()).rev().find(|&k| {
                    let Some(h) = out[k].0.first() else {
                        return false;
                    };
                    let size = h.size.max(first.size);
                    (h.baseline - first.baseline).abs() < 0.3 * size
                        && last.bbox.x1 <= h.bbox.x0 + 0.1 * size
                        && h.bbox.x0 - last.bbox.x1 < 4.0 * size
                })
            })
            .flatten();
        match host {
            Some(k) => {
                let host = &mut out[k].0;
                let mut words = words;
                words.append(host);
                *host = words;
            }
            None => out.push((words, para)),
        }
    }
    out
}

/// Groups glyphs, in drawing order, into words, lines and paragraphs.
fn layout(glyphs: &[Glyph1]) -> TextLayer {
    let mut layer = TextLayer::default();
    let mut lines: Vec<(Vec<WordAcc>, bool)> = Vec::new(); // (words, starts a paragraph)
    let mut line: Vec<WordAcc> = Vec::new();
    let mut word: Option<WordAcc> = None;
    let mut prev: Option<&Glyph1> = None;
    let mut para_start = true;
    let flush_word = |word: &mut Option<WordAcc>, line: &mut Vec<WordAcc>| {
        if let Some(w) = word.take()
            && !w.text.is_empty()
        {
            line.push(w);
        }
    };
    for g in glyphs {
        for c in g.text.chars().filter(|c| !c.is_whitespace()) {
            if illegible(c) {
                layer.illegible += 1;
            } else {
                layer.legible += 1;
            }
        }
        let (mut new_line, mut new_word, mut new_para) = (prev.is_none(), false, false);
        let mut attach = false;
        if let Some(p) = prev {
            let size = p.size().max(g.size());
            let dir = p.dir();
            let normal = Vec2::new(-dir.y, dir.x);
            let offset = g.origin - (p.origin + p.advance);
            let across = offset.dot(normal);
            let along = offset.dot(dir);
            if across.abs() > 0.5 * size || along < -size {
                new_line = true;
                // The baseline moved down (image y grows downwards) by more than 1.6 sizes.
                let drop = (g.origin - p.origin).dot(-p.up / p.size());
                new_para = drop.abs() > 1.6 * size;
            } else if along > WORD_GAP * size {
                new_word = true;
            } else if let Some(w) = &word {
                // A change of size or baseline inside a word (a footnote's mark set against
                // its word): a word of its own, attached to the one before.
                let up = g.up / g.size();
                let lift = g.origin.to_vec2().dot(up) - w.baseline;
                let ratio = g.size() / p.size();
                if !(0.87..=1.15).contains(&ratio) || lift.abs() > 0.15 * p.size() {
                    flush_word(&mut word, &mut line);
                    attach = true;
                }
            }
        }
        if new_line {
            flush_word(&mut word, &mut line);
            if !line.is_empty() {
                lines.push((std::mem::take(&mut line), para_start));
                para_start = new_para;
            }
        } else if new_word {
            flush_word(&mut word, &mut line);
        }
        prev = Some(g);
        if g.text.chars().all(char::is_whitespace) {
            flush_word(&mut word, &mut line);
            continue;
        }
        match &mut word {
            Some(w) => w.push(g),
            None => {
                let mut w = WordAcc::new(g);
                w.attached = attach;
                word = Some(w);
            }
        }
    }
    flush_word(&mut word, &mut line);
    if !line.is_empty() {
        lines.push((line, para_start));
    }
    let lines = attach_marks(lines);
    for (i, (words, para)) in lines.into_iter().enumerate() {
        if i > 0 {
            layer.text.push_str(if para { "\n\n" } else { "\n" });
        }
        let line = Line {
            spans: line_spans(&words),
            gap_above: para && i > 0,
        };
        layer.text.push_str(&line.text());
        layer.words.extend(words.iter().map(WordAcc::word));
        layer.layout.lines.push(line);
    }
    layer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_links_a_reader_may_follow_are_kept() {
        assert!(safe_scheme("https://example.org/a"));
        assert!(safe_scheme("mailto:someone@example.org"));
        for bad in [
            "javascript:alert(1)",
            " JAVASCRIPT:x",
            "data:text/html,x",
            "file:///etc/passwd",
            "",
        ] {
            assert!(!safe_scheme(bad), "{bad}");
        }
    }

    /// A glyph of `text` at `(x, y)`, 10 px high, 6 px advance, upright.
    fn g(text: &str, x: f64, y: f64) -> Glyph1 {
        Glyph1 {
            text: text.into(),
            origin: Point::new(x, y),
            advance: Vec2::new(6.0, 0.0),
            up: Vec2::new(0.0, -10.0),
            style: Style::default(),
        }
    }

    #[test]
    fn glyphs_become_words_lines_and_paragraphs() {
        let mut glyphs = Vec::new();
        for (i, c) in "ab".chars().enumerate() {
            glyphs.push(g(&c.to_string(), 10.0 + 6.0 * i as f64, 20.0));
        }
        // No space glyph, a gap of 4 px (0.4 size): a new word.
        glyphs.push(g("c", 26.0, 20.0));
        glyphs.push(g(" ", 32.0, 20.0));
        glyphs.push(g("d", 38.0, 20.0));
        // Next line, 12 px down.
        glyphs.push(g("e", 10.0, 32.0));
        // A paragraph: 30 px down.
        glyphs.push(g("f", 10.0, 62.0));
        let layer = layout(&glyphs);
        assert_eq!(layer.text, "ab c d\ne\n\nf");
        assert_eq!(layer.words.len(), 5);
        assert_eq!(
            layer.words[0],
            Word {
                text: "ab".into(),
                x: 10,
                y: 12,
                w: 12,
                h: 10
            }
        );
        assert_eq!((layer.legible, layer.illegible), (6, 0));
    }

    #[test]
    fn usability_needs_enough_legible_characters_for_the_page() {
        let a4 = 8.27 * 11.69;
        let layer = |legible, illegible, page_sq_inches| TextLayer {
            legible,
            illegible,
            page_sq_inches,
            ..TextLayer::default()
        };
        assert!(layer(400, 3, a4).is_usable());
        assert!(
            !layer(12, 0, a4).is_usable(),
            "a page number is not a text layer"
        );
        assert!(!layer(400, 100, a4).is_usable(), "undecodable fonts");
        assert!(
            !layer(300, 0, 33.1 * 46.8).is_usable(),
            "too thin for an A0 page"
        );
        assert!(!layer(0, 0, a4).is_usable());
    }
}
