//! How close a Markdown rendering of a PDF is to the Markdown the PDF was made from: the scorer
//! of the layout engine against the ground-truth corpus (`pdf/tests/corpus/`).
//!
//! Both documents are parsed by the same CommonMark parser (pulldown-cmark, with GFM tables and
//! footnotes), so that a difference in spelling of the same structure (`*` or `-` bullets, a
//! fenced or an indented code block, aligned or ragged table pipes) is no difference at all. From
//! each document [`score`] takes:
//!
//! - its **plain text**: every text run in document order, with the markup gone (heading hashes,
//!   list markers, emphasis, code fences, table pipes and separator rows, link targets, footnote
//!   reference markers, raw HTML such as `<!-- page 3 -->`), block boundaries as spaces and
//!   whitespace collapsed to single spaces; case is kept;
//! - its **headings** as (level, text), **list items** (each item's own text, without its nested
//!   items), **code blocks**, **tables** (rows of cells, the header row first), and its
//!   **blocks**: paragraphs outside lists and list items, in order, for the reading order.
//!
//! Every text compared is *normalised*: markup removed as above, whitespace collapsed, trimmed.
//!
//! ```
//! use horos_testkit::markdown_score::score;
//!
//! let truth = "# Title\n\nOne paragraph.\n\n- an item\n";
//! let output = "# Title\n\n<!-- page 1 -->\nOne paragraph.\n\n* an item\n";
//! let s = score(truth, output);
//! assert_eq!(s.text_similarity, 1.0);
//! assert_eq!(s.list_item.f1(), 1.0);
//! ```

use std::collections::HashMap;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// What [`score`] measured of one output against its truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// 1 − the normalised character edit distance between both plain texts: the Levenshtein
    /// distance (insertions, deletions, substitutions of Unicode scalar values, each costing 1)
    /// divided by the longer text's length in characters; 1.0 for two empty texts. Computed
    /// exactly, with Myers' bit-vector algorithm in Hyyrö's blocked form (O(n·m/64) time, O(m)
    /// memory): a 20 KB × 20 KB pair takes well under a second in a debug build, where the
    /// two-row dynamic programme it is tested against would take seconds.
    pub text_similarity: f64,
    /// Headings as a multiset of (level, normalised text): a heading at another level misses.
    pub heading: F1,
    /// List items (ordered or not, any depth) as a multiset of their own normalised text.
    pub list_item: F1,
    /// Code blocks, one-to-one, greedily: each truth block in order takes the unmatched output
    /// block most similar to it, when that similarity (as [`Scores::text_similarity`], over the
    /// whitespace-collapsed code) is at least [`CODE_MATCH`].
    pub code_block: F1,
    /// Table cells as (row, column, normalised text), the header row being row 0, empty cells
    /// left out. Each truth table in document order is paired with the unpaired output table
    /// sharing the most cells with it; a table's cells count as found, and match, only through
    /// its pair (an unpaired output table's cells are all found and none matched).
    pub table_cell: F1,
    /// Adjacent pairs of located truth blocks whose positions in the output are inverted. The
    /// truth's blocks (paragraphs outside lists, and list items, in order) are each located in
    /// the output's plain text by their first [`PROBE_WORDS`] words: the position of the best
    /// approximate match, when its edit distance is at most a quarter of the probe's length.
    /// Blocks not located are left out (they already lower the text similarity); two blocks
    /// swapped count one error.
    pub reading_order_errors: usize,
}

/// Matches of one kind of element between the truth and the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct F1 {
    /// Elements in the truth.
    pub truth: usize,
    /// Elements in the output.
    pub found: usize,
    /// Elements of the output matched to one of the truth, one-to-one.
    pub matched: usize,
}

impl F1 {
    /// Matched over found; 1.0 when nothing was found (nothing found is nothing wrong).
    pub fn precision(&self) -> f64 {
        ratio(self.matched, self.found)
    }

