//! Blocks written as Markdown (CommonMark with GFM tables and footnotes): `#` headings,
//! paragraphs with `**bold**`, `*italic*`, `` `code` ``, links and `[^1]` marks, `-` and `1.`
//! list items indented by their depth, fenced code, pipe tables, `[^1]:` footnotes.

use std::collections::HashSet;

use super::Block;
use crate::layout::{Link, Span};

/// A page's blocks as Markdown, separated by blank lines (consecutive list items by a newline).
pub fn page(blocks: &[Block]) -> String {
    let mut out = String::new();
    let mut prev_item = false;
    for b in blocks {
        let item = matches!(b, Block::ListItem { .. });
        if !out.is_empty() {
            out.push_str(if item && prev_item { "\n" } else { "\n\n" });
        }
        out.push_str(&block(b));
        prev_item = item;
    }
    out
}

/// One block as Markdown.
pub fn block(b: &Block) -> String {
    match b {
        Block::Heading { level, text } => {
            format!(
                "{} {}",
                "#".repeat(usize::from((*level).clamp(1, 6))),
                one_line(text)
            )
        }
        Block::Paragraph { text } => text.clone(),
        Block::ListItem {
            depth,
            number,
            text,
        } => {
            let indent = "   ".repeat(usize::from(*depth));
            match number {
                // A numbered list: CommonMark takes digits only; a letter or numeral stays a
                // bullet with its enumerator.
                Some(n) if n.chars().all(|c| c.is_ascii_digit()) => {
                    format!("{indent}{n}. {}", escape_start(text))
                }
                Some(n) => format!("{indent}- {n}. {}", escape_start(text)),
                None => format!("{indent}- {}", escape_start(text)),
            }
        }
        Block::Code { text } => {
            let fence = if text.contains("```") { "~~~~" } else { "```" };
            format!("{fence}\n{text}\n{fence}")
        }
        Block::Table { header, rows } => table(header, rows),
        // The rest of a footnote whose start was not found: its text.
        Block::Footnote { label, text } if label.is_empty() => escape_start(&one_line(text)),
        Block::Footnote { label, text } => format!("[^{label}]: {}", one_line(text)),
    }
}

/// A pipe table: the header, the separator, the rows, each as wide as the widest (cells made
/// one line, their pipes escaped).
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let width = rows
        .iter()
        .map(Vec::len)
        .fold(header.len(), usize::max)
        .max(1);
    let line = |cells: &[String]| {
        let mut cells: Vec<String> = cells.iter().map(|c| cell(c)).collect();
        cells.resize(width, String::new());
        format!("| {} |", cells.join(" | "))
    };
    let mut out = line(header);
    out.push('\n');
    out.push_str(&format!("|{}", " --- |".repeat(width)));
    for r in rows {
        out.push('\n');
        out.push_str(&line(r));
    }
    out
}

