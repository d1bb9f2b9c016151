//! The feeder's seam: [`horos_feeder::ServerControl`] for both kinds of server.

use async_trait::async_trait;
use horos_feeder::ServerControl;

use crate::docker::DockerServer;
use crate::process::ProcessServer;
use crate::server::ManagedServer;

/// `restart`: start again unless a concurrent restart (the supervisor's) already brought it
/// back; `healthy`: running and passing the probe (the tiny inference included when due).
macro_rules! server_control {
    ($t:ty) => {
        #[async_trait]
        impl ServerControl for $t {
            async fn restart(&self) -> Result<(), String> {
                let token = self.restart_token();
                self.restart_after(token).await.map_err(|e| e.to_string())
            }

            async fn healthy(&self) -> bool {
                self.check().await.is_ok()
            }
        }
    };
}

server_control!(ProcessServer);
server_control!(DockerServer);
