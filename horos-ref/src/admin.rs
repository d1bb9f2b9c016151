//! The running coordinator's admin API (`/api/v1/...`) for the commands and MCP tools that act
//! on a running `horos-ref run`: a [`horos_ops::admin::AdminClient`] whose address and key come
//! from `[coordinator]`.

use std::time::Duration;

use horos_ops::admin::{AdminClient, base_url};
use horos_ops::remote::Remote;

use crate::config::Config;
use crate::error::AppError;

/// The admin API of the coordinator `config` describes, or a usage error when the
/// configuration has no `[coordinator]`.
pub fn client(config: &Config, timeout: Duration) -> Result<AdminClient, AppError> {
    let c = config.coordinator.as_ref().ok_or_else(|| {
        AppError::Usage(
            "no [coordinator] section: there is no admin API to call (add [coordinator] and \
             start `horos-ref run` with this configuration)"
                .into(),
        )
    })?;
    // The admin key as the coordinator reads it: `api_key`, or `api_key_env`'s variable.
    let key = c
        .settings
        .admin_key(|var| std::env::var(var).ok())
        .map_err(|e| AppError::Usage(format!("coordinator.{e}")))?;
    let key = key.map(|k| k.expose().to_owned());
    Ok(AdminClient::new(base_url(c.settings.bind), key, timeout)?)
}

/// The data plane (`/v1/...`) of the coordinator `config` describes, called with `key` (else
/// the HOROS_API_KEY environment variable; none without it), or a usage error when the
/// configuration has no `[coordinator]`.
pub fn data_plane(
    config: &Config,
    key: Option<String>,
    timeout: Duration,
) -> Result<Remote, AppError> {
    let c = config.coordinator.as_ref().ok_or_else(|| {
        AppError::Usage(
            "no [coordinator] section: there is no coordinator to call (add [coordinator] and \
             start `horos-ref run` with this configuration)"
                .into(),
        )
    })?;
    let key = key.or_else(|| std::env::var("HOROS_API_KEY").ok());
    Ok(Remote::new(&base_url(c.settings.bind), key, timeout)?)
}
