//! One search API over the three indexes of the pages: full text ([`Mode::Text`], BM25 over
//! the words a person typed), text vectors ([`Mode::Vector`], the question embedded by the
//! chunks' model, cosine over the chunks), visual late interaction ([`Mode::Visual`], MaxSim
//! over the page images), and their reciprocal-rank fusion ([`Mode::Hybrid`]): a page's score
//! is the sum over the rankings that hold it of `1 / (60 + rank)`, so a page two rankings agree
//! on rises above one that only one ranking puts first.

use horos_server_control::Collections;

use crate::store::Db;

use crate::embed::{EmbedError, TextEmbedder, VisualEmbedder};
use crate::store::{self, PageHit, Readable, StoreError};
use crate::store::{TextVectorIndex, VisualIndexCache};
use crate::visual_search::{VisualQuery, VisualSearchError, search_by_text_cached};

pub use horos_retrieval::fusion::RRF_K;

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Full text.
    #[default]
    Text,
    /// Text vectors.
    Vector,
    /// Visual late interaction.
    Visual,
    /// The fusion of the three (the visual ranking where a late-interaction model is
    /// configured).
    Hybrid,
}

impl std::str::FromStr for Mode {
    type Err = SearchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Mode::Text),
            "vector" => Ok(Mode::Vector),
            "visual" => Ok(Mode::Visual),
            "hybrid" => Ok(Mode::Hybrid),
            other => Err(SearchError::Mode(other.to_owned())),
        }
    }
}

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// Not a mode.
    #[error("search mode `{0}` is not known (text, vector, visual, hybrid)")]
    Mode(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The question could not be embedded for vector search.
    #[error("the question could not be embedded: {0}")]
    Embed(#[from] EmbedError),
    /// Visual search failed (among others: no late-interaction model is configured).
    #[error(transparent)]
    Visual(#[from] VisualSearchError),
    /// A blocking search task failed.
    #[error("search task failed: {0}")]
    Task(String),
}

/// Pages ranked by several lists, fused by reciprocal rank (horos-retrieval's
/// [`horos_retrieval::fusion::fuse`]): the best `k`, each with its fused score and the snippet of
/// the first list that holds it. A page listed twice in one list counts at its best rank.
pub fn fuse(lists: &[Vec<PageHit>], k: usize) -> Vec<PageHit> {
    horos_retrieval::fusion::fuse(lists, |h| (h.doc_id, h.page_no), k)
        .into_iter()
        .map(|(hit, score)| PageHit { score, ..hit })
        .collect()
}

/// Which pages a search may answer with: those of one document when given, of the documents
/// in some collections (every collection by default: the operator's searches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only this document.
    pub document: Option<i64>,
    /// Only documents in these collections (a caller's, set by the gateway).
    pub collections: Collections,
}

/// Within one document when given, in every collection.
impl From<Option<i64>> for Scope {
    fn from(document: Option<i64>) -> Self {
        Self {
            document,
            collections: Collections::All,
        }
    }
}

/// What to search, and where.
#[derive(Debug, Clone)]
pub struct Query {
    /// The text a person typed (any text).
    pub text: String,
    /// How many pages.
    pub k: usize,
    /// Only this document.
    pub document: Option<i64>,
    /// Only documents in these collections.
    pub collections: Collections,
    /// Threads scanning the visual index.
    pub threads: usize,
}

/// Pages of `document` (all pages without one) that `readable` allows, best first, one entry
/// per page, `k` at most.
fn keep(hits: Vec<PageHit>, document: Option<i64>, readable: &Readable, k: usize) -> Vec<PageHit> {
    let mut seen = std::collections::HashSet::new();
    hits.into_iter()
        .filter(|h| document.is_none_or(|d| h.doc_id == d) && readable.allows(h.doc_id))
        .filter(|h| seen.insert((h.doc_id, h.page_no)))
        .take(k)
        .collect()
}

/// The documents `collections` may read, resolved on `db` now (on a blocking thread).
pub(crate) async fn readable(
    mut db: impl Db + Send + 'static,
    collections: &Collections,
) -> Result<Readable, SearchError> {
    if collections.is_all() {
        return Ok(Readable::Every);
    }
    let collections = collections.clone();
    tokio::task::spawn_blocking(move || store::readable_documents(&mut db, &collections))
        .await
        .map_err(|e| SearchError::Task(e.to_string()))?
        .map_err(SearchError::from)
}

/// `hits` without those of documents outside `collections`, looked up on `db` now: the last
/// step before a search answers ([`store::keep_readable`]).
pub(crate) async fn answerable(
    mut db: impl Db + Send + 'static,
    hits: Vec<PageHit>,
    collections: &Collections,
) -> Result<Vec<PageHit>, SearchError> {
    if collections.is_all() {
        return Ok(hits);
    }
    let collections = collections.clone();
    tokio::task::spawn_blocking(move || store::keep_readable(&mut db, hits, &collections))
        .await
        .map_err(|e| SearchError::Task(e.to_string()))?
        .map_err(SearchError::from)
}

/// How deep each ranking is read before filtering by document and fusing.
fn depth(q: &Query) -> usize {
    let k = q.k.max(1);
    let fused = if q.document.is_some() { k * 20 } else { k };
    fused.max(4 * k).max(50)
}

/// Searches the pages in `mode`: `open` gives a handle on the pipeline's store (one per
/// ranking, each read on a blocking thread), `text` and `visual` are the embedders that embedded
/// the chunks and the page images, `cache` keeps the visual index in memory between questions and
/// `index` the chunks' text vectors.
/// In [`Mode::Hybrid`] the visual ranking is left out where the
/// visual embedder has no text tower (the offline fallback), and a ranking that fails is left
/// out (and logged) as long as another one answers.
///
/// Only pages of documents in `q.collections` are answered: each ranking reads only theirs
/// (full text in its statement, the text vectors and the visual scan by the documents resolved
/// at the question), and the pages found are checked against the store last
/// ([`store::keep_readable`]).
pub async fn search<D: Db + Send + 'static, T: TextEmbedder, V: VisualEmbedder>(
    open: impl Fn() -> Result<D, SearchError>,
    text: &T,
    visual: &V,
    cache: &VisualIndexCache,
    index: &TextVectorIndex,
    mode: Mode,
    q: &Query,
) -> Result<Vec<PageHit>, SearchError> {
    let readable = readable(open()?, &q.collections).await?;
    let hits = match mode {
        Mode::Text => keep(full_text(open()?, q).await?, q.document, &readable, q.k),
        Mode::Vector => keep(
            vectors(open()?, text, index, q, &readable).await?,
            q.document,
            &readable,
            q.k,
        ),
        Mode::Visual => images(open()?, visual, cache, q, &readable, q.k).await?,
        Mode::Hybrid => {
            let mut lists = Vec::new();
            let mut first_error = None;
            let legs = [
                full_text(open()?, q).await,
                vectors(open()?, text, index, q, &readable).await,
                match images(open()?, visual, cache, q, &readable, depth(q)).await {
                    Err(SearchError::Visual(VisualSearchError::Embed(
                        EmbedError::NoTextQuery(_),
                    ))) => Ok(Vec::new()),
                    other => other,
                },
            ];
            for leg in legs {
                match leg {
                    Ok(hits) => lists.push(keep(hits, q.document, &readable, depth(q))),
                    Err(e) => {
                        tracing::warn!(error = %e, "hybrid search: a ranking left out");
                        first_error.get_or_insert(e);
                    }
                }
            }
            match (lists.is_empty(), first_error) {
                (true, Some(e)) => return Err(e),
                _ => fuse(&lists, q.k),
            }
        }
    };
    answerable(open()?, hits, &q.collections).await
}