    /// Matched over truth; 1.0 when the truth has none.
    pub fn recall(&self) -> f64 {
        ratio(self.matched, self.truth)
    }

    /// The harmonic mean of precision and recall: 1.0 when both sides are empty, 0.0 when
    /// nothing matched.
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }

    fn is_empty(&self) -> bool {
        self.truth == 0 && self.found == 0
    }
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        1.0
    } else {
        part as f64 / whole as f64
    }
}

/// The least similarity at which two code blocks match.
pub const CODE_MATCH: f64 = 0.9;

/// How many leading words of a truth block locate it in the output.
pub const PROBE_WORDS: usize = 8;

/// Scores `output` (a layout engine's Markdown) against `truth` (the Markdown the PDF was made
/// from). See [`Scores`] for each figure.
pub fn score(truth: &str, output: &str) -> Scores {
    let truth = Parsed::from(truth);
    let output = Parsed::from(output);
    let truth_plain: Vec<char> = truth.plain.chars().collect();
    let output_plain: Vec<char> = output.plain.chars().collect();
    Scores {
        text_similarity: similarity(&truth_plain, &output_plain),
        heading: multiset_f1(&truth.headings, &output.headings),
        list_item: multiset_f1(&truth.list_items, &output.list_items),
        code_block: code_f1(&truth.code_blocks, &output.code_blocks),
        table_cell: table_f1(&truth.tables, &output.tables),
        reading_order_errors: reading_order_errors(&truth.blocks, &output_plain),
    }
}

/// A Markdown table of `rows` (a name, its scores): the text similarity, each F1 with its
/// matched / truth / found counts, and the reading-order errors. An F1 with nothing on either
/// side shows as `-`.
pub fn scores_table(rows: &[(&str, &Scores)]) -> String {
    let mut out = String::from(
        "| document | text | headings | list items | code blocks | table cells | order errors |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, s) in rows {
        let f1s = [s.heading, s.list_item, s.code_block, s.table_cell].map(|f| {
            if f.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.3} ({}/{}/{})", f.f1(), f.matched, f.truth, f.found)
            }
        });
        out.push_str(&format!(
            "| {name} | {:.3} | {} | {} | {} | {} | {} |\n",
            s.text_similarity, f1s[0], f1s[1], f1s[2], f1s[3], s.reading_order_errors
        ));
    }
    out
}

/// What the scores read of one document.
#[derive(Debug, Default)]
struct Parsed {
    plain: String,
    headings: Vec<(u8, String)>,
    list_items: Vec<String>,
    code_blocks: Vec<String>,
    tables: Vec<Vec<Vec<String>>>,
    blocks: Vec<String>,
}

/// The element whose text a run belongs to, innermost last.
enum Open {
    Heading(u8, String),
    Item(usize, String),
    Paragraph(String),
    Code(String),
    Cell(String),
}

impl Parsed {
    fn from(markdown: &str) -> Parsed {
        let mut doc = Parsed::default();
        let mut open: Vec<Open> = Vec::new();
        let mut html = 0usize;
        let options = Options::ENABLE_TABLES | Options::ENABLE_FOOTNOTES;
        for event in Parser::new_ext(markdown, options) {
            match event {
                Event::Start(tag) => doc.start(tag, &mut open, &mut html),
                Event::End(tag) => doc.end(tag, &mut open, &mut html),
                Event::Text(text) | Event::Code(text) if html == 0 => doc.text(&text, &mut open),
                Event::SoftBreak | Event::HardBreak => doc.text(" ", &mut open),
                // Raw HTML (page comments among it), footnote markers, rules: no text.
                _ => {}
            }
        }
        doc.plain = collapse(&doc.plain);
        doc
    }

