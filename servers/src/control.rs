//! The feeder's seam, [`ServerControl`], for both kinds of server.

use async_trait::async_trait;
use horos_server_control::{ControlError, ServerControl};

use crate::docker::DockerServer;
use crate::process::ProcessServer;
use crate::server::ManagedServer;

/// Starts `server` again unless a concurrent restart already brought it back.
async fn recover<S: ManagedServer + ?Sized>(server: &S) -> Result<(), ControlError> {
    let token = server.restart_token();
    server
        .restart_after(token)
        .await
        .map_err(ControlError::from)
}

#[async_trait]
impl ServerControl for ProcessServer {
    async fn healthy(&self) -> bool {
        self.check().await.is_ok()
    }
    async fn recover(&self) -> Result<(), ControlError> {
        recover(self).await
    }
}

#[async_trait]
impl ServerControl for DockerServer {
    async fn healthy(&self) -> bool {
        self.check().await.is_ok()
    }
    async fn recover(&self) -> Result<(), ControlError> {
        recover(self).await
    }
}
