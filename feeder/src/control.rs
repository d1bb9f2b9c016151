//! The seam between the feeder and whatever runs the inference server.

/// Restarts and health-checks one inference server. The reference binary implements it with
/// processes or Docker containers; tests with `horos_fakeai::FakeProcess`.
///
/// The feeder calls [`healthy`](ServerControl::healthy) after a batch saw connections cut
/// (`ServerCrashed`) to tell a crash from a hiccup, and [`restart`](ServerControl::restart) after a
/// crash (before each bisection rerun) or when the server was found down.
#[async_trait::async_trait]
pub trait ServerControl: Send + Sync {
    /// Starts the server again (on the same address) and returns once it answers, or fails.
    async fn restart(&self) -> Result<(), String>;
    /// Whether the server is up and answering.
    async fn healthy(&self) -> bool;
}

/// A [`ServerControl`] for a server the feeder may not restart (someone else runs it): health is
/// the server's `/health`; a restart only waits up to `wait` for it to come back.
#[derive(Debug, Clone)]
pub struct HealthOnly {
    client: horos_vllm_client::Client,
    wait: std::time::Duration,
}

impl HealthOnly {
    /// Health checks through `client`; a "restart" waits up to `wait` for the server to answer.
    pub fn new(client: horos_vllm_client::Client, wait: std::time::Duration) -> Self {
        HealthOnly { client, wait }
    }
}

#[async_trait::async_trait]
impl ServerControl for HealthOnly {
    async fn restart(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            match self.client.health().await {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("server still down after {:?}: {e}", self.wait));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }

    async fn healthy(&self) -> bool {
        self.client.health().await.is_ok()
    }
}
