//! `POST /v1/search` over the pipeline's pages: `mode` "text" (the default), "vector",
//! "visual" or "hybrid" ([`crate::hybrid`]), optionally within one `document`; or, with
//! `image` (a base64-encoded PNG or JPEG) instead of a text question, the pages that look like
//! that image (mode "visual", the only one an image alone can ask), or, with `image` and
//! `query` both, the two searches fused (mode "hybrid"); or, with `like` (`{"document",
//! "page"}`), the pages that look like that stored page.
//!
//! Only documents in the caller's collections (the seam's `collections`, set by the gateway)
//! are searched and answered; a `like` of a page of another document is refused as a page that
//! does not exist (400, the message an unknown document gets).
//!
//! An `image` whose header declares more pixels than `[ingest] max_image_pixels` is refused
//! with [`SearchError::TooLarge`] (a 413) before it is decoded; one that is no image, with
//! [`SearchError::Invalid`] (a 400).

use async_trait::async_trait;
use horos_server_control::{Collections, Passage, PassageQuery, SearchError, Searcher};
use serde_json::Value;

use super::{LatePipeline, hits_json};
use crate::embed::{EmbedError, TextEmbedder, VisualEmbedder};
use crate::hybrid::{self, Mode, Scope};
use crate::vision::VisionReader;
use crate::visual_search::VisualSearchError;

/// The pipeline's pages, searchable once the pipeline has started.
pub struct IngestSearcher<R, T, V>(pub LatePipeline<R, T, V>);

#[async_trait]
impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Searcher for IngestSearcher<R, T, V> {
    async fn search(
        &self,
        query: &str,
        k: usize,
        options: &Value,
        collections: &Collections,
    ) -> Result<Value, SearchError> {
        let document = match &options["document"] {
            Value::Null => None,
            v => Some(v.as_i64().ok_or_else(|| {
                SearchError::Invalid("`document` must be a document id (an integer)".into())
            })?),
        };
        let mode: Mode = match options["mode"].as_str() {
            None => Mode::Text,
            Some(m) => m
                .parse()
                .map_err(|e: hybrid::SearchError| SearchError::Invalid(e.to_string()))?,
        };
        let pipeline = self
            .0
            .get()
            .ok_or_else(|| SearchError::Unavailable("the ingest pipeline is starting".into()))?;
        let scope = Scope {
            document,
            collections: collections.clone(),
        };
        if let Some((like, page)) = like_option(options)? {
            let hits = pipeline
                .search_like(like, page, k, scope)
                .await
                .map_err(|e| match e {
                    e @ VisualSearchError::NoPage { .. } => {
                        SearchError::Invalid(format!("`like`: {e}"))
                    }
                    other => SearchError::Unavailable(other.to_string()),
                })?;
            return Ok(hits_json(&hits));
        }
        if let Some(image) = image_option(options)?
            && !query.trim().is_empty()
        {
            // An image and words: both searched, fused (hybrid, the only mode of the two).
            if !matches!(mode, Mode::Hybrid) && !options["mode"].is_null() {
                return Err(SearchError::Invalid(
                    "`image` with a `query` searches both and fuses them: give `mode` \
                     \"hybrid\" or leave it out"
                        .into(),
                ));
            }
            let hits = pipeline
                .search_image_and_text(image, query.to_owned(), k, scope)
                .await
                .map_err(|e| match e {
                    hybrid::SearchError::Visual(v) => image_refused(v),
                    other => SearchError::Unavailable(other.to_string()),
                })?;
            return Ok(hits_json(&hits));
        }
        if let Some(image) = image_option(options)? {
            if !matches!(mode, Mode::Visual) && !options["mode"].is_null() {
                return Err(SearchError::Invalid(
                    "`image` searches the visual index: give `mode` \"visual\" or leave it out"
                        .into(),
                ));
            }
            let hits = pipeline
                .search_image(image, k, scope)
                .await
                .map_err(image_refused)?;
            return Ok(hits_json(&hits));
        }
        let hits = pipeline
            .search(mode, query.to_owned(), k, scope)
            .await
            .map_err(|e| match e {
                // Asked for what this deployment cannot do: no late-interaction model.
                e @ hybrid::SearchError::Visual(VisualSearchError::Embed(
                    EmbedError::NoTextQuery(_),
                )) => SearchError::Invalid(e.to_string()),
                other => SearchError::Unavailable(other.to_string()),
            })?;
        Ok(hits_json(&hits))
    }

    async fn passages(&self, query: &PassageQuery) -> Result<Vec<Passage>, SearchError> {
        let pipeline = self
            .0
            .get()
            .ok_or_else(|| SearchError::Unavailable("the ingest pipeline is starting".into()))?;
        pipeline
            .passages(query)
            .await
            .map_err(|e| SearchError::Unavailable(e.to_string()))
    }
}

/// A visual search by an image as the gateway answers it: a 413 for an image larger than the
/// pixel budget, a 400 for one that is no image, a 503 for the rest.
fn image_refused(e: VisualSearchError) -> SearchError {
    match e {
        e @ VisualSearchError::Embed(EmbedError::ImageTooLarge { .. }) => {
            SearchError::TooLarge(format!("`image`: {e}"))
        }
        e @ VisualSearchError::Embed(EmbedError::Image(_)) => {
            SearchError::Invalid(format!("`image`: {e}"))
        }
        other => SearchError::Unavailable(other.to_string()),
    }
}

