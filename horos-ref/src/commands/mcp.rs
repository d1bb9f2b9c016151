//! `horos-ref mcp`: the HOROS tools over JSON-RPC 2.0 / MCP on stdin and stdout.

use squeueha::AsyncQueue;

use crate::config::Config;
use crate::error::AppError;

pub async fn mcp(config: Config, queue: AsyncQueue) -> Result<(), AppError> {
    crate::mcp_tools::serve(config, queue)
        .await
        .map_err(AppError::Usage)
}
