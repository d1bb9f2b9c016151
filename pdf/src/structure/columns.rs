//! Two columns drawn across: some producers write a two-column page line by line from the left
//! margin to the right one, so that one line of the text layer holds a line of each column.
//! Such a page has a gutter: a strip of x that many lines leave empty with a wide gap, their
//! words on both sides prose. Its lines are cut at the gutter and read column by column: the
//! left column's lines, then the right's, within each band between lines that cross the gutter
//! (a title across both columns, a figure's caption).

use crate::layout::{Line, Span};

/// Fewest lines that must leave the gutter empty with a gap.
const MIN_SPLIT_LINES: usize = 6;
/// The share of the page's lines with two or more words that must leave it empty.
const MIN_SPLIT_SHARE: f32 = 0.3;
/// A gutter's gap is at least this many font sizes wide.
const GUTTER_GAP: f32 = 1.0;
/// Fewest words on each side, on average: prose, not a table's cells.
const MIN_WORDS_A_SIDE: f32 = 3.0;

/// The page's lines in reading order: `None` when they need no change (no gutter drawn across).
pub fn reorder(lines: &[&Line], body: f32) -> Option<Vec<Line>> {
    let x = gutter(lines, body)?;
    let mut out: Vec<Line> = Vec::with_capacity(lines.len() + lines.len() / 2);
    let (mut left, mut right): (Vec<Line>, Vec<Line>) = (Vec::new(), Vec::new());
    let flush = |out: &mut Vec<Line>, left: &mut Vec<Line>, right: &mut Vec<Line>| {
        for side in [left, right] {
            side.sort_by(|a, b| a.y0().total_cmp(&b.y0()));
            let mut prev: Option<(f32, f32)> = None;
            for mut l in side.drain(..) {
                // A paragraph's gap, measured within the column.
                if let Some((y0, size)) = prev {
                    l.gap_above = l.y0() - y0 > 1.6 * size.max(l.size());
                }
                prev = Some((l.y0(), l.size()));
                out.push(l);
            }
        }
    };
    for line in lines {
        if line.spans.iter().any(|s| s.x0 < x && s.x1 > x) {
            // Across the gutter: a band ends.
            flush(&mut out, &mut left, &mut right);
            out.push((*line).clone());
            continue;
        }
        let (l, r): (Vec<Span>, Vec<Span>) = line.spans.iter().cloned().partition(|s| s.x1 <= x);
        for (side, spans) in [(&mut left, l), (&mut right, r)] {
            if let Some(first) = spans.first() {
                let mut first = first.clone();
                first.attached = false;
                let mut spans = spans;
                spans[0] = first;
                side.push(Line {
                    spans,
                    gap_above: line.gap_above,
                });
            }
        }
    }
    flush(&mut out, &mut left, &mut right);
    Some(out)
}

/// The gutter's x: where most lines of two or more words have a gap of at least a font size,
/// with prose on both sides.
fn gutter(lines: &[&Line], body: f32) -> Option<f32> {
    let many: Vec<&&Line> = lines.iter().filter(|l| l.spans.len() >= 2).collect();
    // Each line's wide gaps.
    let gaps: Vec<Vec<(f32, f32)>> = many
        .iter()
        .map(|l| {
            let size = l.size().max(body * 0.5);
            l.spans
                .windows(2)
                .filter(|w| w[1].x0 - w[0].x1 >= GUTTER_GAP * size)
                .map(|w| (w[0].x1, w[1].x0))
                .collect()
        })
        .collect();
    let mut best: Option<(usize, f32)> = None;
    for (a, b) in gaps.iter().flatten() {
        let x = (a + b) / 2.0;
        let n = gaps
            .iter()
            .filter(|g| g.iter().any(|(a, b)| *a < x && x < *b))
            .count();
        if best.is_none_or(|(m, _)| n > m) {
            best = Some((n, x));
        }
    }
    let (n, x) = best?;
    if n < MIN_SPLIT_LINES || (n as f32) < MIN_SPLIT_SHARE * many.len() as f32 {
        return None;
    }
    // Prose on both sides of the lines it splits.
    let (mut words_left, mut words_right) = (0usize, 0usize);
    for (l, g) in many.iter().zip(&gaps) {
        if g.iter().any(|(a, b)| *a < x && x < *b) {
            words_left += l.spans.iter().filter(|s| s.x1 <= x).count();
            words_right += l.spans.iter().filter(|s| s.x0 >= x).count();
        }
    }
    let prose = |w: usize| w as f32 / n as f32 >= MIN_WORDS_A_SIDE;
    // Columns of a page are about as wide as each other; a table's columns seldom are.
    let left = many.iter().map(|l| l.x0()).fold(f32::INFINITY, f32::min);
    let right = many
        .iter()
        .map(|l| l.x1())
        .fold(f32::NEG_INFINITY, f32::max);
    let ratio = (x - left) / (right - x);
    let even = (0.7..=1.43).contains(&ratio);
    (prose(words_left) && prose(words_right) && even).then_some(x)
}
