//! The feeder's side of the seam with whatever runs the inference server: the trait is
//! [`horos_server_control::ServerControl`]; [`HealthOnly`] is the control of a server the feeder
//! does not own.

use horos_server_control::{ControlError, ServerControl};

/// A [`ServerControl`] for a server nobody here may restart (someone else runs it): health is
/// the server's `/health`; a recovery only waits up to `wait` for it to come back.
#[derive(Debug, Clone)]
pub struct HealthOnly {
    client: horos_vllm_client::Client,
    wait: std::time::Duration,
}

impl HealthOnly {
    /// Health checks through `client`; a recovery waits up to `wait` for the server to answer.
    pub fn new(client: horos_vllm_client::Client, wait: std::time::Duration) -> Self {
        HealthOnly { client, wait }
    }
}

#[async_trait::async_trait]
impl ServerControl for HealthOnly {
    async fn healthy(&self) -> bool {
        self.client.health().await.is_ok()
    }

    async fn recover(&self) -> Result<(), ControlError> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            match self.client.health().await {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(ControlError::NotRunning(format!(
                        "server still down after {:?}: {e}",
                        self.wait
                    )));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }
}
