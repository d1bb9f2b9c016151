//! One page's lines sorted into headings, paragraphs, list items, code, tables and footnotes
//! (see [`structure`](super) for the rules), before heading levels are known.

use std::collections::HashSet;

use super::markdown::{escape_start, inline, merge_links};
use super::table;
use super::{Block, DocumentStats, word_key};
use crate::layout::{Line, PageLayout};

/// A block before the document's heading levels are known.
#[derive(Debug, Clone, PartialEq)]
pub enum Draft {
    /// A heading in `size` pixels, bold or not.
    Heading {
        /// Font size in pixels.
        size: f32,
        /// Wholly bold.
        bold: bool,
        /// Its text.
        text: String,
    },
    /// Any other block, final already.
    Done(Block),
}

impl Draft {
    /// The block, its level taken from the document's heading styles.
    pub fn finish(self, stats: &DocumentStats) -> Block {
        match self {
            Draft::Heading { size, bold, text } => Block::Heading {
                level: stats.level(size, bold),
                text,
            },
            Draft::Done(b) => b,
        }
    }
}

/// What one line opens.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Heading,
    /// A list item: its enumerator (`None` for a bullet).
    Item(Option<String>),
    Code,
    /// A table of contents' entry: a title, dot leaders, a page number.
    Entry,
    Body,
}

/// Sizes within this share of each other are one size.
const SAME_SIZE: f32 = 0.1;

/// The marks of the footnotes among `lines` (a page's, furniture out).
pub fn footnote_labels(lines: &[&Line], stats: &DocumentStats) -> Vec<String> {
    let body = stats.body_size.max(1.0);
    let notes: Vec<&Line> = footnote_lines(lines, body, &stats.marks)
        .into_iter()
        .map(|i| lines[i])
        .collect();
    footnotes(&notes, stats)
        .into_iter()
        .map(|(label, _)| label)
        .collect()
}

/// Sorts `lines` (a page's, furniture out) into drafts.
pub fn draft(page: &PageLayout, lines: &[&Line], stats: &DocumentStats) -> Vec<Draft> {
    let body = if stats.body_size > 0.0 {
        stats.body_size
    } else {
        lines.first().map_or(10.0, |l| l.size())
    };
    let tables = table::find(lines, &page.rules, body);
    let in_table: HashSet<usize> = tables.iter().flat_map(|t| t.lines.clone()).collect();
    let note_lines = footnote_lines(lines, body, &stats.marks);
    let in_notes: HashSet<usize> = note_lines.iter().copied().collect();
    let notes = footnotes(
        &note_lines.iter().map(|&i| lines[i]).collect::<Vec<_>>(),
        stats,
    );
    let ctx = Ctx {
        lines,
        body,
        labels: &stats.labels,
    };
    let mut out = Vec::new();
    let mut list_stack: Vec<f32> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(t) = tables.iter().find(|t| t.lines.first() == Some(&i)) {
            out.push(Draft::Done(Block::Table {
                header: t.header.clone(),
                rows: t.rows.clone(),
            }));
            list_stack.clear();
            i += 1;
            continue;
        }
        if in_table.contains(&i) || in_notes.contains(&i) {
            i += 1;
            continue;
        }
        let line = lines[i];
        let kind = ctx.kind(line);
        let stop = |j: usize| j >= lines.len() || in_table.contains(&j) || in_notes.contains(&j);
        let mut j = i + 1;
        match kind {
            Kind::Code => {
                // Code goes on through a line or two between code lines that its font does
                // not call monospaced (a fallback font for a character, a short line whose
                // glyphs are too few to tell) when they sit at the code's indentation.
                let left = line.x0();
                let size = line.size();
                let fits = |l: &Line| {
                    !l.gap_above
                        && l.x0() >= left - 0.5 * body
                        && (l.size() - size).abs() <= SAME_SIZE * size
                };
                loop {
                    if !stop(j) && ctx.kind(lines[j]) == Kind::Code {
                        j += 1;
                        continue;
                    }
                    let bridge = (1..=2).find(|&k| {
                        (j..j + k).all(|m| !stop(m) && fits(lines[m]))
                            && !stop(j + k)
                            && ctx.kind(lines[j + k]) == Kind::Code
                    });
                    match bridge {
                        Some(k) => j += k,
                        None => break,
                    }
                }
                out.push(Draft::Done(Block::Code {
                    text: code_text(&lines[i..j]),
                }));
                list_stack.clear();
            }
            Kind::Heading => {
                let (size, bold) = (line.size(), line.share(|s| s.bold) >= 0.95);
                let mut text = line.text();
                while !stop(j)
                    && j - i < 3
                    && !lines[j].gap_above
                    && ctx.kind(lines[j]) == Kind::Heading
                    && (lines[j].size() - size).abs() <= SAME_SIZE * size
                    && (lines[j].share(|s| s.bold) >= 0.95) == bold
                {
                    text.push(' ');
                    text.push_str(&lines[j].text());
                    j += 1;
                }
                out.push(Draft::Heading { size, bold, text });
                list_stack.clear();
            }
            Kind::Item(number) => {
                let marker_x = line.x0();
                let text_x = line.spans.get(1).map_or(marker_x, |s| s.x0);
                while list_stack.last().is_some_and(|x| marker_x < x - 0.5 * body) {
                    list_stack.pop();
                }
                if list_stack.last().is_none_or(|x| marker_x > x + 0.5 * body) {
                    list_stack.push(marker_x);
                }
                let mut text = inline(&line.spans[1..], ctx.labels, &page.links);
                while !stop(j)
                    && !lines[j].gap_above
                    && ctx.kind(lines[j]) == Kind::Body
                    && (lines[j].x0() - text_x).abs() <= 1.0 * body
                {
                    text = join_lines(
                        &text,
                        &inline(&lines[j].spans, ctx.labels, &page.links),
                        stats,
                    );
                    j += 1;
                }
                out.push(Draft::Done(Block::ListItem {
                    depth: u8::try_from(list_stack.len().saturating_sub(1)).unwrap_or(u8::MAX),
                    number,
                    text,
                }));
            }
            Kind::Entry => {
                let text = escape_start(&inline(&line.spans, ctx.labels, &page.links));
                out.push(Draft::Done(Block::Paragraph {
                    text: collapse_leaders(&text),
                }));
                list_stack.clear();
            }
            Kind::Body => {
                let mut text = escape_start(&inline(&line.spans, ctx.labels, &page.links));
                let mut prev = line;
                while !stop(j) && !ctx.breaks(prev, lines[j]) {
                    text = join_lines(
                        &text,
                        &inline(&lines[j].spans, ctx.labels, &page.links),
                        stats,
                    );
                    prev = lines[j];
                    j += 1;
                }
                out.push(Draft::Done(Block::Paragraph {
                    text: merge_links(&text),
                }));
                list_stack.clear();
            }
        }
        i = j;
    }
    out.extend(
        notes
            .into_iter()
            .map(|(label, text)| Draft::Done(Block::Footnote { label, text })),
    );
    out
}

