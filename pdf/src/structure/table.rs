//! Tables on a page, two ways, as pdfplumber finds them:
//!
//! - **Lattice**: ruling lines that touch each other make a grid; its vertical lines are the
//!   columns, its horizontal lines the rows (or each line of text when only the frame is
//!   ruled). Rows of horizontal rules alone (rules between rows, or a top, header and bottom
//!   rule) make the rows, and the columns come from the text as below.
//! - **Text**: a run of at least three lines (two at the page's top: the rest of a table from
//!   the page before), each with a gap of at least 0.8 font size between two of its words,
//!   whose words leave the same vertical strips empty on every line: the strips separate the
//!   columns. A run whose first column holds only list markers is a list.
//!
//! The first row is the header. A word belongs to the cell its middle falls in.

use std::collections::HashSet;

use crate::layout::{Line, Rule, Span};

/// A table found on a page.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// Indices of the page's lines it is made of, in order.
    pub lines: Vec<usize>,
    /// The first row.
    pub header: Vec<String>,
    /// The other rows.
    pub rows: Vec<Vec<String>>,
}

/// How close (pixels) two rules may be and still touch or line up.
const SNAP: f32 = 3.0;
/// Most lines a ruled grid's cell may wrap to: more between two rules, and the rules are a
/// frame or a header's, the rows the lines.
const MAX_WRAPPED_LINES: usize = 4;
/// Most columns of a table (a page ruled more finely is a figure).
pub const MAX_COLUMNS: usize = 64;
/// Most rows of a table on one page.
pub const MAX_ROWS: usize = 1024;

/// The tables among `lines`, ordered by their first line.
pub fn find(lines: &[&Line], rules: &[Rule], body: f32) -> Vec<Found> {
    let mut out = lattice(lines, rules, body);
    let taken: HashSet<usize> = out.iter().flat_map(|f| f.lines.clone()).collect();
    out.extend(text_tables(lines, &taken, body));
    out.sort_by_key(|f| f.lines.first().copied().unwrap_or(usize::MAX));
    out
}

/// A horizontal (`horizontal`) or vertical rule as a segment: its position across, and its
/// extent along.
#[derive(Debug, Clone, Copy)]
struct Seg {
    at: f32,
    from: f32,
    to: f32,
}

/// Rules merged into segments: one direction's, sorted, collinear touching pieces joined.
fn segments(rules: &[Rule], horizontal: bool) -> Vec<Seg> {
    let mut segs: Vec<Seg> = rules
        .iter()
        .filter(|r| r.is_horizontal() == horizontal)
        .map(|r| {
            if horizontal {
                Seg {
                    at: (r.y0 + r.y1) / 2.0,
                    from: r.x0,
                    to: r.x1,
                }
            } else {
                Seg {
                    at: (r.x0 + r.x1) / 2.0,
                    from: r.y0,
                    to: r.y1,
                }
            }
        })
        .collect();
    segs.sort_by(|a, b| a.at.total_cmp(&b.at).then(a.from.total_cmp(&b.from)));
    let mut out: Vec<Seg> = Vec::new();
    for s in segs {
        if let Some(last) = out.last_mut()
            && (last.at - s.at).abs() <= SNAP
            && s.from <= last.to + SNAP
        {
            last.to = last.to.max(s.to);
            continue;
        }
        out.push(s);
    }
    out
}

/// Positions closer than [`SNAP`] as one, sorted.
fn cluster(mut v: Vec<f32>) -> Vec<f32> {
    v.sort_by(f32::total_cmp);
    let mut out: Vec<f32> = Vec::new();
    for x in v {
        if out.last().is_none_or(|l| x - l > SNAP) {
            out.push(x);
        }
    }
    out
}

