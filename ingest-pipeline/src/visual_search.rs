//! Visual search by a text question: the question is embedded by the late-interaction model
//! that embedded the pages ([`VisualEmbedder::embed_query`]), then the stored pages of that model
//! are ranked by MaxSim ([`crate::store::search_visual`]).
//!
//! Visual search by an image ([`search_by_image_cached`]): "pages that look like this one"; the
//! image is embedded as a query by the same model ([`VisualEmbedder::embed_image_query`]), so
//! it works with the pixel-patch fallback as with a late-interaction model.
//!
//! The pixel-patch fallback has no text tower: a question against it is
//! [`VisualSearchError::Embed`] with [`EmbedError::NoTextQuery`], never a ranking of pixels.

use horos_server_control::Collections;

use crate::embed::{EmbedError, VisualEmbedder};
use crate::store::{self, Db, PageHit, Readable, StoreError, VisualIndexCache};

/// Why a visual search failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VisualSearchError {
    /// The question could not be embedded (among others: the embedder has no text tower).
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking search task failed.
    #[error("visual search task failed: {0}")]
    Task(String),
    /// The page asked to look like was never rendered (no such document or page).
    #[error("no page {page} of document {document} has an image")]
    NoPage {
        /// The document.
        document: i64,
        /// The page, from 1.
        page: u32,
    },
    /// The page's stored image could not be read.
    #[error("the image of page {page} of document {document} ({path}): {source}")]
    PageImage {
        /// The document.
        document: i64,
        /// The page.
        page: u32,
        /// Where it was looked for.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
}

/// What to search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VisualQuery {
    /// The question.
    pub text: String,
    /// How many pages.
    pub k: usize,
    /// Only these documents (none: all).
    pub docs: Option<Vec<i64>>,
    /// Only documents in these collections (every collection by default): the scan reads only
    /// theirs, and the pages found are checked against the store before they are answered.
    pub collections: Collections,
    /// Threads scanning the index (at least 1).
    pub threads: usize,
}

impl VisualQuery {
    /// The documents to scan: `docs` among those `readable` allows (`None`: every document).
    fn scanned(&self, readable: &Readable) -> Option<Vec<i64>> {
        match (&self.docs, readable) {
            (None, r) => r.within(None),
            (Some(docs), r) => Some(docs.iter().copied().filter(|d| r.allows(*d)).collect()),
        }
    }
}

/// The `query.k` best pages for `query.text` among the pages `embedder`'s model embedded, best
/// first, searched on `db` (the pipeline's store, [`crate::pipeline::Pipeline::reads`]). The model's index is loaded
/// for this question; a long-lived searcher keeps it with [`search_by_text_cached`].
pub async fn search_by_text<V: VisualEmbedder>(
    db: impl Db + Send + 'static,
    embedder: &V,
    query: VisualQuery,
) -> Result<Vec<PageHit>, VisualSearchError> {
    search(db, embedder, None, query).await
}

/// [`search_by_text`] over the index `cache` keeps in memory (reloaded only when the model's
/// stored pages changed).
pub async fn search_by_text_cached<V: VisualEmbedder>(
    db: impl Db + Send + 'static,
    embedder: &V,
    cache: &VisualIndexCache,
    query: VisualQuery,
) -> Result<Vec<PageHit>, VisualSearchError> {
    search(db, embedder, Some(cache.clone()), query).await
}

/// The `query.k` best pages for the image `png` (PNG, JPEG or any format the `image` crate was
/// built with; `query.text` is not used) among the pages `embedder`'s model embedded, over the
/// index `cache` keeps in memory. An image that cannot be decoded is
/// [`VisualSearchError::Embed`] with [`EmbedError::Image`].
pub async fn search_by_image_cached<V: VisualEmbedder>(
    db: impl Db + Send + 'static,
    embedder: &V,
    cache: &VisualIndexCache,
    png: Vec<u8>,
    query: VisualQuery,
) -> Result<Vec<PageHit>, VisualSearchError> {
    let vectors = embedder.embed_image_query(std::sync::Arc::new(png)).await?;
    ranked(db, embedder, Some(cache.clone()), vectors, query).await
}

async fn search<V: VisualEmbedder>(
    db: impl Db + Send + 'static,
    embedder: &V,
    cache: Option<VisualIndexCache>,
    query: VisualQuery,
) -> Result<Vec<PageHit>, VisualSearchError> {
    let vectors = embedder.embed_query(query.text.clone()).await?;
    ranked(db, embedder, cache, vectors, query).await
}

/// The pages ranked by MaxSim against the query `vectors`.
async fn ranked<V: VisualEmbedder>(
    db: impl Db + Send + 'static,
    embedder: &V,
    cache: Option<VisualIndexCache>,
    vectors: crate::maxsim::MultiVector,
    query: VisualQuery,
) -> Result<Vec<PageHit>, VisualSearchError> {
    let mut db = db;
    let model = embedder.name().to_owned();
    tokio::task::spawn_blocking(move || {
        let readable = store::readable_documents(&mut db, &query.collections)?;
        let scanned = query.scanned(&readable);
        let (docs, threads) = (scanned.as_deref(), query.threads.max(1));
        let hits = match cache {
            Some(cache) => store::search_visual_cached(
                &mut db, &cache, &model, &vectors, query.k, docs, threads,
            ),
            None => store::search_visual(&mut db, &model, &vectors, query.k, docs, threads),
        }?;
        store::keep_readable(&mut db, hits, &query.collections)
    })
    .await
    .map_err(|e| VisualSearchError::Task(e.to_string()))?
    .map_err(VisualSearchError::from)
}
