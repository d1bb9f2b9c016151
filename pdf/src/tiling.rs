//! Cutting large page images into overlapping tiles, and joining the tiles' text back into the
//! page's text without the overlap's duplicates.
//!
//! Two joins are provided:
//! - [`merge_tile_words`], exact, for readers that return word boxes (Tesseract): each word is
//!   kept only by the tile that *owns* its centre — the overlap band between two neighbouring
//!   tiles is split at its middle — then the page's words are laid out again in reading order.
//! - [`merge_tile_texts`], for readers that return plain text (vision models): consecutive
//!   fragments are joined after removing the longest run of words that ends one fragment and
//!   starts the next.

use serde::{Deserialize, Serialize};

pub use crate::reading::Word;

/// Tiling settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileConfig {
    /// Tile side in pixels. Default 512.
    pub tile_size: u32,
    /// Overlap between neighbouring tiles in pixels. Default 120.
    pub overlap: u32,
    /// A page image whose encoded size is above this many bytes is tiled. Default 4 MB.
    pub threshold_bytes: u64,
}

impl Default for TileConfig {
    fn default() -> Self {
        Self {
            tile_size: 512,
            overlap: 120,
            threshold_bytes: 4 * 1024 * 1024,
        }
    }
}

/// A rectangle in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rect {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
}

/// One tile of a page: its rectangle and the part of it this tile owns for de-duplication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tile {
    /// Index in row-major order, from 0.
    pub index: u32,
    /// Row, from 0.
    pub row: u32,
    /// Column, from 0.
    pub col: u32,
    /// Pixels of the page covered by this tile.
    pub rect: Rect,
    /// Pixels of the page whose words this tile keeps (the tiles' owned areas partition the
    /// page: overlaps are split at their middle).
    pub owned: Rect,
}

/// Start offsets of tiles along one axis of `len` pixels.
fn starts(len: u32, size: u32, overlap: u32) -> Vec<u32> {
    if len <= size {
        return vec![0];
    }
    let stride = size.saturating_sub(overlap).max(1);
    let mut out = Vec::new();
    let mut s = 0u32;
    loop {
        if s + size >= len {
            out.push(len - size);
            break;
        }
        out.push(s);
        s += stride;
    }
    out.dedup();
    out
}

/// Owned intervals along one axis: each boundary sits at the middle of the overlap.
fn owned(starts: &[u32], size: u32, len: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(starts.len());
    for (i, &s) in starts.iter().enumerate() {
        let begin = if i == 0 {
            0
        } else {
            let prev_end = (starts[i - 1] + size).min(len);
            (s + prev_end) / 2
        };
        let end = if i + 1 == starts.len() {
            len
        } else {
            let my_end = (s + size).min(len);
            (starts[i + 1] + my_end) / 2
        };
        out.push((begin, end));
    }
    out
}

/// Tiles covering a `width` × `height` image, row-major.
pub fn tile_grid(width: u32, height: u32, config: &TileConfig) -> Vec<Tile> {
    let size = config.tile_size.max(1);
    let xs = starts(width, size, config.overlap);
    let ys = starts(height, size, config.overlap);
    let ox = owned(&xs, size, width);
    let oy = owned(&ys, size, height);
    let mut tiles = Vec::with_capacity(xs.len() * ys.len());
    for (row, (&y, &(oy0, oy1))) in ys.iter().zip(&oy).enumerate() {
        for (col, (&x, &(ox0, ox1))) in xs.iter().zip(&ox).enumerate() {
            tiles.push(Tile {
                index: u32::try_from(tiles.len()).unwrap_or(u32::MAX),
                row: row as u32,
                col: col as u32,
                rect: Rect {
                    x,
                    y,
                    w: size.min(width - x),
                    h: size.min(height - y),
                },
                owned: Rect {
                    x: ox0,
                    y: oy0,
                    w: ox1 - ox0,
                    h: oy1 - oy0,
                },
            });
        }
    }
    tiles
}

/// Crops a tile out of a page image.
pub fn crop(image: &image::RgbImage, rect: Rect) -> image::RgbImage {
    image::imageops::crop_imm(image, rect.x, rect.y, rect.w, rect.h).to_image()
}

/// Cuts every tile of `grid` out of `image` and encodes each as PNG (fast compression, `Sub`
/// filter: cheap and effective on rendered text).
pub fn cut_tiles(
    image: &image::RgbImage,
    grid: &[Tile],
) -> Result<Vec<Vec<u8>>, crate::render::RenderError> {
    grid.iter()
        .map(|t| {
            crate::render::encode_png_with(
                &crop(image, t.rect),
                image::codecs::png::CompressionType::Fast,
                image::codecs::png::FilterType::Sub,
            )
        })
        .collect()
}

