//! `horos-ref mcp`: the HOROS tools ([`horos_ops::mcp::McpTools`]) over JSON-RPC 2.0 / MCP on
//! stdin and stdout, on the configuration's lanes, `[ingest]` pipeline and coordinator. The
//! jobs are run by `horos-ref run` (a separate process on the same database).

use std::time::Duration;

use horos_ops::documents::Documents;
use horos_ops::mcp::{BoxError, McpTools, OpenDocuments};
use squeueha::AsyncQueue;

use crate::config::Config;
use crate::error::AppError;

/// The `[ingest]` pipeline, opened by the first tool that needs it.
struct ConfiguredDocuments(Config);

#[horos_mcp::async_trait]
impl OpenDocuments for ConfiguredDocuments {
    fn configured(&self) -> bool {
        self.0.ingest.is_some()
    }

    async fn open(&self) -> Result<Documents, BoxError> {
        let documents = crate::ingest::documents(&self.0).await?;
        // The text vectors in memory, as `run` has them: built in the background (logged with
        // its time), questions scan the store meanwhile.
        let pipeline = documents.pipeline().clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = pipeline.build_text_index() {
                tracing::warn!(error = %e, "the text-vector index was not built: questions scan the store");
            }
        });
        Ok(documents)
    }
}

/// Serves the tools on stdin/stdout until end of input.
pub async fn mcp(config: Config, queue: AsyncQueue) -> Result<(), AppError> {
    let lanes = crate::lanes::lane_jobs(&config, queue);
    // A load waits until the model serves: as long as a job may.
    let admin = crate::admin::client(&config, Duration::from_secs(3600)).map_err(BoxError::from);
    // The data-plane key is HOROS_API_KEY's (none without it), as for `horos-ref ask`.
    let data =
        crate::admin::data_plane(&config, None, Duration::from_secs(600)).map_err(BoxError::from);
    let tools = McpTools::new(lanes, ConfiguredDocuments(config), admin).with_data_plane(data);
    let server = tools
        .server("horos-ref", env!("CARGO_PKG_VERSION"))
        .map_err(|e| AppError::Usage(e.to_string()))?;
    horos_mcp::serve_process_stdio(server)
        .await
        .map_err(|e| AppError::Usage(e.to_string()))
}
