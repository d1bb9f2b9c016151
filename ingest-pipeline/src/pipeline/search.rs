//! Searching the pipeline's pages: [`Pipeline::search`], the one entry point the command line,
//! MCP and `/v1/search` share; [`Pipeline::search_image`] for a question that is an image.

use super::Pipeline;
use crate::embed::{EmbedError, TextEmbedder, VisualEmbedder, check_image_size};
use crate::hybrid::{self, Mode, Query, Scope, SearchError};
use crate::store::PageHit;
use crate::vision::VisionReader;
use crate::visual_search::{self, VisualQuery, VisualSearchError};
use crate::worker::{WorkerError, WorkerPool};

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// The best `k` pages for `text` (any text a person typed: never a syntax error) in `mode`:
    /// full text, text vectors, visual MaxSim or their fusion ([`hybrid::search`]), within
    /// `scope` (one document when given, the documents of its collections). The visual index is
    /// scanned on every core of the machine and stays in memory between questions.
    pub async fn search(
        &self,
        mode: Mode,
        text: String,
        k: usize,
        scope: Scope,
    ) -> Result<Vec<PageHit>, SearchError> {
        let q = Query {
            text,
            k,
            document: scope.document,
            collections: scope.collections,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        };
        let open = || Ok(self.reads());
        hybrid::search(
            open,
            self.text_embedder(),
            self.visual(),
            self.visual_index(),
            self.text_index(),
            mode,
            &q,
        )
        .await
    }

    /// The best `k` pages that look like the image `image` (a page image, a sketch, a scan: PNG,
    /// JPEG or any format the `image` crate was built with), by MaxSim over the visual index,
    /// within `scope`. Works with any visual embedder, the pixel-patch fallback included (it
    /// finds a page again from another rendering or scan of it).
    ///
    /// An image whose header declares more than
    /// [`PipelineConfig::max_image_pixels`](super::PipelineConfig::max_image_pixels) is refused
    /// with [`EmbedError::ImageTooLarge`](crate::embed::EmbedError::ImageTooLarge) (in
    /// [`VisualSearchError::Embed`]) before it is decoded or sent to a model; one whose header
    /// cannot be read, with [`EmbedError::Image`](crate::embed::EmbedError::Image).
    ///
    /// With PDF workers ([`PipelineConfig::pdf_workers`](super::PipelineConfig::pdf_workers)),
    /// the image is decoded in one of its own pool (its places are not the documents') and
    /// goes on as the RGB PNG the worker made of it: this process never runs a decoder on the
    /// caller's bytes. An image that breaks the worker is
    /// [`EmbedError::Image`](crate::embed::EmbedError::Image) with its reason.
    pub async fn search_image(
        &self,
        image: Vec<u8>,
        k: usize,
        scope: Scope,
    ) -> Result<Vec<PageHit>, VisualSearchError> {
        let max_pixels = self.inner.cfg.max_image_pixels;
        check_image_size(&image, max_pixels)?;
        let image = match &self.inner.image_workers {
            Some(pool) => decode_in_worker(pool, &image, max_pixels).await?,
            None => image,
        };
        self.search_by_image(image, k, scope).await
    }

    /// [`Pipeline::search_image`] without the question's pixel budget: for an image this
    /// pipeline rendered (under [`RenderConfig::max_page_pixels`](crate::render::RenderConfig)).
    async fn search_by_image(
        &self,
        image: Vec<u8>,
        k: usize,
        scope: Scope,
    ) -> Result<Vec<PageHit>, VisualSearchError> {
        let query = VisualQuery {
            text: String::new(),
            k,
            docs: scope.document.map(|d| vec![d]),
            collections: scope.collections,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        };
        visual_search::search_by_image_cached(
            self.reads(),
            self.visual(),
            self.visual_index(),
            image,
            query,
        )
        .await
    }

    /// "Pages like this one": the best `k` pages that look like page `page` of document
    /// `like` (its stored page image as the question, so the page itself comes first), within
    /// `scope`. [`VisualSearchError::NoPage`] for a page that was never rendered, and for a page
    /// of a document outside `scope`'s collections (refused as if it did not exist: its image is
    /// never read).
    pub async fn search_like(
        &self,
        like: i64,
        page: u32,
        k: usize,
        scope: Scope,
    ) -> Result<Vec<PageHit>, VisualSearchError> {
        let mut reads = self.reads();
        let collections = scope.collections.clone();
        let image = tokio::task::spawn_blocking(move || {
            let no_page = VisualSearchError::NoPage {
                document: like,
                page,
            };
            if !crate::store::document_readable(&mut reads, like, &collections)? {
                return Err(no_page);
            }
            let info = crate::store::page_info(&mut reads, like, page)?.ok_or(no_page)?;
            std::fs::read(&info.image_path).map_err(|source| VisualSearchError::PageImage {
                document: like,
                page,
                path: info.image_path,
                source,
            })
        })
        .await
        .map_err(|e| VisualSearchError::Task(e.to_string()))??;
        self.search_by_image(image, k, scope).await
    }
}

/// `image` decoded by a worker of `pool` (at most `max_pixels`): its RGB PNG.
async fn decode_in_worker(
    pool: &WorkerPool,
    image: &[u8],
    max_pixels: u64,
) -> Result<Vec<u8>, VisualSearchError> {
    let decoded = async {
        let mut worker = pool.get().await?;
        let decoded = worker.decode_image(image, max_pixels).await;
        worker.finish().await;
        decoded
    };
    match decoded.await {
        Ok(decoded) => Ok(decoded.png),
        // The image's fault: not an image, or one that broke its decoder.
        Err(e @ (WorkerError::Image(_) | WorkerError::Broken { .. })) => {
            Err(EmbedError::Image(e.to_string()).into())
        }
        Err(e) => Err(VisualSearchError::Task(e.to_string())),
    }
}