/// Joins the words read from each tile into the page's text. `tiles[i].1` are the words of tile
/// `tiles[i].0` in that tile's own coordinates. A word is kept only by the tile owning its
/// centre, so a word read twice in an overlap appears once; words are then grouped into lines
/// (by vertical centre) and each line is ordered left to right.
pub fn merge_tile_words(tiles: &[(Tile, Vec<Word>)]) -> String {
    let mut words: Vec<Word> = Vec::new();
    for (tile, ws) in tiles {
        for w in ws {
            let page = Word {
                x: w.x + tile.rect.x,
                y: w.y + tile.rect.y,
                ..w.clone()
            };
            let cx = page.x + page.w / 2;
            let cy = page.y + page.h / 2;
            let o = tile.owned;
            if cx >= o.x && cx < o.x + o.w && cy >= o.y && cy < o.y + o.h {
                words.push(page);
            }
        }
    }
    layout_words(words)
}

/// Lays words out as text: lines by vertical centre, left to right within a line.
pub fn layout_words(mut words: Vec<Word>) -> String {
    words.sort_by_key(|w| (w.y + w.h / 2, w.x));
    let mut lines: Vec<(u32, u32, Vec<Word>)> = Vec::new(); // (centre, height, words)
    for w in words {
        let cy = w.y + w.h / 2;
        match lines.last_mut() {
            Some((lcy, lh, ws)) if cy.abs_diff(*lcy) <= (*lh).max(w.h) / 2 => {
                ws.push(w);
                let _ = lcy;
            }
            _ => lines.push((cy, w.h.max(1), vec![w])),
        }
    }
    let mut out = String::new();
    for (_, _, mut ws) in lines {
        ws.sort_by_key(|w| w.x);
        let line: Vec<&str> = ws.iter().map(|w| w.text.as_str()).collect();
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&line.join(" "));
    }
    out
}

/// Joins plain-text fragments in order, removing from each fragment the longest prefix of words
/// (at least `min_words`) that repeats the end of the text so far.
pub fn merge_tile_texts(fragments: &[String], min_words: usize) -> String {
    let mut acc: Vec<&str> = Vec::new();
    for frag in fragments {
        let words: Vec<&str> = frag.split_whitespace().collect();
        let max = acc.len().min(words.len());
        let mut cut = 0;
        for k in (min_words.max(1)..=max).rev() {
            if acc[acc.len() - k..] == words[..k] {
                cut = k;
                break;
            }
        }
        acc.extend_from_slice(&words[cut..]);
    }
    acc.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_covers_and_partitions() {
        let c = TileConfig::default();
        let tiles = tile_grid(1240, 1755, &c);
        // 1240: starts 0, 392, 728 -> 3 columns; 1755: 0, 392, 784, 1176, 1243 -> 5 rows.
        assert_eq!(tiles.iter().filter(|t| t.row == 0).count(), 3);
        assert_eq!(tiles.iter().filter(|t| t.col == 0).count(), 5);
        let mut owned_area = 0u64;
        for t in &tiles {
            assert!(t.rect.w == 512 && t.rect.h == 512);
            assert!(t.owned.x >= t.rect.x && t.owned.x + t.owned.w <= t.rect.x + t.rect.w);
            owned_area += u64::from(t.owned.w) * u64::from(t.owned.h);
        }
        assert_eq!(owned_area, 1240 * 1755);
        assert_eq!(tile_grid(300, 200, &c).len(), 1);
    }

    #[test]
    fn words_in_overlap_counted_once() {
        let c = TileConfig {
            tile_size: 100,
            overlap: 40,
            threshold_bytes: 0,
        };
        let tiles = tile_grid(160, 50, &c);
        assert_eq!(tiles.len(), 2); // x = 0 and 60
        let w = |t: &str, x: u32| Word {
            text: t.into(),
            x,
            y: 10,
            w: 10,
            h: 10,
        };
        // Page words: "a"@5, "b"@70 (overlap 60..100), "c"@140.
        let left = vec![w("a", 5), w("b", 70)];
        let right = vec![w("b", 10), w("c", 80)];
        let text = merge_tile_words(&[(tiles[0], left), (tiles[1], right)]);
        assert_eq!(text, "a b c");
    }

    #[test]
    fn text_overlap_removed() {
        let f = vec![
            "the quick brown fox".to_string(),
            "brown fox jumps over".to_string(),
        ];
        assert_eq!(merge_tile_texts(&f, 2), "the quick brown fox jumps over");
        let g = vec!["a b".to_string(), "c d".to_string()];
        assert_eq!(merge_tile_texts(&g, 1), "a b c d");
    }
}