    fn start(&mut self, tag: Tag, open: &mut Vec<Open>, html: &mut usize) {
        if !matches!(
            tag,
            Tag::Emphasis | Tag::Strong | Tag::Strikethrough | Tag::Link { .. } | Tag::Image { .. }
        ) {
            // A block boundary separates words; an inline one does not.
            self.plain.push(' ');
        }
        match tag {
            Tag::Heading { level, .. } => open.push(Open::Heading(level as u8, String::new())),
            Tag::Item => {
                // The block's place is its start: its nested items come after it.
                self.blocks.push(String::new());
                open.push(Open::Item(self.blocks.len() - 1, String::new()));
            }
            Tag::Paragraph if !open.iter().any(|o| matches!(o, Open::Item(..))) => {
                open.push(Open::Paragraph(String::new()));
            }
            Tag::CodeBlock(_) => open.push(Open::Code(String::new())),
            Tag::Table(_) => self.tables.push(Vec::new()),
            Tag::TableHead | Tag::TableRow => {
                if let Some(table) = self.tables.last_mut() {
                    table.push(Vec::new());
                }
            }
            Tag::TableCell => open.push(Open::Cell(String::new())),
            Tag::HtmlBlock => *html += 1,
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd, open: &mut Vec<Open>, html: &mut usize) {
        if !matches!(
            tag,
            TagEnd::Emphasis
                | TagEnd::Strong
                | TagEnd::Strikethrough
                | TagEnd::Link
                | TagEnd::Image
        ) {
            self.plain.push(' ');
        }
        let closes = match tag {
            TagEnd::Heading(_) => matches!(open.last(), Some(Open::Heading(..))),
            TagEnd::Item => matches!(open.last(), Some(Open::Item(..))),
            TagEnd::Paragraph => matches!(open.last(), Some(Open::Paragraph(_))),
            TagEnd::CodeBlock => matches!(open.last(), Some(Open::Code(_))),
            TagEnd::TableCell => matches!(open.last(), Some(Open::Cell(_))),
            TagEnd::HtmlBlock => {
                *html = html.saturating_sub(1);
                false
            }
            _ => false,
        };
        if !closes {
            return;
        }
        match open.pop() {
            Some(Open::Heading(level, text)) => self.headings.push((level, collapse(&text))),
            Some(Open::Item(at, text)) => {
                let text = collapse(&text);
                self.blocks[at].clone_from(&text);
                self.list_items.push(text);
            }
            Some(Open::Paragraph(text)) => self.blocks.push(collapse(&text)),
            Some(Open::Code(text)) => self.code_blocks.push(collapse(&text)),
            Some(Open::Cell(text)) => {
                if let Some(row) = self.tables.last_mut().and_then(|t| t.last_mut()) {
                    row.push(collapse(&text));
                }
            }
            None => {}
        }
    }

    fn text(&mut self, text: &str, open: &mut [Open]) {
        self.plain.push_str(text);
        if let Some(
            Open::Heading(_, into)
            | Open::Item(_, into)
            | Open::Paragraph(into)
            | Open::Code(into)
            | Open::Cell(into),
        ) = open.last_mut()
        {
            into.push_str(text);
        }
    }
}

/// `text` with every run of whitespace as one space, trimmed.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn multiset_f1<T: std::hash::Hash + Eq>(truth: &[T], found: &[T]) -> F1 {
    let mut counts: HashMap<&T, usize> = HashMap::new();
    for t in truth {
        *counts.entry(t).or_default() += 1;
    }
    let mut matched = 0;
    for f in found {
        if let Some(n) = counts.get_mut(f).filter(|n| **n > 0) {
            *n -= 1;
            matched += 1;
        }
    }
    F1 {
        truth: truth.len(),
        found: found.len(),
        matched,
    }
}

fn code_f1(truth: &[String], found: &[String]) -> F1 {
    let found_chars: Vec<Vec<char>> = found.iter().map(|f| f.chars().collect()).collect();
    let mut taken = vec![false; found.len()];
    let mut matched = 0;
    for t in truth {
        let t: Vec<char> = t.chars().collect();
        let best = found_chars
            .iter()
            .enumerate()
            .filter(|(i, _)| !taken[*i])
            .map(|(i, f)| (i, similarity(&t, f)))
            .filter(|(_, s)| *s >= CODE_MATCH)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, _)) = best {
            taken[i] = true;
            matched += 1;
        }
    }
    F1 {
        truth: truth.len(),
        found: found.len(),
        matched,
    }
}

