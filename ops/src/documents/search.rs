//! Search: the best pages for any text a person typed, by full text, text vectors, visual
//! late interaction, or their fusion.

use ingest_pipeline::hybrid::Mode;
use serde::{Deserialize, Deserializer, Serialize};

use super::Documents;
use crate::error::OpsError;

/// Pages returned when the caller does not say.
pub const DEFAULT_K: usize = 10;
/// The most pages one search returns.
const MAX_K: usize = 100;

fn default_k() -> usize {
    DEFAULT_K
}

/// A search mode by its name (`text`, `vector`, `visual`, `hybrid`).
fn mode<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
    String::deserialize(d)?
        .parse()
        .map_err(serde::de::Error::custom)
}

/// What to look for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// The question: any text (a page must contain every word, else any; a `"quoted phrase"`
    /// stays a phrase; a trailing `*` is a prefix; nothing is a syntax error).
    pub query: String,
    /// How many pages (1 to 100).
    #[serde(default = "default_k")]
    pub k: usize,
    /// How pages are ranked.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// Only this document.
    #[serde(default)]
    pub document: Option<i64>,
}

/// A page found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The document.
    pub document: i64,
    /// The page, from 1.
    pub page: u32,
    /// Its score (higher is better).
    pub score: f64,
    /// A snippet of its matching text.
    pub snippet: String,
}

impl From<ingest_pipeline::store::PageHit> for Hit {
    fn from(h: ingest_pipeline::store::PageHit) -> Self {
        Self {
            document: h.doc_id,
            page: h.page_no,
            score: h.score,
            snippet: h.snippet,
        }
    }
}

impl Documents {
    /// The best `args.k` pages (clamped to 1..=100) for `args.query` in `args.mode`. The
    /// pipeline's visual index stays in memory between calls on the same [`Documents`].
    pub async fn search(&self, args: SearchArgs) -> Result<Vec<Hit>, OpsError> {
        let k = args.k.clamp(1, MAX_K);
        let hits = self
            .pipeline
            .search(args.mode, args.query, k, args.document.into())
            .await?;
        Ok(hits.into_iter().map(Hit::from).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::documents::testing::{documents, ingested, read_page};

    fn args(v: serde_json::Value) -> SearchArgs {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn any_text_finds_the_pages_holding_it() {
        let (dir, docs) = documents().await;
        let id = ingested(dir.path(), &docs, "a").await;
        read_page(
            &docs,
            id,
            1,
            "The C++ runtime reads quarterly revenue tables.",
        );
        read_page(&docs, id, 2, "Nothing to see.");
        for query in ["quarterly revenue", "C++ \"unbalanced", "NEAR( OR *", ""] {
            let hits = docs.search(args(json!({"query": query}))).await.unwrap();
            if query.starts_with('q') || query.starts_with('C') {
                assert_eq!(hits.len(), 1, "{query}: {hits:?}");
                assert_eq!((hits[0].document, hits[0].page), (id, 1));
            }
        }
        let other = docs
            .search(args(json!({"query": "revenue", "document": id + 1})))
            .await
            .unwrap();
        assert!(other.is_empty(), "{other:?}");
    }

    #[test]
    fn the_mode_is_read_by_name_and_an_unknown_one_is_refused_by_name() {
        let a = args(json!({"query": "x", "mode": "hybrid", "k": 3}));
        assert_eq!((a.mode, a.k), (Mode::Hybrid, 3));
        assert_eq!(args(json!({"query": "x"})).mode, Mode::Text);
        let e = serde_json::from_value::<SearchArgs>(json!({"query": "x", "mode": "sideways"}))
            .unwrap_err();
        assert!(e.to_string().contains("sideways"), "{e}");
    }
}
