//! Searching the pipeline's pages: [`Pipeline::search`], the one entry point the command line,
//! MCP and `/v1/search` share.

use super::Pipeline;
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::hybrid::{self, Mode, Query, SearchError};
use crate::store::PageHit;
use crate::vision::VisionReader;

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// The best `k` pages for `text` (any text a person typed: never a syntax error) in `mode`:
    /// full text, text vectors, visual MaxSim or their fusion ([`hybrid::search`]), within
    /// `document` when given. The visual index is scanned on every core of the machine and
    /// stays in memory between questions.
    pub async fn search(
        &self,
        mode: Mode,
        text: String,
        k: usize,
        document: Option<i64>,
    ) -> Result<Vec<PageHit>, SearchError> {
        let q = Query {
            text,
            k,
            document,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        };
        let open = || Ok(self.reads());
        hybrid::search(
            open,
            self.text_embedder(),
            self.visual(),
            self.visual_index(),
            mode,
            &q,
        )
        .await
    }
}
