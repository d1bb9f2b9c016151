//! The seam between a gateway's `POST /v1/search` (and `POST /v1/answers`) and an index:
//! [`Searcher`], and the [`Passage`]s an answer is written from.
//!
//! Every question carries the [`Collections`] its caller may read, set by the gateway from the
//! admitted caller (never from the request's body): the index answers only from documents in
//! them, and a document outside them is answered as one that does not exist.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Collections;

/// A page that supports an answer: where it is, how well it matched, the part of its text an
/// answer may draw on, and, when asked for ([`PassageQuery::images`]), its rendered image.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    /// The document's id.
    pub document: i64,
    /// The page (1-based).
    pub page: u32,
    /// How well it matched (the index's fused score; higher is better).
    pub score: f64,
    /// The page's text, or the part of it around what matched.
    pub text: String,
    /// The page as rendered (PNG bytes), for a model that reads images: only on the best
    /// [`PassageQuery::images`] pages, and only when it was found and is at most
    /// [`PassageQuery::max_image_bytes`]. Kept in the process (not serialized).
    #[serde(skip)]
    pub image: Option<Vec<u8>>,
}

/// The image shown by its size only (a log line must not carry a page's bytes).
impl std::fmt::Debug for Passage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passage")
            .field("document", &self.document)
            .field("page", &self.page)
            .field("score", &self.score)
            .field("text", &self.text)
            .field("image_bytes", &self.image.as_ref().map(Vec::len))
            .finish()
    }
}

impl Passage {
    /// A page with its text and no image.
    pub fn new(document: i64, page: u32, score: f64, text: impl Into<String>) -> Self {
        Self {
            document,
            page,
            score,
            text: text.into(),
            image: None,
        }
    }
}

/// What [`Searcher::passages`] looks for.
#[derive(Debug, Clone, PartialEq)]
pub struct PassageQuery {
    /// The question, as a person typed it.
    pub question: String,
    /// At most this many pages.
    pub k: usize,
    /// Only this document.
    pub document: Option<i64>,
    /// A page found by meaning only (no word of the question on it) supports the question
    /// when its text vector's cosine to the question's is at least this.
    pub min_similarity: f64,
    /// At most this many characters of each page's text.
    pub max_chars: usize,
    /// The best this many pages come with their rendered image ([`Passage::image`]); 0: none.
    pub images: usize,
    /// An image larger than this many bytes is left out (the page's text is kept).
    pub max_image_bytes: usize,
    /// Only pages of documents in these collections (the caller's, set by the gateway).
    pub collections: Collections,
}

impl PassageQuery {
    /// The images a query asks for by default when it asks for any: the best 3 pages.
    pub const DEFAULT_IMAGES: usize = 3;
    /// The largest image a query takes by default: 4 MiB.
    pub const DEFAULT_MAX_IMAGE_BYTES: usize = 4 << 20;
}

/// Why a search was not answered.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SearchError {
    /// The request cannot be searched as written (400): an unknown mode, a bad filter.
    #[error("{0}")]
    Invalid(String),
    /// The index could not be read now (503).
    #[error("{0}")]
    Unavailable(String),
    /// The question is larger than the index accepts (413): an image with more pixels than its
    /// budget, refused from its header before it is decoded. Sent smaller, it is searched.
    #[error("{0}")]
    TooLarge(String),
}

/// An index the coordinator answers `POST /v1/search` from.
#[async_trait]
pub trait Searcher: Send + Sync {
    /// The best `k` results for `query` (any text a person typed: never a syntax error), with
    /// the request's other fields as `options` (e.g. `mode`, `document`), from documents in
    /// `collections` only (the caller's: a field of `options` never widens them). A document
    /// outside them is answered as one that does not exist (a `like` of its page is refused as a
    /// page of an unknown document).
    async fn search(
        &self,
        query: &str,
        k: usize,
        options: &Value,
        collections: &Collections,
    ) -> Result<Value, SearchError>;

    /// The pages that support an answer to `query.question`, best first: pages holding its
    /// words, and pages close to it in meaning, each with its text. None when nothing
    /// supports it (then no model should be asked). The best `query.images` pages carry their
    /// rendered image where the index keeps one within `query.max_image_bytes` (else `None`, the
    /// text kept). Only pages of documents in `query.collections`. An index without page text
    /// answers [`SearchError::Unavailable`].
    async fn passages(&self, query: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        let _ = query;
        Err(SearchError::Unavailable(
            "this index gives no passages to answer from".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passages_debug_shows_its_images_size_not_its_bytes() {
        let mut p = Passage::new(3, 2, 0.5, "walrus");
        p.image = Some(vec![137, 80, 78, 71]);
        let shown = format!("{p:?}");
        assert!(shown.contains("image_bytes: Some(4)"), "{shown}");
        assert!(!shown.contains("137"), "{shown}");
    }
}
