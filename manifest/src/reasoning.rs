//! Separating a model's reasoning from its answer: text between the opening and closing tags
//! (`<think>` and `</think>`) is reasoning, the rest is the answer. Text arrives in pieces (a
//! stream's deltas), so a tag cut between two pieces is held back until it is whole.

/// Splits text into (reasoning, answer) as it arrives.
#[derive(Debug, Clone)]
pub struct ThinkSplitter {
    open: String,
    close: String,
    inside: bool,
    /// Text held back: it may be the start of a tag.
    held: String,
    /// Whether the answer has started (whitespace right after `</think>` is dropped until then).
    answered: bool,
}

/// What a piece of text holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// Reasoning text.
    pub reasoning: String,
    /// Answer text.
    pub content: String,
}

/// The length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.get(..n).is_some_and(|p| text.ends_with(p))
        })
        .unwrap_or(0)
}

impl ThinkSplitter {
    /// A splitter for `open` … `close`; `inside`: the text starts inside the reasoning (the
    /// prompt ended with the opening tag). An empty tag is never found.
    pub fn new(open: &str, close: &str, inside: bool) -> Self {
        Self {
            open: open.to_owned(),
            close: close.to_owned(),
            inside,
            held: String::new(),
            answered: false,
        }
    }

    /// Takes the next piece of text; what can be told apart so far.
    pub fn push(&mut self, text: &str) -> Split {
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(text);
        let mut out = Split::default();
        let mut rest = buf.as_str();
        loop {
            let tag = if self.inside {
                self.close.clone()
            } else {
                self.open.clone()
            };
            // An empty tag is never found (it would match everywhere).
            match rest.find(tag.as_str()).filter(|_| !tag.is_empty()) {
                Some(i) => {
                    self.emit(&rest[..i], &mut out);
                    rest = &rest[i + tag.len()..];
                    self.inside = !self.inside;
                }
                None => {
                    let keep = partial_tag(rest, &tag);
                    let (now, later) = rest.split_at(rest.len() - keep);
                    self.emit(now, &mut out);
                    self.held = later.to_owned();
                    break;
                }
            }
        }
        out
    }

    /// The end of the text: whatever was held back.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        let mut out = Split::default();
        self.emit(&held, &mut out);
        out
    }

    fn emit(&mut self, text: &str, out: &mut Split) {
        if self.inside {
            out.reasoning.push_str(text);
        } else {
            let text = if self.answered {
                text
            } else {
                text.trim_start()
            };
            if !text.is_empty() {
                self.answered = true;
            }
            out.content.push_str(text);
        }
    }

    /// Splits a whole text at once: (reasoning, answer). The same as [`ThinkSplitter::push`]
    /// of the text in pieces cut anywhere, then [`ThinkSplitter::finish`].
    pub fn split_all(open: &str, close: &str, inside: bool, text: &str) -> Split {
        let mut s = ThinkSplitter::new(open, close, inside);
        let mut a = s.push(text);
        let b = s.finish();
        a.reasoning.push_str(&b.reasoning);
        a.content.push_str(&b.content);
        a
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_whole_answer_is_split() {
        let s =
            ThinkSplitter::split_all("<think>", "</think>", false, "<think>hmm, 2+2</think>\n\n4");
        assert_eq!(s.reasoning, "hmm, 2+2");
        assert_eq!(s.content, "4");
        let s = ThinkSplitter::split_all("<think>", "</think>", false, "no tags < here");
        assert_eq!(s.reasoning, "");
        assert_eq!(s.content, "no tags < here");
        // The prompt opened the reasoning: the answer only closes it.
        let s = ThinkSplitter::split_all("<think>", "</think>", true, "because</think>yes");
        assert_eq!(
            (s.reasoning.as_str(), s.content.as_str()),
            ("because", "yes")
        );
    }

    #[test]
    fn tags_cut_between_pieces_are_found() {
        let text = "<think>a é b</think> the answer <thi";
        // Every way of cutting the text in three gives the same split.
        let chars: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        for &i in &chars {
            for &j in chars.iter().filter(|&&j| j >= i) {
                let mut s = ThinkSplitter::new("<think>", "</think>", false);
                let mut all = Split::default();
                for piece in [&text[..i], &text[i..j], &text[j..]] {
                    let p = s.push(piece);
                    all.reasoning.push_str(&p.reasoning);
                    all.content.push_str(&p.content);
                }
                let p = s.finish();
                all.reasoning.push_str(&p.reasoning);
                all.content.push_str(&p.content);
                assert_eq!(all.reasoning, "a é b", "cut at {i}, {j}");
                assert_eq!(all.content, "the answer <thi", "cut at {i}, {j}");
            }
        }
    }
}
