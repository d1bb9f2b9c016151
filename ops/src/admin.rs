//! A client of a running coordinator's admin API (`/api/v1/...`, behind its admin key): what
//! [`models`](crate::models::models) calls, and what a front reads the status from.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use horos_vllm_client::{Client, ClientConfig};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::OpsError;

/// The admin API of one coordinator.
#[derive(Debug, Clone)]
pub struct AdminClient {
    client: Client,
    base: String,
}

/// The base URL a client reaches a server bound to `bind` at: `http://HOST:PORT`, a wildcard
/// address (`0.0.0.0`, `::`) reached on loopback.
pub fn base_url(bind: SocketAddr) -> String {
    let reachable = match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), bind.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), bind.port())
        }
        _ => bind,
    };
    format!("http://{reachable}")
}

impl AdminClient {
    /// The admin API at `base` (`http://HOST:PORT`), with the admin `key` where the
    /// coordinator has one; a call gives up after `timeout` (a model's load waits until it
    /// serves: give it as long as a job may take).
    pub fn new(
        base: impl Into<String>,
        key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, OpsError> {
        let base = base.into();
        let mut config = ClientConfig::new(base.clone()).total_timeout(timeout);
        if let Some(key) = key {
            config = config.api_key(key);
        }
        Ok(Self {
            client: Client::with_config(config).map_err(OpsError::Client)?,
            base,
        })
    }

    /// The coordinator's address, `http://HOST:PORT`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`, its answer as `T`. A refusal is [`OpsError::Coordinator`] with the
    /// coordinator's message; no answer, [`OpsError::CoordinatorUnreachable`].
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, OpsError> {
        Ok(self.client.get(path).await?)
    }

    /// `POST path` with an empty JSON object, its answer as `T`.
    pub async fn post<T: DeserializeOwned>(&self, path: &str) -> Result<T, OpsError> {
        Ok(self.client.post(path, &json!({})).await?)
    }

    /// `GET path` as JSON.
    pub async fn get_json(&self, path: &str) -> Result<Value, OpsError> {
        self.get(path).await
    }

    /// `POST path` as JSON.
    pub async fn post_json(&self, path: &str) -> Result<Value, OpsError> {
        self.post(path).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_wildcard_bind_is_reached_on_loopback() {
        assert_eq!(
            base_url("0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080"
        );
        assert_eq!(base_url("[::]:8080".parse().unwrap()), "http://[::1]:8080");
        assert_eq!(
            base_url("10.0.0.2:9000".parse().unwrap()),
            "http://10.0.0.2:9000"
        );
    }

    #[tokio::test]
    async fn nothing_listening_says_where_it_looked() {
        let port = horos_testkit::free_port();
        let admin = AdminClient::new(
            format!("http://127.0.0.1:{port}"),
            None,
            Duration::from_secs(5),
        )
        .unwrap();
        let e = admin.get_json("/api/v1/models").await.unwrap_err();
        assert!(
            matches!(e, OpsError::CoordinatorUnreachable { .. }),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("no coordinator answers") && text.contains(&port.to_string()),
            "{text}"
        );
    }
}
