//! The text layer of a born-digital page: the characters its content stream draws, with their
//! boxes, read with hayro's own interpreter (no second PDF library, the same parse as the
//! rendering), so such a page needs no OCR.
//!
//! Reading order is the content stream's: producers write a page's text in the order it is read
//! (column by column), which geometric sorting would break for multi-column pages. Glyphs are
//! grouped into words (a space, or a gap wider than a fifth of the font size) and lines (the
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
use hayro::hayro_interpret::kurbo::{Affine, BezPath, Point, Rect, Vec2};
use hayro::hayro_interpret::{BlendMode, util::TransformExt};
use hayro::hayro_interpret::{
    ClipPath, Context, Device, DrawMode, DrawProps, Image, ImageDrawProps, InterpreterCache,
    InterpreterSettings, SoftMask, interpret_page,
};
use hayro::hayro_syntax::page::Page;
use serde::{Deserialize, Serialize};

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
            ..Reading::default()
        }
    }
}

/// One drawn character: its text, baseline origin, advance and up vectors in pixels.
#[derive(Debug, Clone)]
struct Glyph1 {
    text: String,
    origin: Point,
    advance: Vec2,
    up: Vec2,
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

/// Collects the glyphs the interpreter draws.
#[derive(Default)]
struct Collector {
    glyphs: Vec<Glyph1>,
    /// `(first glyph index, count)` of the last run: a fill-and-stroke run is drawn twice.
    last_run: Option<(usize, usize)>,
}

impl<'a> Device<'a> for Collector {
    fn draw_path(&mut self, _: &BezPath, _: DrawProps<'a>, _: &DrawMode) {}
    fn push_clip_path(&mut self, _: &ClipPath) {}
    fn push_transparency_group(&mut self, _: f32, _: Option<SoftMask<'a>>, _: BlendMode) {}
    fn draw_image(&mut self, _: Image<'a, '_>, _: ImageDrawProps<'a>) {}
    fn pop_clip(&mut self) {}
    fn pop_transparency_group(&mut self) {}

    fn draw_glyph_run(&mut self, run: &GlyphRun<'_, 'a>, props: DrawProps<'a>, _: &DrawMode) {
        let start = self.glyphs.len();
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
    layer
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

/// A word being built: its text and box.
struct WordAcc {
    text: String,
    bbox: Rect,
}

impl WordAcc {
    fn into_word(self) -> Word {
        let px = |v: f64| v.max(0.0).round() as u32;
        Word {
            text: self.text,
            x: px(self.bbox.x0),
            y: px(self.bbox.y0),
            w: px(self.bbox.width()),
            h: px(self.bbox.height()),
        }
    }
}

/// Groups glyphs, in drawing order, into words, lines and paragraphs.
fn layout(glyphs: &[Glyph1]) -> TextLayer {
    let mut layer = TextLayer::default();
    let mut lines: Vec<(Vec<Word>, bool)> = Vec::new(); // (words, starts a paragraph)
    let mut line: Vec<Word> = Vec::new();
    let mut word: Option<WordAcc> = None;
    let mut prev: Option<&Glyph1> = None;
    let mut para_start = true;
    let flush_word = |word: &mut Option<WordAcc>, line: &mut Vec<Word>| {
        if let Some(w) = word.take()
            && !w.text.is_empty()
        {
            line.push(w.into_word());
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
            } else if along > 0.2 * size {
                new_word = true;
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
        let bbox = g.bbox();
        match &mut word {
            Some(w) => {
                w.text.push_str(&g.text);
                w.bbox = w.bbox.union(bbox);
            }
            None => {
                word = Some(WordAcc {
                    text: g.text.clone(),
                    bbox,
                })
            }
        }
    }
    flush_word(&mut word, &mut line);
    if !line.is_empty() {
        lines.push((line, para_start));
    }
    for (i, (words, para)) in lines.into_iter().enumerate() {
        if i > 0 {
            layer.text.push_str(if para { "\n\n" } else { "\n" });
        }
        let texts: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
        layer.text.push_str(&texts.join(" "));
        layer.words.extend(words);
    }
    layer
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A glyph of `text` at `(x, y)`, 10 px high, 6 px advance, upright.
    fn g(text: &str, x: f64, y: f64) -> Glyph1 {
        Glyph1 {
            text: text.into(),
            origin: Point::new(x, y),
            advance: Vec2::new(6.0, 0.0),
            up: Vec2::new(0.0, -10.0),
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