/// What the rules for one page read.
struct Ctx<'a> {
    lines: &'a [&'a Line],
    body: f32,
    labels: &'a HashSet<String>,
}

impl Ctx<'_> {
    fn kind(&self, line: &Line) -> Kind {
        if line.share(|s| s.mono) >= 0.8 {
            return Kind::Code;
        }
        let size = line.size();
        let words = line.spans.len();
        let text = line.text();
        let plain_end = !text.trim_end().ends_with(['.', ',', ';']);
        if is_contents_entry(&text) {
            return Kind::Entry;
        }
        if size >= 1.15 * self.body && words <= 20 && has_letters(&text) {
            return Kind::Heading;
        }
        // A little larger (TeX's \large over 11 pt is 1.09×) and standing alone: a heading too,
        // when its font says nothing of its weight (Type 1).
        if size >= 1.05 * self.body
            && line.gap_above
            && words <= 12
            && plain_end
            && has_letters(&text)
            && marker(line).is_none()
        {
            return Kind::Heading;
        }
        if let Some(number) = marker(line) {
            return Kind::Item(number);
        }
        if line.share(|s| s.bold) >= 0.95
            && words <= 12
            && plain_end
            && size >= 0.9 * self.body
            && has_letters(&text)
        {
            return Kind::Heading;
        }
        Kind::Body
    }

    /// The right edge of the text column `line` is in: the farthest right any line starting
    /// near it reaches.
    fn column_right(&self, line: &Line) -> f32 {
        let x0 = line.x0();
        let reach = 3.0 * self.body;
        // Code may run past the text's edge: it does not count.
        self.lines
            .iter()
            .filter(|l| (l.x0() - x0).abs() <= reach && l.share(|s| s.mono) < 0.8)
            .map(|l| l.x1())
            .fold(line.x1(), f32::max)
    }

    /// Whether `cur` starts a new block after `prev` in a paragraph.
    fn breaks(&self, prev: &Line, cur: &Line) -> bool {
        if self.kind(cur) != Kind::Body {
            // A list marker in the middle of running text is text, unless set apart.
            let item = matches!(self.kind(cur), Kind::Item(_));
            let apart = cur.gap_above
                || (cur.x0() - prev.x0()).abs() > 0.5 * self.body
                || self.stops_short(prev);
            if !item || apart {
                return true;
            }
        }
        let size = prev.size().max(1.0);
        if (cur.size() - prev.size()).abs() > SAME_SIZE * size {
            return true;
        }
        if cur.y1() < prev.y0() {
            // Up the page: the next column. Goes on unless the line before ended a sentence
            // short of its column's edge.
            return self.stops_short(prev);
        }
        if cur.gap_above {
            return true;
        }
        if self.stops_short(prev) {
            return true;
        }
        // A first line indented under a full line.
        let indent = cur.x0() - prev.x0();
        indent > 0.8 * size && indent < 4.0 * size
    }

    /// The line ends a sentence well short of its column's right edge.
    fn stops_short(&self, line: &Line) -> bool {
        let text = line.text();
        let ends = text.trim_end().ends_with(['.', '!', '?', ':']);
        ends && line.x1() < self.column_right(line) - 2.0 * self.body
    }
}