/// Tables from ruling lines.
fn lattice(lines: &[&Line], rules: &[Rule], body: f32) -> Vec<Found> {
    let hs = segments(rules, true);
    let vs = segments(rules, false);
    // Groups of rules that touch: union-find over horizontals then verticals.
    let n = hs.len() + vs.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut touched = vec![false; hs.len()];
    for (i, h) in hs.iter().enumerate() {
        for (j, v) in vs.iter().enumerate() {
            let touch = v.at >= h.from - SNAP
                && v.at <= h.to + SNAP
                && h.at >= v.from - SNAP
                && h.at <= v.to + SNAP;
            if touch {
                touched[i] = true;
                let (a, b) = (root(&mut parent, i), root(&mut parent, hs.len() + j));
                parent[a] = b;
            }
        }
    }
    // Horizontal rules alone (no vertical one touches them), stacked with the same extent and
    // only rows of cells between them (every line with a wide gap), are one group too: rules
    // between rows, or a top, a header and a bottom rule.
    let rows_between = |top: f32, bottom: f32| {
        let between: Vec<&&Line> = lines
            .iter()
            .filter(|l| {
                let cy = (l.y0() + l.y1()) / 2.0;
                cy > top && cy < bottom
            })
            .collect();
        !between.is_empty() && between.iter().all(|l| wide_gaps(l) >= 1)
    };
    let same_extent = |a: &Seg, b: &Seg| {
        (a.from - b.from).abs() <= 4.0 * SNAP && (a.to - b.to).abs() <= 4.0 * SNAP
    };
    for i in 0..hs.len() {
        // The next rule down with the same extent (sorted by height).
        let Some(j) = (i + 1..hs.len()).find(|&j| same_extent(&hs[i], &hs[j])) else {
            continue;
        };
        if !touched[i] && !touched[j] && rows_between(hs[i].at, hs[j].at) {
            let (ra, rb) = (root(&mut parent, i), root(&mut parent, j));
            parent[ra] = rb;
        }
    }
    let mut groups: std::collections::HashMap<usize, (Vec<Seg>, Vec<Seg>)> = Default::default();
    for i in 0..n {
        let r = root(&mut parent, i);
        let g = groups.entry(r).or_default();
        if i < hs.len() {
            g.0.push(hs[i]);
        } else {
            g.1.push(vs[i - hs.len()]);
        }
    }
    let mut out = Vec::new();
    for (h, v) in groups.into_values() {
        if h.len() < 2 {
            continue;
        }
        let ys = cluster(h.iter().map(|s| s.at).collect());
        let (Some(&top), Some(&bottom)) = (ys.first(), ys.last()) else {
            continue;
        };
        let left = h.iter().map(|s| s.from).fold(f32::INFINITY, f32::min);
        let right = h.iter().map(|s| s.to).fold(f32::NEG_INFINITY, f32::max);
        let inside: Vec<usize> = (0..lines.len())
            .filter(|&i| {
                let l = lines[i];
                let cy = (l.y0() + l.y1()) / 2.0;
                cy > top && cy < bottom && l.x0() >= left - SNAP && l.x1() <= right + SNAP
            })
            .collect();
        if inside.len() < 2 {
            continue;
        }
        let mut xs = cluster(v.iter().map(|s| s.at).collect());
        let grid_ruled = xs.len() >= 3;
        if !grid_ruled {
            // No inner vertical rule: the columns are the text's.
            let ls: Vec<&Line> = inside.iter().map(|&i| lines[i]).collect();
            match columns(&ls, body) {
                Some(cols) if cols.len() >= 2 => {
                    xs = std::iter::once(left)
                        .chain(cols.windows(2).map(|w| (w[0].1 + w[1].0) / 2.0))
                        .chain(std::iter::once(right))
                        .collect();
                }
                _ => continue,
            }
        }
        // Rows: between horizontal rules where each holds one line at most, or a few in a
        // ruled grid (a cell may wrap); else (a frame, a top, a header and a bottom rule) one
        // row per line of text.
        let per_row: Vec<usize> = ys
            .windows(2)
            .map(|w| {
                inside
                    .iter()
                    .filter(|&&i| {
                        let cy = (lines[i].y0() + lines[i].y1()) / 2.0;
                        cy > w[0] && cy < w[1]
                    })
                    .count()
            })
            .collect();
        let most = per_row.iter().copied().max().unwrap_or(0);
        let ruled_rows = most <= 1 || (grid_ruled && most <= MAX_WRAPPED_LINES);
        let row_edges: Vec<f32> = if ys.len() >= 3 && ruled_rows {
            ys.clone()
        } else {
            let mut e = vec![top];
            e.extend(
                inside
                    .windows(2)
                    .map(|w| (lines[w[0]].y1() + lines[w[1]].y0()) / 2.0),
            );
            e.push(bottom);
            e
        };
        if xs.len() > MAX_COLUMNS + 1 || row_edges.len() > MAX_ROWS + 1 {
            continue;
        }
        let spans: Vec<&Span> = inside.iter().flat_map(|&i| &lines[i].spans).collect();
        if let Some((header, rows)) = grid(&spans, &xs, &row_edges) {
            out.push(Found {
                lines: inside,
                header,
                rows,
            });
        }
    }
    out
}

