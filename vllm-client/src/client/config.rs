//! [`ClientConfig`]: where the server is and how long a call may take.

use std::time::Duration;

/// The client's settings. Its `Debug` shows whether an API key is set, never the key.
#[derive(Clone)]
pub struct ClientConfig {
    /// The server, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted and ignored).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Longest time to open a TCP connection (default 5 s).
    pub connect_timeout: Duration,
    /// Longest wait for the response headers once the request is sent (default: none, bounded by the
    /// total timeout). For a non-streaming call the headers come with the whole answer.
    pub first_byte_timeout: Option<Duration>,
    /// Longest time for a whole call, streams included, from the call to the last byte (default 120 s).
    pub total_timeout: Duration,
    /// Most calls in flight to this server at once; more wait for a turn (default 64).
    pub max_concurrency: usize,
    /// Largest non-streamed response body, and largest single stream event (default 64 MiB).
    pub max_response_bytes: usize,
    /// How long an idle connection stays in the pool (default 4 s: shorter than the keep-alive
    /// timeout of vLLM's and llama-server's HTTP servers, 5 s, so that the client never reuses a
    /// connection the server is closing, which would look like a crash).
    pub pool_idle_timeout: Duration,
    /// The path [`Client::health`](crate::Client::health) asks (default `/health`, what vLLM and
    /// llama-server answer; a server of another kind may have its own). A leading `/` is added
    /// when missing.
    pub health_path: String,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[secret]"))
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("total_timeout", &self.total_timeout)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("health_path", &self.health_path)
            .finish()
    }
}

impl ClientConfig {
    /// The defaults for a server.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: None,
            total_timeout: Duration::from_secs(120),
            max_concurrency: 64,
            max_response_bytes: 64 * 1024 * 1024,
            pool_idle_timeout: Duration::from_secs(4),
            health_path: "/health".to_owned(),
        }
    }

    /// Sets the total timeout.
    pub fn total_timeout(mut self, d: Duration) -> Self {
        self.total_timeout = d;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Sets the first-byte timeout.
    pub fn first_byte_timeout(mut self, d: Duration) -> Self {
        self.first_byte_timeout = Some(d);
        self
    }

    /// Sets the concurrency limit (at least 1).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the path [`Client::health`](crate::Client::health) asks.
    pub fn health_path(mut self, path: impl Into<String>) -> Self {
        self.health_path = path.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debug_of_a_config_never_shows_its_key() {
        let mut c = ClientConfig::new("http://127.0.0.1:8000");
        c.api_key = Some("sk-do-not-print".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-do-not-print"), "{shown}");
        assert!(shown.contains("[secret]"), "{shown}");
    }
}