type Cell = (usize, usize, String);

/// A table's non-empty cells as (row, column, text).
fn cells(table: &[Vec<String>]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (r, row) in table.iter().enumerate() {
        for (c, text) in row.iter().enumerate() {
            if !text.is_empty() {
                cells.push((r, c, text.clone()));
            }
        }
    }
    cells
}

fn table_f1(truth: &[Vec<Vec<String>>], found: &[Vec<Vec<String>>]) -> F1 {
    let truth: Vec<Vec<Cell>> = truth.iter().map(|t| cells(t)).collect();
    let found: Vec<Vec<Cell>> = found.iter().map(|t| cells(t)).collect();
    let mut paired = vec![false; found.len()];
    let mut matched = 0;
    for t in &truth {
        let best = found
            .iter()
            .enumerate()
            .filter(|(i, _)| !paired[*i])
            .map(|(i, f)| (i, multiset_f1(t, f).matched))
            .filter(|(_, m)| *m > 0)
            // The first of equals: document order breaks ties.
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
        if let Some((i, m)) = best {
            paired[i] = true;
            matched += m;
        }
    }
    F1 {
        truth: truth.iter().map(Vec::len).sum(),
        found: found.iter().map(Vec::len).sum(),
        matched,
    }
}

fn reading_order_errors(blocks: &[String], output: &[char]) -> usize {
    let located: Vec<usize> = blocks
        .iter()
        .filter_map(|block| {
            let probe: Vec<char> = block
                .split(' ')
                .take(PROBE_WORDS)
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .collect();
            if probe.is_empty() {
                return None;
            }
            let (distance, end) = edit_distance(&probe, output, Anchor::Anywhere);
            (distance * 4 <= probe.len()).then(|| (end + 1).saturating_sub(probe.len()))
        })
        .collect();
    located.windows(2).filter(|w| w[1] < w[0]).count()
}

/// 1 − the edit distance over the longer length; 1.0 for two empty texts.
fn similarity(a: &[char], b: &[char]) -> f64 {
    let longer = a.len().max(b.len());
    if longer == 0 {
        return 1.0;
    }
    let (distance, _) = if a.len() <= b.len() {
        edit_distance(a, b, Anchor::Whole)
    } else {
        edit_distance(b, a, Anchor::Whole)
    };
    1.0 - distance as f64 / longer as f64
}

/// Where `pattern` must sit in `text`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// Both whole: the Levenshtein distance.
    Whole,
    /// Anywhere in `text`: the least distance to any substring of it.
    Anywhere,
}