/// A table of contents' entry: at least four leader dots (`....` or `. . . .`) before a page
/// number at the line's end.
fn is_contents_entry(text: &str) -> bool {
    let t = text.trim_end();
    let body = t.trim_end_matches(|c: char| c.is_ascii_digit() || "ivxlc".contains(c));
    if body.len() == t.len() {
        return false;
    }
    let dots = body
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| *c == '.' || *c == ' ')
        .filter(|c| *c == '.')
        .count();
    dots >= 4
}

/// A contents entry's dot leaders (`.....`, `. . . .`) as one ` ... `.
fn collapse_leaders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.matches('.').count() >= 4 {
            out.push_str(" ... ");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c == '.' || (c == ' ' && !run.is_empty()) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn has_letters(text: &str) -> bool {
    text.chars().any(char::is_alphabetic)
}

/// A list item's marker, when `line` opens with one: `Some(None)` for a bullet,
/// `Some(Some("3"))` for an enumerator.
fn marker(line: &Line) -> Option<Option<String>> {
    let first = line.spans.first()?;
    line.spans.get(1)?;
    let t = first.text.as_str();
    const BULLETS: &[&str] = &[
        "•", "◦", "▪", "▫", "‣", "⁃", "●", "○", "■", "□", "–", "-", "*", "·", "∙", "➢", "►",
    ];
    if BULLETS.contains(&t) {
        return Some(None);
    }
    let inner = t.strip_prefix('(').unwrap_or(t);
    let body = inner.strip_suffix(['.', ')'])?;
    let numeric = !body.is_empty() && body.len() <= 3 && body.chars().all(|c| c.is_ascii_digit());
    let letter = body.len() == 1 && body.chars().all(|c| c.is_ascii_lowercase());
    let roman = !body.is_empty() && body.len() <= 5 && body.chars().all(|c| "ivxlc".contains(c));
    (numeric || letter || roman).then(|| Some(body.to_owned()))
}

/// The page's footnote lines: runs of smaller lines that end the page or their column (the
/// next line is higher up), from the first that opens with a mark and sits below the line
/// before it (a page of small lines only: when its first mark is one of `marks`, raised in the
/// document's text).
fn footnote_lines(lines: &[&Line], body: f32, marks: &HashSet<String>) -> Vec<usize> {
    let small = |l: &Line| l.size() < 0.9 * body && l.share(|s| s.mono) < 0.5;
    let mut out = Vec::new();
    let mut a = 0;
    while a < lines.len() {
        if !small(lines[a]) {
            a += 1;
            continue;
        }
        let mut b = a;
        while b < lines.len() && small(lines[b]) {
            b += 1;
        }
        let ends_column = b == lines.len() || lines[b].y1() < lines[a].y0();
        let first = if !ends_column {
            None
        } else if a == 0 {
            note_label(lines[0])
                .is_some_and(|l| marks.contains(&l))
                .then_some(0)
        } else {
            let above = lines[a - 1].y1();
            let labelled =
                (a..b).find(|&i| lines[i].y0() >= above && note_label(lines[i]).is_some());
            // A footnote carried over from the page before: a few small lines at a column's
            // foot, set apart from the text above, in a document with marks.
            let carried = !marks.is_empty()
                && b - a <= 6
                && lines[a].y0() >= above + 0.5 * body
                && note_label(lines[a]).is_none();
            labelled.or(carried.then_some(a))
        };
        if let Some(k) = first {
            out.extend(k..b);
        }
        a = b;
    }
    out
}

/// A footnote's mark at the start of `line`: a raised word, a number (with `.` or `)`), or a
/// symbol.
fn note_label(line: &Line) -> Option<String> {
    let first = line.spans.first()?;
    let t = first.text.trim_end_matches(['.', ')']);
    let symbol = matches!(t, "*" | "†" | "‡" | "§" | "¶");
    let number = !t.is_empty() && t.len() <= 3 && t.chars().all(|c| c.is_ascii_digit());
    ((first.raised || number || symbol) && line.spans.len() > 1).then(|| t.to_owned())
}

/// The footnotes in `lines` (label, text), their lines joined as a paragraph's.
fn footnotes(lines: &[&Line], stats: &DocumentStats) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for l in lines {
        match note_label(l) {
            Some(label) => {
                let text = Line {
                    spans: l.spans[1..].to_vec(),
                    gap_above: false,
                };
                out.push((label, text.text()));
            }
            None => match out.last_mut() {
                Some((_, text)) => *text = join_lines(text, &l.text(), stats),
                // The rest of a footnote from the page before (no mark: joined to it there).
                None => out.push((String::new(), l.text())),
            },
        }
    }
    out
}