async fn full_text(
    mut db: impl Db + Send + 'static,
    q: &Query,
) -> Result<Vec<PageHit>, SearchError> {
    let (text, n, collections) = (q.text.clone(), depth(q), q.collections.clone());
    tokio::task::spawn_blocking(move || store::search_user_text_in(&mut db, &text, n, &collections))
        .await
        .map_err(|e| SearchError::Task(e.to_string()))?
        .map_err(SearchError::from)
}

async fn vectors<T: TextEmbedder>(
    mut db: impl Db + Send + 'static,
    text: &T,
    index: &TextVectorIndex,
    q: &Query,
    readable: &Readable,
) -> Result<Vec<PageHit>, SearchError> {
    let mut v = text.embed(vec![q.text.clone()]).await?;
    let query = v
        .pop()
        .ok_or_else(|| EmbedError::Shape("no vector for the question".into()))?;
    // Chunks, several per page: read deeper so that `depth` pages remain.
    let n = depth(q) * 8;
    let (index, readable) = (index.clone(), readable.clone());
    tokio::task::spawn_blocking(move || index.search_in(&mut db, &query, n, &readable))
        .await
        .map_err(|e| SearchError::Task(e.to_string()))?
        .map_err(SearchError::from)
}

async fn images<V: VisualEmbedder>(
    db: impl Db + Send + 'static,
    visual: &V,
    cache: &VisualIndexCache,
    q: &Query,
    readable: &Readable,
    k: usize,
) -> Result<Vec<PageHit>, SearchError> {
    // The documents resolved here; the pages found are checked against the store by `search`.
    let query = VisualQuery {
        text: q.text.clone(),
        k,
        docs: readable.within(q.document),
        collections: Collections::All,
        threads: q.threads.max(1),
    };
    Ok(search_by_text_cached(db, visual, cache, query).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(doc: i64, page: u32) -> PageHit {
        PageHit {
            doc_id: doc,
            page_no: page,
            score: 0.0,
            snippet: format!("{doc}:{page}"),
        }
    }

    #[test]
    fn pages_two_rankings_agree_on_rise_above_one_rankings_first() {
        let text = vec![hit(1, 1), hit(1, 2), hit(2, 1)];
        let vector = vec![hit(1, 2), hit(3, 1), hit(1, 2), hit(2, 1)];
        let visual = vec![hit(4, 1), hit(1, 2)];
        let fused = fuse(&[text, vector, visual], 3);
        let order: Vec<(i64, u32)> = fused.iter().map(|h| (h.doc_id, h.page_no)).collect();
        // (1,2): ranks 2, 1 and 2; (2,1): 3 and 3 (its duplicate in `vector` does not count);
        // (1,1) and (4,1) are first once; (3,1) second once.
        assert_eq!(order, [(1, 2), (2, 1), (1, 1)]);
        let expect = 1.0 / 62.0 + 1.0 / 61.0 + 1.0 / 62.0;
        assert!((fused[0].score - expect).abs() < 1e-12, "{fused:?}");
        assert_eq!(fused[0].snippet, "1:2");
        assert!(fuse(&[], 5).is_empty());
        assert_eq!("hybrid".parse::<Mode>().unwrap(), Mode::Hybrid);
        assert!(matches!("fuzzy".parse::<Mode>(), Err(SearchError::Mode(m)) if m == "fuzzy"));
    }
}
