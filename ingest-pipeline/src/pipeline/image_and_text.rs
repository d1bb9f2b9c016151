//! A question that is an image and words together ([`Pipeline::search_image_and_text`]): the
//! pages that look like the image and the pages that hold the words (or their meaning), fused by
//! reciprocal rank, so a page both find rises above one that only one finds.

use super::Pipeline;
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::hybrid::{self, Mode, Scope, SearchError};
use crate::store::PageHit;
use crate::vision::VisionReader;

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// The best `k` pages for `image` and `text` together: [`Pipeline::search_image`] and the
    /// hybrid text search ([`Pipeline::search`] in [`Mode::Hybrid`]), each read deeper than `k`,
    /// fused by reciprocal rank ([`hybrid::fuse`]), within `scope` (each search keeps to it).
    pub async fn search_image_and_text(
        &self,
        image: Vec<u8>,
        text: String,
        k: usize,
        scope: Scope,
    ) -> Result<Vec<PageHit>, SearchError> {
        let depth = (k * 4).max(50);
        let looks = self.search_image(image, depth, scope.clone()).await?;
        let says = self.search(Mode::Hybrid, text, depth, scope).await?;
        Ok(hybrid::fuse(&[says, looks], k))
    }
}