/// The cells of a grid (`xs`: column edges, `ys`: row edges), empty rows dropped; `None` when
/// fewer than two columns or two rows hold text.
fn grid(spans: &[&Span], xs: &[f32], ys: &[f32]) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let (cols, rows) = (xs.len().checked_sub(1)?, ys.len().checked_sub(1)?);
    let mut cells = vec![vec![String::new(); cols]; rows];
    for s in spans {
        let (cx, cy) = ((s.x0 + s.x1) / 2.0, (s.y0 + s.y1) / 2.0);
        let c = xs.windows(2).position(|w| cx >= w[0] && cx < w[1]);
        let r = ys.windows(2).position(|w| cy >= w[0] && cy < w[1]);
        if let (Some(c), Some(r)) = (c, r) {
            let cell = &mut cells[r][c];
            if !cell.is_empty() && !s.attached {
                cell.push(' ');
            }
            cell.push_str(&s.text);
        }
    }
    cells.retain(|r| r.iter().any(|c| !c.is_empty()));
    let used = (0..cols)
        .filter(|&c| cells.iter().any(|r| !r[c].is_empty()))
        .count();
    if cells.len() < 2 || used < 2 {
        return None;
    }
    let header = cells.remove(0);
    Some((header, cells))
}

/// The columns of `lines`' words: strips of x that some word covers, separated by strips that
/// no word of any line covers and at least 0.8 font size wide. `None` when any line is empty.
fn columns(lines: &[&Line], body: f32) -> Option<Vec<(f32, f32)>> {
    let mut spans: Vec<(f32, f32)> = lines
        .iter()
        .flat_map(|l| l.spans.iter().map(|s| (s.x0, s.x1)))
        .collect();
    if spans.is_empty() {
        return None;
    }
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f32, f32)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a - last.1 < 0.8 * body => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    Some(out)
}

/// Gaps in `line` of at least 0.8 of its font size.
fn wide_gaps(line: &Line) -> usize {
    let size = line.size();
    line.spans
        .windows(2)
        .filter(|w| w[1].x0 - w[0].x1 >= 0.8 * size)
        .count()
}

/// Tables from aligned words, among lines not `taken`.
fn text_tables(lines: &[&Line], taken: &HashSet<usize>, body: f32) -> Vec<Found> {
    // A heading's number set apart from its title ("2.3   Attributes") is no row.
    let candidate = |i: usize| {
        !taken.contains(&i)
            && wide_gaps(lines[i]) >= 1
            && lines[i].share(|s| s.mono) < 0.5
            && lines[i].size() <= 1.1 * body
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !candidate(i) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < lines.len() && candidate(j) && lines[j].y0() > lines[j - 1].y0() {
            j += 1;
        }
        if let Some(found) = text_table(lines, i, j, body) {
            out.push(found);
        }
        i = j;
    }
    out
}

fn text_table(lines: &[&Line], from: usize, to: usize, body: f32) -> Option<Found> {
    // Three rows at least; two at a page's top (a table carried over, its header repeated).
    if to - from < 3 && !(from == 0 && to - from == 2) {
        return None;
    }
    let run: Vec<&Line> = lines[from..to].to_vec();
    let cols = columns(&run, body)?;
    if cols.len() < 2 || cols.len() > MAX_COLUMNS || run.len() > MAX_ROWS {
        return None;
    }
    let markers = run.iter().all(|l| {
        l.spans.first().is_some_and(|s| {
            let t = s.text.trim_end_matches(['.', ')']);
            s.x1 <= cols[0].1 + SNAP
                && (t.chars().all(|c| c.is_ascii_digit()) || "•◦▪-–*·●".contains(t))
        })
    });
    if markers && cols.len() == 2 {
        return None;
    }
    let xs: Vec<f32> = std::iter::once(cols[0].0 - 1.0)
        .chain(cols.windows(2).map(|w| (w[0].1 + w[1].0) / 2.0))
        .chain(std::iter::once(cols[cols.len() - 1].1 + 1.0))
        .collect();
    let mut ys = vec![run[0].y0() - 1.0];
    ys.extend(run.windows(2).map(|w| (w[0].y1() + w[1].y0()) / 2.0));
    ys.push(run[run.len() - 1].y1() + 1.0);
    let spans: Vec<&Span> = run.iter().flat_map(|l| &l.spans).collect();
    let (header, rows) = grid(&spans, &xs, &ys)?;
    Some(Found {
        lines: (from..to).collect(),
        header,
        rows,
    })
}
