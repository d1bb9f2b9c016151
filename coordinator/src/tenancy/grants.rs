//! What a caller may do, as the configuration says it: a key's or a client's [`Limits`] (with
//! its [`Cooldown`]), a data-plane [`VirtualKey`], and the [`Grants`] that bound what a key may
//! ask of the scheduler.

use serde::{Deserialize, Serialize};

use crate::error::InvalidConfig;

/// What a caller may do. Every limit is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Models it may call (task rungs outside the list are skipped); empty: every model.
    pub models: Vec<String>,
    /// Requests in progress at once.
    pub max_concurrency: Option<usize>,
    /// Requests per minute.
    pub rpm: Option<u32>,
    /// Tokens per minute, prompt and completion together, as the upstreams' `usage` reports
    /// them (counted when an answer ends, so one request may overdraw; the next waits).
    pub tpm: Option<u64>,
    /// A request pattern that puts the caller in a cooldown (see [`Cooldown`]).
    pub cooldown: Option<Cooldown>,
}

/// A caller that sends more than `requests` requests within `window_s` seconds waits
/// `cooldown_s` seconds: every request until then is answered 429 with `Retry-After` (the
/// seconds left). Unlike `rpm`, which paces a steady flow, this stops a burst for a while.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cooldown {
    /// Requests let through within the window.
    pub requests: u32,
    /// The window, seconds.
    pub window_s: f64,
    /// How long the caller then waits, seconds.
    pub cooldown_s: f64,
}

impl Limits {
    pub(crate) fn is_unlimited(&self) -> bool {
        self.models.is_empty()
            && self.max_concurrency.is_none()
            && self.rpm.is_none()
            && self.tpm.is_none()
            && self.cooldown.is_none()
    }

    pub(crate) fn validate(&self, key: &str) -> Result<(), InvalidConfig> {
        let bad = |what: &str, value: String| InvalidConfig {
            key: format!("{key}.{what}"),
            value,
            expected: "at least 1",
        };
        if self.max_concurrency == Some(0) {
            return Err(bad("max_concurrency", "0".into()));
        }
        if self.rpm == Some(0) {
            return Err(bad("rpm", "0".into()));
        }
        if self.tpm == Some(0) {
            return Err(bad("tpm", "0".into()));
        }
        if let Some(c) = &self.cooldown {
            if c.requests == 0 {
                return Err(bad("cooldown.requests", "0".into()));
            }
            for (what, v) in [("window_s", c.window_s), ("cooldown_s", c.cooldown_s)] {
                if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
                    return Err(InvalidConfig {
                        key: format!("{key}.cooldown.{what}"),
                        value: v.to_string(),
                        expected: "a positive number of seconds, at most a day",
                    });
                }
            }
        }
        Ok(())
    }
}

/// A data-plane API key: `[coordinator.keys.NAME]`. The key itself is never written in the
/// configuration: it is read from an environment variable, or given as its SHA-256.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VirtualKey {
    /// Environment variable holding the key (read at start; unset is an error).
    pub key_env: Option<String>,
    /// The key's SHA-256, 64 hex digits (`printf %s KEY | sha256sum`).
    pub key_sha256: Option<String>,
    /// Models it may call; empty: every model.
    pub models: Vec<String>,
    /// Requests in progress at once.
    pub max_concurrency: Option<usize>,
    /// Requests per minute.
    pub rpm: Option<u32>,
    /// Tokens per minute (see [`Limits::tpm`]).
    pub tpm: Option<u64>,
    /// A request pattern that puts the key in a cooldown (see [`Cooldown`]).
    pub cooldown: Option<Cooldown>,
    /// The most important rank (smallest `x_priority`) the key may ask for; `None`: the
    /// operator's `default_priority`. A smaller `x_priority` is raised to it.
    pub top_priority: Option<i32>,
    /// Whether the key's `keep_alive` is honoured (it may unload a model other callers share,
    /// `keep_alive: 0`, or hold one warm). Off: its `keep_alive` is ignored.
    pub may_unload: bool,
    /// The document collections the key reads (`POST /v1/search`, `POST /v1/answers`); `"*"`:
    /// every collection. `None`: the `"default"` collection only; `[]`: none.
    pub collections: Option<Vec<String>>,
}

/// What a caller may ask of the scheduler beyond its limits: where keys are configured, a
/// caller's `x_priority`, `x_timeout_s` and `keep_alive` are bounded by these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grants {
    /// The most important rank it may ask for (`None`: the operator's default).
    pub top_priority: Option<i32>,
    /// Whether its `keep_alive` is honoured.
    pub may_unload: bool,
}

impl VirtualKey {
    /// Its limits.
    pub fn limits(&self) -> Limits {
        Limits {
            models: self.models.clone(),
            max_concurrency: self.max_concurrency,
            rpm: self.rpm,
            tpm: self.tpm,
            cooldown: self.cooldown,
        }
    }
}
