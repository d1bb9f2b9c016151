//! Snippets of a page for a full-text hit on PostgreSQL, as SQLite's FTS5 `snippet` makes them:
//! a window of the page's words with the most query words in it, each marked `[...]`, in the
//! page's own text. `ts_headline` would read the text with PostgreSQL's parser, which keeps
//! `3.14` whole and `café` accented, and so mark nothing where the index found a match.

use super::fold::{MARKS, fold_diacritics};

/// A word of a query as the index holds it: folded and lower-cased; `prefix` for a `*` term.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct QueryWord {
    word: String,
    prefix: bool,
}

impl QueryWord {
    /// `word` as typed (any case, diacritics or not).
    pub(super) fn new(word: &str, prefix: bool) -> QueryWord {
        QueryWord {
            word: fold_diacritics(word).to_lowercase(),
            prefix,
        }
    }

    fn matches(&self, key: &str) -> bool {
        if self.prefix {
            key.starts_with(&self.word)
        } else {
            key == self.word
        }
    }
}

/// The words of `text` (letters and digits, with the combining marks that follow them) as byte
/// ranges.
fn words(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let in_word = c.is_alphanumeric() || (start.is_some() && MARKS.contains(&c));
        match (in_word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

/// The `max_words` consecutive words of `text` holding the most of `query` (the first such
/// window; the page's start when none holds one), in the page's text, each query word marked
/// `[` `]`, with `…` where the page goes on.
pub(super) fn highlight(text: &str, query: &[QueryWord], max_words: usize) -> String {
    let spans = words(text);
    if spans.is_empty() || max_words == 0 {
        return String::new();
    }
    let hit: Vec<bool> = spans
        .iter()
        .map(|&(s, e)| {
            let key = fold_diacritics(&text[s..e]).to_lowercase();
            query.iter().any(|q| q.matches(&key))
        })
        .collect();
    let width = max_words.min(spans.len());
    let mut count = hit[..width].iter().filter(|h| **h).count();
    let (mut best, mut best_count) = (0, count);
    for start in 1..=spans.len() - width {
        count = count + usize::from(hit[start + width - 1]) - usize::from(hit[start - 1]);
        if count > best_count {
            (best, best_count) = (start, count);
        }
    }
    let end = best + width;
    let mut out = String::new();
    if best > 0 {
        out.push('…');
    }
    // Marked words joined by punctuation alone are one mark (`[3.14]`, as FTS5 marks a phrase).
    let joined = |i: usize| {
        i > best
            && i < end
            && hit[i - 1]
            && hit[i]
            && !text[spans[i - 1].1..spans[i].0].contains(char::is_whitespace)
    };
    let mut at = spans[best].0;
    for i in best..end {
        let (s, e) = spans[i];
        out.push_str(&text[at..s]);
        if hit[i] && !joined(i) {
            out.push('[');
        }
        out.push_str(&text[s..e]);
        if hit[i] && !joined(i + 1) {
            out.push(']');
        }
        at = e;
    }
    if end < spans.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(words: &[&str]) -> Vec<QueryWord> {
        words
            .iter()
            .map(|w| match w.strip_suffix('*') {
                Some(w) => QueryWord::new(w, true),
                None => QueryWord::new(w, false),
            })
            .collect()
    }

    #[test]
    fn the_window_with_most_query_words_is_marked_in_the_pages_own_text() {
        let page = "Intro text here. Release 3.14 of example.com ships; see example.com again.";
        assert_eq!(
            highlight(page, &q(&["3", "14"]), 4),
            "…here. Release [3.14]…"
        );
        assert_eq!(
            highlight(page, &q(&["example", "com"]), 5),
            "…[example.com] ships; see [example]…"
        );
        // Folded and case-blind, prefixes too; the text keeps its accents and case.
        assert_eq!(
            highlight("Une crème brûlée au Café", &q(&["creme", "CAFE*"]), 12),
            "Une [crème] brûlée au [Café]"
        );
        assert_eq!(
            highlight("cafe\u{301} noir", &q(&["cafe"]), 12),
            "[cafe\u{301}] noir"
        );
        // No match: the page's start.
        assert_eq!(
            highlight("ask ops@mail.org, or mail us", &q(&["mail"]), 12),
            "ask ops@[mail].org, or [mail] us"
        );
        assert_eq!(
            highlight("3 14 and 3.14", &q(&["3", "14"]), 12),
            "[3] [14] and [3.14]"
        );
        assert_eq!(highlight("a b c d e", &q(&["zebra"]), 3), "a b c…");
        assert_eq!(highlight("", &q(&["zebra"]), 3), "");
        assert_eq!(highlight("?!", &q(&["zebra"]), 3), "");
    }
}