/// The edit distance between `pattern` and `text` (whole, or its best substring) and the index
/// in `text` of the last character of the first best alignment (`text.len()` − 1 when whole).
///
/// Myers' bit-vector algorithm in blocks of 64 pattern characters (H. Hyyrö, "A bit-vector
/// algorithm for computing Levenshtein and Damerau edit distances", 2003; the block step as in
/// edlib): each text character advances every block's column of vertical deltas at once. The
/// top row of the matrix is 0, 1, 2, … for a whole alignment (a horizontal delta of +1 enters
/// the first block) and all zeroes for a substring search (0 enters).
fn edit_distance(pattern: &[char], text: &[char], anchor: Anchor) -> (usize, usize) {
    let m = pattern.len();
    if m == 0 {
        return match anchor {
            Anchor::Whole => (text.len(), text.len().saturating_sub(1)),
            Anchor::Anywhere => (0, 0),
        };
    }
    let blocks = m.div_ceil(64);
    // Per distinct pattern character, its positions as bits; text characters not in the
    // pattern use the zero row.
    let mut index: HashMap<char, usize> = HashMap::new();
    let mut peq: Vec<u64> = vec![0; blocks];
    for (i, c) in pattern.iter().enumerate() {
        let row = *index.entry(*c).or_insert_with(|| {
            peq.extend(std::iter::repeat_n(0, blocks));
            peq.len() / blocks - 1
        });
        peq[row * blocks + i / 64] |= 1 << (i % 64);
    }
    let last_bit = 1u64 << ((m - 1) % 64);
    let mut pv = vec![u64::MAX; blocks];
    let mut mv = vec![0u64; blocks];
    let mut score = m;
    let mut best = (usize::MAX, 0);
    for (j, c) in text.iter().enumerate() {
        let row = index.get(c).map_or(0, |r| *r) * blocks;
        let mut h_in: i8 = if anchor == Anchor::Whole { 1 } else { 0 };
        for b in 0..blocks {
            let (h_out, last) = block_step(&mut pv[b], &mut mv[b], peq[row + b], h_in, last_bit);
            if b == blocks - 1 {
                score = score.saturating_add_signed(last as isize);
            }
            h_in = h_out;
        }
        if anchor == Anchor::Anywhere && score < best.0 {
            best = (score, j);
        }
    }
    match anchor {
        Anchor::Whole => (score, text.len().saturating_sub(1)),
        Anchor::Anywhere if text.is_empty() => (m, 0),
        Anchor::Anywhere => best,
    }
}

