//! Text cut into overlapping token windows for embedding (512 tokens, 120 overlap by default).
//!
//! A page whose structure is known (its text layer laid out: [`horos_pdf::structure`]) is cut by
//! it ([`chunk_blocks`]): a chunk never crosses a heading (each section, its heading first, is
//! windowed on its own), and a table is a chunk of its own with its header row (a table longer
//! than a window is cut between rows, each piece under the header again), so that a search hit
//! or an answer's citation points at a section or a table, not at a window across them.
//!
//! Tokens are whitespace-separated words: a conservative stand-in for a model tokenizer (a
//! subword tokenizer yields more tokens than words, so pick `size` below the model's context).
//! Each chunk keeps the text between its first and last token verbatim.

use horos_pdf::structure::{Block, markdown};
use serde::{Deserialize, Serialize};

/// Chunking settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkConfig {
    /// Tokens per chunk. Default 512.
    pub size: usize,
    /// Tokens shared by consecutive chunks. Default 120.
    pub overlap: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            size: 512,
            overlap: 120,
        }
    }
}

/// A chunk of text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Index from 0.
    pub index: u32,
    /// First token (inclusive).
    pub token_start: usize,
    /// Last token (exclusive).
    pub token_end: usize,
    /// The text from the first token's start to the last token's end.
    pub text: String,
}

/// Splits `text` into chunks of `size` tokens overlapping by `overlap` tokens. Empty text gives
/// no chunk; a text of at most `size` tokens gives one.
pub fn chunk_text(text: &str, config: &ChunkConfig) -> Vec<Chunk> {
    let spans = token_spans(text);
    let size = config.size.max(1);
    let stride = size.saturating_sub(config.overlap).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < spans.len() {
        let end = (start + size).min(spans.len());
        out.push(Chunk {
            index: u32::try_from(out.len()).unwrap_or(u32::MAX),
            token_start: start,
            token_end: end,
            text: text[spans[start].0..spans[end - 1].1].to_string(),
        });
        if end == spans.len() {
            break;
        }
        start += stride;
    }
    out
}

/// Splits a page's structured `blocks` into chunks (see the module's documentation); token
/// offsets count across the page's sections in order.
pub fn chunk_blocks(blocks: &[Block], config: &ChunkConfig) -> Vec<Chunk> {
    let mut pieces: Vec<String> = Vec::new();
    let mut section = String::new();
    let flush = |section: &mut String, pieces: &mut Vec<String>| {
        if !section.trim().is_empty() {
            pieces.push(std::mem::take(section));
        }
        section.clear();
    };
    for b in blocks {
        match b {
            Block::Heading { .. } => {
                flush(&mut section, &mut pieces);
                section.push_str(&markdown::block(b));
            }
            Block::Table { header, rows } => {
                flush(&mut section, &mut pieces);
                pieces.extend(table_pieces(header, rows, config.size.max(1)));
            }
            _ => {
                if !section.is_empty() {
                    section.push_str("\n\n");
                }
                section.push_str(&markdown::block(b));
            }
        }
    }
    flush(&mut section, &mut pieces);
    let mut out: Vec<Chunk> = Vec::new();
    let mut offset = 0;
    for piece in &pieces {
        let tokens = token_spans(piece).len();
        for mut c in chunk_text(piece, config) {
            c.index = u32::try_from(out.len()).unwrap_or(u32::MAX);
            c.token_start += offset;
            c.token_end += offset;
            out.push(c);
        }
        offset += tokens;
    }
    out
}

/// A table as Markdown, cut between rows into pieces of at most `size` tokens (a row longer
/// than that is a piece alone), each under the header row.
fn table_pieces(header: &[String], rows: &[Vec<String>], size: usize) -> Vec<String> {
    let md = |rows: &[Vec<String>]| {
        markdown::block(&Block::Table {
            header: header.to_vec(),
            rows: rows.to_vec(),
        })
    };
    let head_tokens = token_spans(&md(&[])).len();
    let mut out = Vec::new();
    let (mut from, mut tokens) = (0, head_tokens);
    for (i, row) in rows.iter().enumerate() {
        let n = token_spans(&md(std::slice::from_ref(row))).len() - head_tokens;
        if i > from && tokens + n > size {
            out.push(md(&rows[from..i]));
            (from, tokens) = (i, head_tokens);
        }
        tokens += n;
    }
    out.push(md(&rows[from..]));
    out
}

/// Byte spans of whitespace-separated tokens.
fn token_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                spans.push((s, i));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_sections_and_tables() {
        let para = |n: usize| Block::Paragraph {
            text: (0..n)
                .map(|i| format!("p{i}"))
                .collect::<Vec<_>>()
                .join(" "),
        };
        let blocks = vec![
            Block::Heading {
                level: 1,
                text: "Intro".into(),
            },
            para(5),
            Block::Heading {
                level: 2,
                text: "Sizes".into(),
            },
            para(3),
            Block::Table {
                header: vec!["a".into(), "b".into()],
                rows: (0..6)
                    .map(|i| vec![format!("x{i}"), format!("y{i}")])
                    .collect(),
            },
            para(2),
        ];
        let config = ChunkConfig {
            size: 30,
            overlap: 5,
        };
        let chunks = chunk_blocks(&blocks, &config);
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        // No chunk crosses a heading: each section alone, its heading first.
        assert!(
            texts[0].starts_with("# Intro\n\np0") && texts[0].ends_with("p4"),
            "{texts:?}"
        );
        assert_eq!(texts[1], "## Sizes\n\np0 p1 p2");
        // The table: cut between rows, each piece under its header.
        assert!(texts.len() >= 4, "{texts:?}");
        for t in &texts[2..texts.len() - 1] {
            assert!(t.starts_with("| a | b |\n| --- | --- |\n| x"), "{t}");
        }
        let rows: usize = texts[2..texts.len() - 1]
            .iter()
            .map(|t| t.lines().count() - 2)
            .sum();
        assert_eq!(rows, 6, "every row once");
        // What follows a table is a chunk of its own.
        assert_eq!(*texts.last().unwrap(), "p0 p1");
        // Token offsets run on across the page.
        assert!(
            chunks
                .windows(2)
                .all(|w| w[0].token_start < w[1].token_start)
        );
        assert_eq!(
            chunks.iter().map(|c| c.index).collect::<Vec<_>>(),
            (0..chunks.len() as u32).collect::<Vec<_>>()
        );
    }

    #[test]
    fn windows_overlap_by_config() {
        let text: Vec<String> = (0..1000).map(|i| format!("w{i}")).collect();
        let text = text.join(" ");
        let chunks = chunk_text(&text, &ChunkConfig::default());
        // starts 0, 392, 784 (784 + 512 >= 1000 ends)
        assert_eq!(chunks.len(), 3);
        assert_eq!((chunks[1].token_start, chunks[1].token_end), (392, 904));
        assert!(chunks[0].text.starts_with("w0 w1") && chunks[0].text.ends_with("w511"));
        assert!(chunks[1].text.starts_with("w392 "));
        assert!(chunks[2].text.ends_with("w999"));
        assert!(chunk_text("  \n ", &ChunkConfig::default()).is_empty());
        let one = chunk_text("héllo  wörld", &ChunkConfig::default());
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].text, "héllo  wörld");
    }
}
