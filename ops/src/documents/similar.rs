//! Look-alike searches on the visual index: "pages like this one" (a stored page's image as the
//! question) and an image of the caller's own as the question.

use ingest_pipeline::hybrid::SearchError;
use ingest_pipeline::store::PageHit;
use ingest_pipeline::visual_search::VisualSearchError;
use serde::Deserialize;

use super::Documents;
use super::search::{DEFAULT_K, Hit};
use crate::error::OpsError;

/// The most pages one look-alike search returns.
const MAX_K: usize = 100;

fn default_k() -> usize {
    DEFAULT_K
}

/// Which page to look like.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimilarArgs {
    /// The page's document.
    pub document: i64,
    /// The page, from 1.
    pub page: u32,
    /// How many pages (1 to 100; the page itself comes first).
    #[serde(default = "default_k")]
    pub k: usize,
    /// Only pages of this document.
    #[serde(default)]
    pub within: Option<i64>,
}

fn hits(found: Vec<PageHit>) -> Vec<Hit> {
    found.into_iter().map(Hit::from).collect()
}

fn refused(e: VisualSearchError) -> OpsError {
    match e {
        e @ VisualSearchError::NoPage { .. } => OpsError::invalid("page", e.to_string()),
        e @ VisualSearchError::Embed(
            ingest_pipeline::embed::EmbedError::Image(_)
            | ingest_pipeline::embed::EmbedError::ImageTooLarge { .. },
        ) => OpsError::invalid("image", e.to_string()),
        other => OpsError::Search(SearchError::Visual(other)),
    }
}

impl Documents {
    /// The pages that look like page `args.page` of document `args.document`, best first (the
    /// page itself first). A page never rendered is [`OpsError::InvalidArgument`] on `page`.
    pub async fn similar(&self, args: SimilarArgs) -> Result<Vec<Hit>, OpsError> {
        let k = args.k.clamp(1, MAX_K);
        let found = self
            .pipeline
            .search_like(args.document, args.page, k, args.within.into())
            .await
            .map_err(refused)?;
        Ok(hits(found))
    }

    /// The `k` pages that look like `image` (PNG, JPEG, ... bytes: a scan, a photo of a page, a
    /// sketch), within `document` when given. An image that cannot be decoded, or whose header
    /// declares more pixels than `[ingest] max_image_pixels`, is [`OpsError::InvalidArgument`]
    /// on `image`.
    pub async fn search_image(
        &self,
        image: Vec<u8>,
        k: usize,
        document: Option<i64>,
    ) -> Result<Vec<Hit>, OpsError> {
        let found = self
            .pipeline
            .search_image(image, k.clamp(1, MAX_K), document.into())
            .await
            .map_err(refused)?;
        Ok(hits(found))
    }

    /// The `k` pages for `image` and `text` together: those that look like the image and those
    /// that hold the words (hybrid), fused by rank, within `document` when given. An image that
    /// cannot be decoded is [`OpsError::InvalidArgument`] on `image`.
    pub async fn search_image_and_text(
        &self,
        image: Vec<u8>,
        text: String,
        k: usize,
        document: Option<i64>,
    ) -> Result<Vec<Hit>, OpsError> {
        let found = self
            .pipeline
            .search_image_and_text(image, text, k.clamp(1, MAX_K), document.into())
            .await
            .map_err(|e| match e {
                SearchError::Visual(v) => refused(v),
                other => OpsError::Search(other),
            })?;
        Ok(hits(found))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::testing::{documents, ingested};
    use crate::error::ErrorKind;

    #[tokio::test]
    async fn a_page_never_rendered_and_an_image_that_is_none_are_named() {
        let (dir, docs) = documents().await;
        let id = ingested(dir.path(), &docs, "a").await;
        let e = docs
            .similar(SimilarArgs {
                document: id,
                page: 3,
                k: 5,
                within: None,
            })
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.param()),
            (ErrorKind::InvalidArgument, Some("page"))
        );
        assert!(e.to_string().contains("no page 3"), "{e}");
        let e = docs
            .search_image(b"not an image".to_vec(), 5, None)
            .await
            .unwrap_err();
        assert_eq!(e.param(), Some("image"), "{e:?}");
        let args: SimilarArgs =
            serde_json::from_value(serde_json::json!({"document": 1, "page": 2})).unwrap();
        assert_eq!((args.k, args.within), (DEFAULT_K, None));
    }
}