/// Preformatted lines with their indentation and inner spacing, from the monospaced glyphs'
/// width.
fn code_text(lines: &[&Line]) -> String {
    let widths: Vec<f32> = lines
        .iter()
        .flat_map(|l| &l.spans)
        .filter(|s| s.text.chars().count() > 0)
        .map(|s| (s.x1 - s.x0) / s.text.chars().count() as f32)
        .collect();
    let mut sorted = widths.clone();
    sorted.sort_by(f32::total_cmp);
    let cw = sorted
        .get(sorted.len() / 2)
        .copied()
        .unwrap_or(6.0)
        .max(0.5);
    let left = lines.iter().map(|l| l.x0()).fold(f32::INFINITY, f32::min);
    let mut out = Vec::with_capacity(lines.len());
    // Spaces for a distance: at most a line's worth (a box far off the page adds no more).
    let spaces = |d: f32| ((d / cw).round().clamp(0.0, 200.0)) as usize;
    // The line pitch (the smallest step down between lines): a wider step is blank lines.
    let pitch = lines
        .windows(2)
        .map(|w| w[1].y0() - w[0].y0())
        .filter(|d| *d > 0.5 * lines.first().map_or(1.0, |l| l.size()))
        .fold(f32::INFINITY, f32::min);
    for (i, l) in lines.iter().enumerate() {
        if i > 0 && pitch.is_finite() {
            let step = l.y0() - lines[i - 1].y0();
            let blank = ((step / pitch).round() - 1.0).clamp(0.0, 3.0) as usize;
            out.extend(std::iter::repeat_n(String::new(), blank));
        }
        let mut s = " ".repeat(spaces(l.x0() - left));
        let mut end = l.x0();
        for (k, span) in l.spans.iter().enumerate() {
            if k > 0 {
                let gap = spaces(span.x0 - end).max(1);
                s.push_str(&" ".repeat(if span.attached { 0 } else { gap }));
            }
            s.push_str(&span.text);
            end = span.x1;
        }
        out.push(s);
    }
    out.join("\n")
}

/// Two lines of one paragraph joined: a hyphen at the first's end is dropped when the joined
/// word is seen elsewhere in the document, when the part before it is no word of the document,
/// or when it was a soft hyphen; kept (with no space) for a compound of two words of the
/// document; a space between lines otherwise.
pub fn join_lines(head: &str, tail: &str, stats: &DocumentStats) -> String {
    let head = head.trim_end();
    let tail = tail.trim_start();
    let soft = head.ends_with('\u{00AD}');
    let hyphen = soft || head.ends_with(['-', '\u{2010}']);
    let before = head.chars().rev().nth(1).is_some_and(char::is_alphabetic);
    let after = tail.chars().next().is_some_and(char::is_lowercase);
    if hyphen && before && after {
        let cut = head.len() - head.chars().next_back().map_or(0, char::len_utf8);
        let stem = &head[..cut];
        let frag = stem.rsplit(char::is_whitespace).next().unwrap_or("");
        let next = tail.split(char::is_whitespace).next().unwrap_or("");
        let joined = word_key(&format!("{frag}{next}"));
        let compound = stats.words.contains(&word_key(frag))
            && stats.words.contains(&word_key(next))
            || stats.words.contains(&word_key(&format!("{frag}-{next}")));
        if soft || stats.words.contains(&joined) || !compound {
            return format!("{stem}{tail}");
        }
        return format!("{head}{tail}");
    }
    if head.is_empty() {
        return tail.to_owned();
    }
    format!("{head} {tail}")
}
