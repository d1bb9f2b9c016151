//! Text cut into overlapping token windows for embedding (512 tokens, 120 overlap by default).
//!
//! Tokens are whitespace-separated words: a conservative stand-in for a model tokenizer (a
//! subword tokenizer yields more tokens than words, so pick `size` below the model's context).
//! Each chunk keeps the text between its first and last token verbatim.

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
