//! A client of the running coordinator's admin API (`/api/v1/...`), for the commands and MCP
//! tools that act on a running `horos-ref run`: its URL and key come from `[coordinator]`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use horos_vllm_client::{Client, ClientConfig, Error};
use serde_json::{Value, json};

use crate::config::Config;
use crate::error::AppError;

/// The admin API of the coordinator `config` describes.
pub struct Admin {
    client: Client,
    base: String,
}

/// Where a client reaches a server bound to `bind` (a wildcard address is reached on loopback).
fn reachable(bind: SocketAddr) -> SocketAddr {
    match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), bind.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), bind.port())
        }
        _ => bind,
    }
}

impl Admin {
    /// The client, or a usage error when the configuration has no `[coordinator]`.
    pub fn new(config: &Config, timeout: Duration) -> Result<Self, AppError> {
        let c = config.coordinator.as_ref().ok_or_else(|| {
            AppError::Usage(
                "no [coordinator] section: there is no admin API to call (add [coordinator] \
                 and start `horos-ref run` with this configuration)"
                    .into(),
            )
        })?;
        let base = format!("http://{}", reachable(c.settings.bind));
        let mut cc = ClientConfig::new(base.clone()).total_timeout(timeout);
        // The admin key as the coordinator reads it: `api_key`, or `api_key_env`'s variable.
        let key = c
            .settings
            .admin_key(|var| std::env::var(var).ok())
            .map_err(|e| AppError::Usage(format!("coordinator.{e}")))?;
        if let Some(key) = key {
            cc = cc.api_key(key);
        }
        Ok(Self {
            client: Client::with_config(cc)?,
            base,
        })
    }

    /// The coordinator's address, `http://HOST:PORT`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, AppError> {
        self.client.get(path).await.map_err(explain)
    }

    /// `POST path` with an empty JSON object.
    pub async fn post(&self, path: &str) -> Result<Value, AppError> {
        self.client.post(path, &json!({})).await.map_err(explain)
    }
}

/// The coordinator's own error message where it sent one, and what to do when nothing answers.
fn explain(e: Error) -> AppError {
    match e {
        Error::Status { status, body } => {
            let message = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            // A refused key is the one thing the operator can fix from here.
            let hint = match status {
                401 => {
                    " (set [coordinator] api_key_env's variable (or api_key) to the key the \
                     running coordinator was started with)"
                }
                403 => " (this key may not do that: use the admin key)",
                _ => "",
            };
            AppError::Usage(format!(
                "the coordinator answered {status}: {message}{hint}"
            ))
        }
        Error::Connect { url, message, .. } => AppError::Usage(format!(
            "no coordinator answers at {url} ({message}): is `horos-ref run` running with this \
             configuration?"
        )),
        other => AppError::Client(other),
    }
}

/// The path of a model operation (`load`, `unload`, `pin`, `unpin`) on `model`.
pub fn model_op_path(model: &str, op: &str) -> String {
    format!("/api/v1/models/{model}/{op}")
}
