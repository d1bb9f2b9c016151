//! The pages an answer is written from ([`Pipeline::passages`]): retrieval with a threshold, so
//! that a question nothing in the documents supports gets no pages (and no model is asked).
//!
//! A page supports a question when it holds the question's words (the full-text ranking: every
//! word, else any of them) or when one of its chunks is close to the question in meaning (the
//! text-vector ranking, kept only at a cosine of at least `min_similarity`). The two rankings
//! are fused by reciprocal rank ([`hybrid::fuse`]); each page's text is cut to `max_chars`
//! around the first place a word of the question appears.
//!
//! The best `images` pages also carry their rendered page image (the PNG the pipeline stored
//! when it rendered the page), for a model that reads images: a page whose image is gone or is
//! larger than `max_image_bytes` keeps its text and goes without ([`page_image`]).

use horos_server_control::{Passage, PassageQuery};

use super::Pipeline;
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::hybrid::{self, SearchError};
use crate::store::{self, PageHit, Readable};
use crate::vision::VisionReader;

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// The pages that support an answer to `q.question`, best first, `q.k` at most, each with
    /// its text (see the module's documentation), from documents in `q.collections` only (each
    /// ranking reads only theirs, and the pages found are checked against the store last).
    /// Empty when no page supports it. A ranking that
    /// fails (no text embedder reachable) is left out and logged as long as the other answers.
    pub async fn passages(&self, q: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        let k = q.k.clamp(1, 1000);
        let depth = if q.document.is_some() { k * 20 } else { k * 4 }.max(50);
        let readable = hybrid::readable(self.reads(), &q.collections).await?;
        let words = {
            let (mut db, text) = (self.reads(), q.question.clone());
            let collections = q.collections.clone();
            tokio::task::spawn_blocking(move || {
                store::search_user_text_in(&mut db, &text, depth, &collections)
            })
            .await
            .map_err(|e| SearchError::Task(e.to_string()))?
            .map_err(SearchError::from)
        };
        let meaning = self.close_in_meaning(q, depth * 8, &readable).await;
        let mut lists = Vec::new();
        let mut first_error = None;
        for leg in [words, meaning] {
            match leg {
                Ok(hits) => lists.push(
                    hits.into_iter()
                        .filter(|h| q.document.is_none_or(|d| h.doc_id == d))
                        .filter(|h| readable.allows(h.doc_id))
                        .collect::<Vec<_>>(),
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "passages: a ranking left out");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let (true, Some(e)) = (lists.is_empty(), first_error) {
            return Err(e);
        }
        let fused =
            hybrid::answerable(self.reads(), hybrid::fuse(&lists, k), &q.collections).await?;
        let (mut db, question, max_chars) = (self.reads(), q.question.clone(), q.max_chars);
        let (images, max_image_bytes) = (q.images, q.max_image_bytes);
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(fused.len());
            for (rank, hit) in fused.into_iter().enumerate() {
                let chunks: Vec<String> = store::page_chunks(&mut db, hit.doc_id, hit.page_no)?
                    .into_iter()
                    .map(|(_, t)| t)
                    .collect();
                let text = match best_chunk(&chunks, &question) {
                    Some(chunk) => chunk.to_owned(),
                    None => store::page_text(&mut db, hit.doc_id, hit.page_no)?.unwrap_or_default(),
                };
                let mut passage = Passage::new(
                    hit.doc_id,
                    hit.page_no,
                    hit.score,
                    window(&text, &question, max_chars),
                );
                if rank < images {
                    passage.image = page_image(&mut db, hit.doc_id, hit.page_no, max_image_bytes)?;
                }
                out.push(passage);
            }
            Ok::<_, store::StoreError>(out)
        })
        .await
        .map_err(|e| SearchError::Task(e.to_string()))?
        .map_err(SearchError::from)
    }

    /// Chunks whose vector's cosine to the question's is at least `q.min_similarity`, best
    /// first.
    async fn close_in_meaning(
        &self,
        q: &PassageQuery,
        n: usize,
        readable: &Readable,
    ) -> Result<Vec<PageHit>, SearchError> {
        let mut v = self.text_embedder().embed(vec![q.question.clone()]).await?;
        let Some(query) = v.pop() else {
            return Ok(Vec::new());
        };
        let (mut db, index) = (self.reads(), self.text_index().clone());
        let readable = readable.clone();
        let hits =
            tokio::task::spawn_blocking(move || index.search_in(&mut db, &query, n, &readable))
                .await
                .map_err(|e| SearchError::Task(e.to_string()))??;
        let min = q.min_similarity;
        Ok(hits.into_iter().filter(|h| h.score >= min).collect())
    }
}

/// The stored image of page `page_no` of document `doc_id`, when it was rendered, its file can
/// be read and it is at most `max_bytes` long; else `None` (logged: an answer goes on from the
/// page's text). Only a store that cannot be read is an error.
pub(crate) fn page_image(
    db: &mut dyn store::Db,
    doc_id: i64,
    page_no: u32,
    max_bytes: usize,
) -> Result<Option<Vec<u8>>, store::StoreError> {
    let Some(info) = store::page_info(db, doc_id, page_no)? else {
        return Ok(None);
    };
    let path = std::path::Path::new(&info.image_path);
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) => {
            tracing::warn!(doc_id, page_no, path = %path.display(), error = %e,
                "passages: the page's image is missing; its text only");
            return Ok(None);
        }
    };
    if size > max_bytes as u64 {
        tracing::debug!(
            doc_id,
            page_no,
            size,
            max_bytes,
            "passages: the page's image is too large; its text only"
        );
        return Ok(None);
    }
    match std::fs::read(path) {
        // The file may have grown since it was measured.
        Ok(png) if png.len() <= max_bytes => Ok(Some(png)),
        Ok(_) => Ok(None),
        Err(e) => {
            tracing::warn!(doc_id, page_no, path = %path.display(), error = %e,
                "passages: the page's image could not be read; its text only");
            Ok(None)
        }
    }
}

