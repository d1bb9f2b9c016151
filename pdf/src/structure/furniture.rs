//! Running headers, footers and page numbers: lines in a page's top or bottom eighth that come
//! back at the same height on other pages (their digits aside) — on two fifths of the pages, or
//! on two or more with a number that changes (a chapter's header with its page number) — or
//! that are only a page number.

use std::collections::HashMap;

use crate::layout::{Line, PageLayout};

/// The share of a page's height, at its top and at its bottom, where furniture is looked for.
pub const ZONE: f32 = 0.125;
/// How far apart (a share of the page's height) two lines may sit and still be one line come back.
const SAME_HEIGHT: f32 = 0.015;

/// The indices (into each page's lines) of its furniture.
pub fn find(pages: &[&PageLayout]) -> Vec<Vec<usize>> {
    // (zone, key) -> the pages and heights it was seen at.
    let mut seen: HashMap<(bool, String), Vec<(usize, f32)>> = HashMap::new();
    let mut candidates: Vec<Vec<(usize, bool, String, f32)>> = Vec::with_capacity(pages.len());
    // The texts seen under each key: a running header with a page number in it reads
    // differently on each page.
    let mut texts: HashMap<(bool, String), std::collections::HashSet<String>> = HashMap::new();
    for (p, page) in pages.iter().enumerate() {
        let mut here = Vec::new();
        for (i, line) in page.lines.iter().enumerate() {
            let Some(top) = zone(page, line) else {
                continue;
            };
            let key = key(&line.text());
            if key.is_empty() {
                continue;
            }
            let y = line.y0() / page.height.max(1.0);
            seen.entry((top, key.clone())).or_default().push((p, y));
            texts
                .entry((top, key.clone()))
                .or_default()
                .insert(line.text());
            here.push((i, top, key, y));
        }
        candidates.push(here);
    }
    let with_text = pages.iter().filter(|p| !p.lines.is_empty()).count();
    candidates
        .into_iter()
        .map(|here| {
            here.into_iter()
                .filter(|(_, top, key, y)| {
                    if is_page_number(key) {
                        return true;
                    }
                    let pages_at: Vec<usize> = seen
                        .get(&(*top, key.clone()))
                        .map(|v| {
                            let mut p: Vec<usize> = v
                                .iter()
                                .filter(|(_, y2)| (y - y2).abs() <= SAME_HEIGHT)
                                .map(|(p, _)| *p)
                                .collect();
                            p.dedup();
                            p
                        })
                        .unwrap_or_default();
                    let n = pages_at.len();
                    let numbered = key.contains('#')
                        && texts
                            .get(&(*top, key.clone()))
                            .is_some_and(|t| t.len() >= 2);
                    n >= 2 && ((n as f32) >= 0.4 * with_text as f32 || numbered)
                })
                .map(|(i, ..)| i)
                .collect()
        })
        .collect()
}

/// `Some(true)` for a line in the page's top zone, `Some(false)` in its bottom zone.
fn zone(page: &PageLayout, line: &Line) -> Option<bool> {
    let h = page.height;
    if h <= 0.0 {
        return None;
    }
    if line.y1() <= ZONE * h {
        Some(true)
    } else if line.y0() >= (1.0 - ZONE) * h {
        Some(false)
    } else {
        None
    }
}

/// A line's text with its digits as `#` and its spaces collapsed: a page's number aside, the
/// same running header on every page.
fn key(text: &str) -> String {
    let mut out = String::new();
    let mut prev_digit = false;
    for c in text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
    {
        if c.is_ascii_digit() {
            if !prev_digit {
                out.push('#');
            }
            prev_digit = true;
        } else {
            out.push(c);
            prev_digit = false;
        }
    }
    out.to_lowercase()
}

/// Only a page number: `#`, `- # -`, `page #`, `# of #`, `# / #`, or a roman numeral.
fn is_page_number(key: &str) -> bool {
    let k = key.trim_matches(|c: char| c == '-' || c == '–' || c.is_whitespace());
    matches!(
        k,
        "#" | "page #" | "# of #" | "#/#" | "# / #" | "page # of #"
    ) || (!k.is_empty() && k.len() <= 6 && k.chars().all(|c| "ivxlc".contains(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_page_numbers() {
        assert_eq!(key("Page  12 of 40"), "page # of #");
        assert!(is_page_number(&key("12")));
        assert!(is_page_number(&key("- 3 -")));
        assert!(is_page_number(&key("xii")));
        assert!(!is_page_number(&key("Introduction")));
        assert!(!is_page_number(&key("1. Scope")));
    }
}