/// One text character through one block: updates the block's vertical deltas (`pv`: +1 bits,
/// `mv`: −1 bits) given the horizontal delta `h_in` entering at its top, and answers the delta
/// leaving at its bottom and the one at `last_bit` (the pattern's last row, in the last block).
fn block_step(pv: &mut u64, mv: &mut u64, eq: u64, h_in: i8, last_bit: u64) -> (i8, i8) {
    let (p, m) = (*pv, *mv);
    let xv = eq | m;
    let eq = if h_in < 0 { eq | 1 } else { eq };
    let xh = ((eq & p).wrapping_add(p) ^ p) | eq;
    let ph = m | !(xh | p);
    let mh = p & xh;
    let delta = |bit: u64| -> i8 {
        if ph & bit != 0 {
            1
        } else if mh & bit != 0 {
            -1
        } else {
            0
        }
    };
    let (h_out, last) = (delta(1 << 63), delta(last_bit));
    let mut ph = ph << 1;
    let mut mh = mh << 1;
    if h_in < 0 {
        mh |= 1;
    } else if h_in > 0 {
        ph |= 1;
    }
    *pv = mh | !(xv | ph);
    *mv = ph & xv;
    (h_out, last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::XorShift;

    const DOC: &str = "<!-- corpus: justify -->\n# Durable queues\n\n\
        A queue looks simple until the first machine reboots in the middle of a batch, and \
        then *every* assumption about who owns which job becomes **visible**.\n\n\
        ## Visibility timeouts\n\n\
        A claimed job is not deleted; it becomes invisible until a deadline[^1], and see \
        [the manual](https://example.org/wal.html).\n\n\
        ### Dead letters\n\n\
        Some jobs fail every time and must be counted.\n\n\
        - A consumer killed while holding a batch.\n    - The jobs reappear.\n\
        - Two consumers racing.\n\n\
        1. First step\n2. Second step\n\n\
        ```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\n\
        | Key | Type | Default |\n|---|---|---|\n| threads | integer | 4 |\n| language | string | eng |\n\n\
        [^1]: Measured on a monotonic clock.\n";

    /// The two-row dynamic programme, the reference of the bit-vector algorithm.
    fn levenshtein_dp(a: &[char], b: &[char]) -> usize {
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        let mut cur = vec![0; b.len() + 1];
        for (i, ca) in a.iter().enumerate() {
            cur[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let sub = prev[j] + usize::from(ca != cb);
                cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
            }
            std::mem::swap(&mut prev, &mut cur);
        }
        prev[b.len()]
    }

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn markdown_score_bit_vectors_agree_with_the_dynamic_programme() {
        let mut rng = XorShift::new(7);
        let alphabet = chars("ab c\u{e9}");
        for round in 0..400 {
            // Lengths around and across the 64-character blocks.
            let (la, lb) = (rng.below(200) as usize, rng.below(200) as usize);
            let a: Vec<char> = (0..la).map(|_| *rng.pick(&alphabet)).collect();
            let b: Vec<char> = (0..lb).map(|_| *rng.pick(&alphabet)).collect();
            let want = levenshtein_dp(&a, &b);
            assert_eq!(
                edit_distance(&a, &b, Anchor::Whole).0,
                want,
                "round {round}"
            );
            assert_eq!(
                edit_distance(&b, &a, Anchor::Whole).0,
                want,
                "round {round}"
            );
        }
        assert_eq!(
            edit_distance(&chars("kitten"), &chars("sitting"), Anchor::Whole).0,
            3
        );
        let (d, end) = edit_distance(
            &chars("needle"),
            &chars("a haystack needl here"),
            Anchor::Anywhere,
        );
        assert_eq!((d, end), (1, 15));
    }

    #[test]
    fn markdown_score_identical_documents_score_one_everywhere() {
        let s = score(DOC, DOC);
        assert_eq!(s.text_similarity, 1.0);
        for f in [s.heading, s.list_item, s.code_block, s.table_cell] {
            assert_eq!(f.f1(), 1.0, "{s:?}");
            assert!(f.truth > 0, "{s:?}");
        }
        assert_eq!(s.heading.truth, 3);
        assert_eq!(s.list_item.truth, 5);
        assert_eq!(s.table_cell.truth, 9);
        assert_eq!(s.reading_order_errors, 0);
        assert_eq!(score("", "").heading.f1(), 1.0);
    }

    #[test]
    fn markdown_score_plain_text_drops_the_markup() {
        let plain = Parsed::from(DOC).plain;
        assert!(
            plain.starts_with("Durable queues A queue looks simple"),
            "{plain}"
        );
        assert!(plain.contains("then every assumption"), "{plain}");
        assert!(
            plain.contains("until a deadline, and see the manual."),
            "{plain}"
        );
        assert!(
            plain.contains("Key Type Default threads integer 4"),
            "{plain}"
        );
        assert!(plain.ends_with("Measured on a monotonic clock."), "{plain}");
        for markup in ["#", "*", "|", "---", "```", "https", "[^1]", "<!--"] {
            assert!(!plain.contains(markup), "{markup} in {plain}");
        }
    }

    #[test]
    fn markdown_score_a_heading_at_the_wrong_level_misses() {
        let s = score(DOC, &DOC.replace("### Dead letters", "## Dead letters"));
        assert_eq!(
            s.heading,
            F1 {
                truth: 3,
                found: 3,
                matched: 2
            }
        );
        assert!(s.text_similarity == 1.0);
    }

    #[test]
    fn markdown_score_a_list_written_as_plain_lines_misses() {
        let truth = "Steps:\n\n- unpack the archive\n- run the installer\n- restart\n";
        let output = "Steps:\n\nunpack the archive\nrun the installer\nrestart\n";
        let s = score(truth, output);
        assert_eq!(
            s.list_item,
            F1 {
                truth: 3,
                found: 0,
                matched: 0
            }
        );
        assert_eq!(s.list_item.f1(), 0.0);
        assert!(s.text_similarity > 0.99, "{s:?}");
    }

    #[test]
    fn markdown_score_a_swapped_pair_of_paragraphs_is_one_reading_order_error() {
        let paragraphs = [
            "The first paragraph explains why a single file is enough for a queue.",
            "The second paragraph describes visibility timeouts and their deadlines.",
            "The third paragraph covers dead letters and what operators do with them.",
            "The fourth paragraph concludes with exactly once delivery in one commit.",
        ];
        let truth = paragraphs.join("\n\n");
        let swapped = [paragraphs[0], paragraphs[2], paragraphs[1], paragraphs[3]].join("\n\n");
        assert_eq!(score(&truth, &truth).reading_order_errors, 0);
        assert_eq!(score(&truth, &swapped).reading_order_errors, 1);
        // A paragraph missing from the output is not an order error.
        let missing = [paragraphs[0], paragraphs[1], paragraphs[3]].join("\n\n");
        assert_eq!(score(&truth, &missing).reading_order_errors, 0);
        // A hyphenated line end is located all the same.
        let hyphenated = truth
            .replace("explains", "ex- plains")
            .replace("describes", "de-\nscribes");
        assert_eq!(score(&truth, &hyphenated).reading_order_errors, 0);
    }

    #[test]
    fn markdown_score_a_table_missing_a_column_lowers_cell_recall() {
        let without_default = DOC
            .replace(
                "| Key | Type | Default |\n|---|---|---|",
                "| Key | Type |\n|---|---|",
            )
            .replace("| integer | 4 |", "| integer |")
            .replace("| string | eng |", "| string |");
        let s = score(DOC, &without_default);
        assert_eq!(
            s.table_cell,
            F1 {
                truth: 9,
                found: 6,
                matched: 6
            }
        );
        assert!(s.table_cell.recall() < 0.7 && s.table_cell.precision() == 1.0);
        // Unruled tables flattened into paragraphs are no table at all.
        let flattened = DOC.replace("|---|---|---|\n", "").replace('|', " ");
        assert_eq!(score(DOC, &flattened).table_cell.matched, 0);
    }

    #[test]
    fn markdown_score_page_comments_do_not_count_but_stray_page_numbers_do() {
        let truth = "# Title\n\nA paragraph long enough to be the body of a page.\n\n\
            Another paragraph on the second page of the document.\n";
        let commented = "<!-- page 1 -->\n# Title\n\nA paragraph long enough to be the body \
            of a page.\n\n<!-- page 2 -->\n\nAnother paragraph on the <!-- x --> second page \
            of the document.\n";
        assert_eq!(score(truth, commented).text_similarity, 1.0);
        let numbered = truth.replace("\n\nAnother", "\n\n1\n\nAnother");
        let s = score(truth, &numbered).text_similarity;
        assert!(s < 1.0 && s > 0.97, "{s}");
    }

    #[test]
    fn markdown_score_code_blocks_match_despite_small_differences() {
        let code = "```\nfor file in /etc/ingest/*.toml; do\n    ingest check --config \"$file\"\ndone\n```\n";
        let indented = "    for file in /etc/ingest/*.toml; do\n        ingest check --config \"$file\"\n    done\n";
        assert_eq!(score(code, indented).code_block.matched, 1);
        let mangled = "```\nfor f in x; do\n    echo\ndone\n```\n";
        assert_eq!(score(code, mangled).code_block.matched, 0);
    }

    #[test]
    fn markdown_score_twenty_kilobytes_are_quick_in_a_debug_build() {
        let mut rng = XorShift::new(11);
        let words = [
            "queue", "lease", "batch", "page", "layout", "column", "hyphen",
        ];
        let text: Vec<&str> = (0..3000).map(|_| *rng.pick(&words)).collect();
        let truth = text.join(" ");
        let output = text[100..].join(" ") + " " + &text[..100].join(" ");
        assert!(truth.len() > 18_000);
        let started = std::time::Instant::now();
        let s = score(&truth, &output);
        assert!(s.text_similarity > 0.9 && s.text_similarity < 1.0, "{s:?}");
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    }

    #[test]
    fn markdown_score_table_renders_every_row() {
        let s = score(DOC, DOC);
        let empty = score("plain", "plain");
        let table = scores_table(&[("durable-queues", &s), ("plain", &empty)]);
        assert_eq!(table.lines().count(), 4, "{table}");
        assert!(
            table.contains("| durable-queues | 1.000 | 1.000 (3/3/3) |"),
            "{table}"
        );
        assert!(
            table.contains("| plain | 1.000 | - | - | - | - | 0 |"),
            "{table}"
        );
    }
}