/// The chunk that holds most of `question`'s words (of three letters or more, each counted
/// once); `None` when none holds any. On a structured page a chunk is a section or a table, so
/// the passage an answer cites is one.
pub(crate) fn best_chunk<'a>(chunks: &'a [String], question: &str) -> Option<&'a str> {
    let words: Vec<String> = store::user_terms(question)
        .iter()
        .map(|w| w.trim_matches('"').trim_end_matches('*').to_lowercase())
        .filter(|w| w.chars().count() >= 3)
        .collect();
    let mut best: Option<(usize, &str)> = None;
    for chunk in chunks {
        let lower = chunk.to_lowercase();
        let held = words.iter().filter(|w| lower.contains(w.as_str())).count();
        if held > 0 && best.is_none_or(|(n, _)| held > n) {
            best = Some((held, chunk));
        }
    }
    best.map(|(_, c)| c)
}

/// At most `max_chars` characters of `text`: all of it when it fits, else a window that starts
/// a little before the first place one of `question`'s words (the longest first) appears, or
/// at the start. Cut at whitespace where it can.
pub(crate) fn window(text: &str, question: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.trim().to_owned();
    }
    let lower = text.to_lowercase();
    let mut words = store::user_terms(question);
    words.sort_by_key(|w| std::cmp::Reverse(w.chars().count()));
    let at_byte = words
        .iter()
        .map(|w| w.trim_matches('"').trim_end_matches('*').to_lowercase())
        .filter(|w| w.chars().count() >= 3)
        .find_map(|w| lower.find(&w));
    // Lower-casing can change byte lengths: count characters up to the match in `lower`.
    let at_char = at_byte.map_or(0, |b| lower[..b].chars().count());
    let start = at_char
        .saturating_sub(max_chars / 4)
        .min(total.saturating_sub(max_chars));
    let piece: String = text.chars().skip(start).take(max_chars).collect();
    // Whole words: drop a cut word at either end.
    let piece = if start > 0 {
        piece
            .split_once(char::is_whitespace)
            .map_or(piece.as_str(), |(_, r)| r)
    } else {
        piece.as_str()
    };
    let piece = if start + max_chars < total {
        piece
            .rsplit_once(char::is_whitespace)
            .map_or(piece, |(l, _)| l)
    } else {
        piece
    };
    piece.trim().to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{best_chunk, page_image, window};

    #[test]
    fn the_passage_is_the_section_that_holds_the_question() {
        let chunks = [
            "# Intro\n\nThe worker reads a file.".to_owned(),
            "## Keys\n\nThe threads key sets how many pages render in parallel.".to_owned(),
            "| Key | Type |\n| --- | --- |\n| threads | integer |".to_owned(),
        ];
        assert_eq!(
            best_chunk(&chunks, "how many threads render pages in parallel?"),
            Some(chunks[1].as_str())
        );
        assert_eq!(
            best_chunk(&chunks, "integer type of threads"),
            Some(chunks[2].as_str())
        );
        assert_eq!(best_chunk(&chunks, "quartz"), None);
    }
    use crate::store::{PageImage, insert_document, insert_page, migrate};

    #[test]
    fn a_page_image_is_given_when_found_and_small_enough() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let (doc, _) = insert_document(&mut conn, "abc", "t", "/x.pdf").unwrap();
        let png = b"\x89PNG\r\n\x1a\n a page".to_vec();
        let small = dir.path().join("p1.png");
        std::fs::write(&small, &png).unwrap();
        let big = dir.path().join("p2.png");
        std::fs::write(&big, vec![7u8; 1000]).unwrap();
        let gone = dir.path().join("p3.png");
        for (page_no, path) in [(1, &small), (2, &big), (3, &gone)] {
            let img = PageImage {
                doc_id: doc.id,
                page_no,
                width: 1,
                height: 1,
                image_bytes: 1,
                image_path: path.to_str().unwrap(),
                tiles: 1,
            };
            insert_page(&mut conn, &img).unwrap();
        }
        assert_eq!(page_image(&mut conn, doc.id, 1, 999).unwrap(), Some(png));
        // Larger than the limit, its file gone, never rendered: no image, and no error.
        assert_eq!(page_image(&mut conn, doc.id, 2, 999).unwrap(), None);
        assert!(page_image(&mut conn, doc.id, 2, 1000).unwrap().is_some());
        assert_eq!(page_image(&mut conn, doc.id, 3, 999).unwrap(), None);
        assert_eq!(page_image(&mut conn, doc.id, 4, 999).unwrap(), None);
    }

    #[test]
    fn a_short_page_is_whole_and_a_long_one_is_cut_around_the_question() {
        assert_eq!(window(" short page ", "anything", 100), "short page");
        let text = format!(
            "{} HRESULT codes report errors. {}",
            "filler ".repeat(200),
            "tail ".repeat(200)
        );
        let w = window(&text, "How are HRESULT errors reported?", 120);
        assert!(w.chars().count() <= 120, "{w}");
        assert!(w.contains("HRESULT codes report errors."), "{w}");
        assert!(!w.starts_with("iller") && !w.ends_with("tai"), "{w}");
        // No word of the question on the page: its start.
        let w = window(&text, "zyxqv", 50);
        assert!(w.starts_with("filler"), "{w}");
        // Characters, not bytes: multi-byte text is never split inside a character.
        let text = "é".repeat(500) + " HRESULT";
        let w = window(&text, "HRESULT", 40);
        assert!(w.ends_with("HRESULT"), "{w}");
    }
}
