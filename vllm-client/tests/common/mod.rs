//! Finding the real inference servers the integration tests run against.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use horos_vllm_client::{Client, ClientConfig, ServerLoad};

/// The client for a real server, or `None` (after a SKIP line) when it is not running. Panics
/// instead when `require_var` is `1` ([`horos_testkit::skip_or_fail`]): CI sets it so that these
/// tests cannot silently skip.
pub async fn real_server(
    url_var: &str,
    default_url: &str,
    require_var: &str,
    how: &str,
) -> Option<Client> {
    let url = std::env::var(url_var).unwrap_or_else(|_| default_url.to_owned());
    let client = Client::with_config(
        ClientConfig::new(&url)
            .total_timeout(Duration::from_secs(300))
            .connect_timeout(Duration::from_secs(2)),
    )
    .unwrap();
    let probe =
        Client::with_config(ClientConfig::new(&url).total_timeout(Duration::from_secs(5))).unwrap();
    match probe.health().await {
        Ok(()) => Some(client),
        Err(e) => {
            horos_testkit::skip_or_fail(
                require_var,
                &format!("no server answers at {url} ({url_var}): {e}. {how}"),
            );
            None
        }
    }
}

/// Polls the server's load while `fut` runs; returns `fut`'s output and the most requests seen running.
pub async fn max_running_during<F: std::future::Future>(
    client: &Client,
    fut: F,
) -> (F::Output, u64) {
    let watcher = client.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let poll = tokio::spawn(async move {
        let mut max = 0;
        loop {
            if let Ok(ServerLoad { running, .. }) = watcher.load().await {
                max = max.max(running);
            }
            tokio::select! {
                _ = &mut stop_rx => break,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        max
    });
    let out = fut.await;
    let _ = stop_tx.send(());
    let max = poll.await.unwrap();
    (out, max)
}

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}