/// The `like` option (`{"document": D, "page": P}`: pages that look like that one): `None`
/// without one, a 400 for one that is not a document id and a page number.
fn like_option(options: &Value) -> Result<Option<(i64, u32)>, SearchError> {
    let like = &options["like"];
    if like.is_null() {
        return Ok(None);
    }
    let document = like["document"].as_i64();
    let page = like["page"].as_u64().and_then(|p| u32::try_from(p).ok());
    match (document, page) {
        (Some(d), Some(p)) if p >= 1 => Ok(Some((d, p))),
        _ => Err(SearchError::Invalid(
            "`like` must be {\"document\": ID, \"page\": N} (a page from 1)".into(),
        )),
    }
}

/// The `image` option decoded: `None` without one, a 400 for one that is not base64.
fn image_option(options: &Value) -> Result<Option<Vec<u8>>, SearchError> {
    use base64::Engine as _;
    match &options["image"] {
        Value::Null => Ok(None),
        Value::String(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map(Some)
            .map_err(|e| SearchError::Invalid(format!("`image` is not base64: {e}"))),
        _ => Err(SearchError::Invalid(
            "`image` must be a base64-encoded PNG or JPEG (a string)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::embed::{HashingEmbedder, PixelPatchFallback};
    use crate::pipeline::{Pipeline, PipelineConfig};
    use crate::vision::TesseractReader;

    type TestSearcher = IngestSearcher<TesseractReader, HashingEmbedder, PixelPatchFallback>;

    const ALL: Collections = Collections::All;

    #[tokio::test]
    async fn requests_are_checked_and_what_cannot_be_answered_says_why() {
        let starting: TestSearcher = IngestSearcher(Arc::default());
        let e = starting.search("x", 5, &json!({}), &ALL).await.unwrap_err();
        assert!(matches!(e, SearchError::Unavailable(_)), "{e:?}");

        let dir = tempfile::tempdir().unwrap();
        let pipeline = Pipeline::open(
            PipelineConfig::new(dir.path()),
            TesseractReader::default(),
            HashingEmbedder::default(),
            PixelPatchFallback::default(),
        )
        .unwrap();
        let s: TestSearcher = IngestSearcher(Arc::new(std::sync::OnceLock::from(pipeline)));
        assert_eq!(
            s.search("anything", 5, &json!({}), &ALL).await.unwrap(),
            json!([])
        );
        for options in [
            json!({"document": "one"}),
            json!({"mode": "fuzzy"}),
            // The offline visual fallback cannot embed a text question.
            json!({"mode": "visual"}),
        ] {
            let e = s.search("x", 5, &options, &ALL).await.unwrap_err();
            assert!(matches!(e, SearchError::Invalid(_)), "{options}: {e:?}");
        }
        let hits = s
            .search("x", 5, &json!({"mode": "hybrid", "document": 1}), &ALL)
            .await
            .unwrap();
        assert_eq!(hits, json!([]));
        // A question that is an image: checked, then searched on the visual index.
        use base64::Engine as _;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let mut png = Vec::new();
        image::GrayImage::from_fn(64, 64, |x, _| image::Luma([(x * 4) as u8]))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        for (options, names) in [
            (json!({"image": "not base64!"}), "base64"),
            (json!({"image": b64(b"not an image")}), "`image`"),
            (json!({"image": 7}), "a string"),
            (json!({"image": b64(&png), "mode": "text"}), "visual"),
        ] {
            let e = s.search("", 5, &options, &ALL).await.unwrap_err();
            assert!(
                matches!(&e, SearchError::Invalid(m) if m.contains(names)),
                "{options}: {e:?}"
            );
        }
        // An image with words: fused, so hybrid only.
        for (options, names) in [
            (json!({"image": b64(&png), "mode": "visual"}), "hybrid"),
            (json!({"image": b64(b"not an image")}), "`image`"),
        ] {
            let e = s.search("a table", 5, &options, &ALL).await.unwrap_err();
            assert!(
                matches!(&e, SearchError::Invalid(m) if m.contains(names)),
                "{options}: {e:?}"
            );
        }
        // An image whose header declares more pixels than the budget: a 413, from its header,
        // alone or with words, however many come at once.
        let bomb = b64(&crate::embed::test_images::png_declaring(11585, 11585));
        let alone = json!({ "image": bomb });
        let refusals = tokio::join!(
            s.search("", 5, &alone, &ALL),
            s.search("", 5, &alone, &ALL),
            s.search("a table", 5, &alone, &ALL),
            s.search("a table", 5, &alone, &ALL),
        );
        for e in [refusals.0, refusals.1, refusals.2, refusals.3] {
            let e = e.unwrap_err();
            assert!(
                matches!(&e, SearchError::TooLarge(m) if m.contains("11585 x 11585")),
                "{e:?}"
            );
        }
        let hits = s
            .search("", 5, &json!({"image": b64(&png), "mode": "visual"}), &ALL)
            .await
            .unwrap();
        assert_eq!(hits, json!([]), "no page is indexed yet");
        let hits = s
            .search("a table", 5, &json!({"image": b64(&png)}), &ALL)
            .await
            .unwrap();
        assert_eq!(hits, json!([]), "no page is indexed yet");
        for like in [
            json!({"document": 1}),
            json!({"document": 1, "page": 0}),
            json!(3),
        ] {
            let e = s
                .search("", 5, &json!({"like": like}), &ALL)
                .await
                .unwrap_err();
            assert!(
                matches!(&e, SearchError::Invalid(m) if m.contains("`like` must be")),
                "{like}: {e:?}"
            );
        }
        let e = s
            .search("", 5, &json!({"like": {"document": 1, "page": 2}}), &ALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, SearchError::Invalid(m) if m.contains("no page 2 of document 1")),
            "{e:?}"
        );
    }
}