/// A cell: one line, pipes escaped.
fn cell(s: &str) -> String {
    one_line(s).replace('|', "\\|")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A paragraph's start that Markdown would read as a heading, quote, list item, table row or
/// fence, escaped so that it stays text.
pub fn escape_start(text: &str) -> String {
    let t = text.trim_start();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && (t[digits..].starts_with(". ") || t[digits..].starts_with(") ")) {
        return format!("{}\\{}", &t[..digits], &t[digits..]);
    }
    let marker = t.starts_with(['#', '>', '|', '=', '~'])
        || t.starts_with("```")
        || ["- ", "+ ", "* "].iter().any(|m| t.starts_with(m))
        || t == "-"
        || t.starts_with("---");
    if marker {
        format!("\\{t}")
    } else {
        t.to_owned()
    }
}

/// Text that Markdown would read as markup, escaped, and only that: `*` and `` ` `` always,
/// `_` unless inside a word (`XDG_DATA_HOME` stays), `<` before what could open a tag or an
/// autolink, `\` before punctuation, brackets where they could make a link or a footnote mark.
fn escape_inline(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let linkish = s.contains("](") || s.contains("][") || s.contains("[^") || s.contains("]:");
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
        let next = chars.get(i + 1).copied();
        let escape = match c {
            '*' | '`' => true,
            '_' => {
                !(prev.is_some_and(char::is_alphanumeric)
                    && next.is_some_and(char::is_alphanumeric))
            }
            '<' => next.is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')),
            '\\' => next.is_some_and(|n| n.is_ascii_punctuation()),
            '[' | ']' => linkish,
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A line's words as inline Markdown: runs in bold, italic or a monospaced font marked, a raised
/// mark that names one of `labels` written `[^label]`, words inside a link's area linked.
pub fn inline(spans: &[Span], labels: &HashSet<String>, links: &[Link]) -> String {
    let mut out = String::new();
    let mut k = 0;
    while k < spans.len() {
        let s = &spans[k];
        if k > 0 && !s.attached {
            out.push(' ');
        }
        if s.raised && labels.contains(s.text.trim()) {
            out.push_str(&format!("[^{}]", s.text.trim()));
            k += 1;
            continue;
        }
        // A run: the same style and the same link.
        let style = (s.bold, s.italic, s.mono);
        let link = link_of(s, links);
        let mut end = k + 1;
        while end < spans.len() {
            let t = &spans[end];
            if (t.bold, t.italic, t.mono) != style || link_of(t, links) != link || t.raised {
                break;
            }
            end += 1;
        }
        let mut run = String::new();
        for (n, t) in spans[k..end].iter().enumerate() {
            if n > 0 && !t.attached {
                run.push(' ');
            }
            run.push_str(&if style.2 {
                t.text.clone()
            } else {
                escape_inline(&t.text)
            });
        }
        let run = match style {
            (_, _, true) => {
                let tick = if run.contains('`') { "``" } else { "`" };
                format!("{tick}{run}{tick}")
            }
            (true, true, _) => format!("***{run}***"),
            (true, false, _) => format!("**{run}**"),
            (false, true, _) => format!("*{run}*"),
            _ => run,
        };
        match link {
            Some(uri) => out.push_str(&format!("[{run}](<{}>)", link_target(uri))),
            None => out.push_str(&run),
        }
        k = end;
    }
    out
}

/// A link's target as a Markdown destination in angle brackets: what would end it or break
/// the line (`<`, `>`, spaces, controls) percent-encoded.
fn link_target(uri: &str) -> String {
    let mut out = String::with_capacity(uri.len());
    for c in uri.chars() {
        if c == '<' || c == '>' || c.is_whitespace() || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The target of the link whose area holds the middle of `s`.
fn link_of<'a>(s: &Span, links: &'a [Link]) -> Option<&'a str> {
    let (x, y) = ((s.x0 + s.x1) / 2.0, (s.y0 + s.y1) / 2.0);
    links
        .iter()
        .find(|l| l.x0 <= x && x <= l.x1 && l.y0 <= y && y <= l.y1)
        .map(|l| l.uri.as_str())
}

/// Two links to one target next to each other (a link's words broken over two lines) made one:
/// `[a](<u>) [b](<u>)` → `[a b](<u>)`.
pub fn merge_links(text: &str) -> String {
    let mut out = text.to_owned();
    let mut from = 0;
    while let Some(at) = out[from..].find("](<").map(|i| i + from) {
        let Some(end) = out[at..].find(">)").map(|i| i + at) else {
            break;
        };
        let target = out[at + 3..end].to_owned();
        let rest = &out[end + 2..];
        // `[a](<u>) [b](<u>)`: the next link opens after one space and has the same target.
        if let Some(next) = rest.strip_prefix(" [")
            && let Some(close) = next.find("](<")
            && next[close + 3..].starts_with(&format!("{target}>)"))
            && !next[..close].contains('[')
        {
            out.replace_range(at..end + 4, " ");
            from = at;
            continue;
        }
        from = end + 2;
    }
    out
}
