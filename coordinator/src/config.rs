//! The coordinator's settings (one serde struct, so a binary can read them from its
//! configuration file) and the task registry entries.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use horos_manifest::ModelManifest;
use serde::{Deserialize, Serialize};

use crate::error::InvalidConfig;
use crate::secret::Secret;
use crate::tenancy::Tenancy;
use crate::tenancy::limits::{Limits, VirtualKey};
use crate::tenancy::profiles::ClientProfile;
pub use crate::upstream::remote::RemoteModel;
pub use crate::upstream::tasks::TaskSpec;

/// The default listen address: loopback only, port 8210.
pub const DEFAULT_BIND: &str = "127.0.0.1:8210";

/// Everything configurable about a [`Coordinator`](crate::Coordinator).
///
/// Priorities are ranks: **smaller is more important**, as in the model pool (see
/// [`queue_priority`](crate::queue_priority)).
///
/// It is the `[coordinator]` section of a configuration file as it is: every key has a default,
/// an unknown key is refused (a typo never passes silently), and [`validate`](Self::validate)
/// checks the ranges ([`Coordinator::builder`](crate::Coordinator::builder)'s `start` calls it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoordinatorConfig {
    /// Where a binary should bind (the library serves whatever listener it is given).
    pub bind: SocketAddr,
    /// Largest request body accepted; bigger ones get 413.
    pub max_body_bytes: usize,
    /// Longest time to receive a request's whole body once its headers are in, seconds; a
    /// client that trickles it gets 408 and its connection is closed (30).
    pub body_read_timeout_s: f64,
    /// Most client connections served at once; beyond it a new connection is answered 503 with
    /// `Retry-After` and closed, so the process keeps descriptors for its upstreams (1024).
    pub max_connections: usize,
    /// Time budget of a call when neither the request nor its task sets one, seconds. A cold
    /// load inside the call counts against it.
    pub default_budget_s: f64,
    /// Estimated cold-load time of a model before any of its loads was measured, seconds.
    pub default_load_s: f64,
    /// Per-model overrides of `default_load_s`.
    pub load_s: BTreeMap<String, f64>,
    /// Weight of the newest measurement in the moving average of load times (0..=1).
    pub load_avg_alpha: f64,
    /// Priority of a request that sets none.
    pub default_priority: i32,
    /// Requests sent upstream at the same time, all models together.
    pub max_in_flight: usize,
    /// Requests sent upstream at the same time per model.
    pub per_model_concurrency: usize,
    /// Per-model overrides of `per_model_concurrency`.
    pub model_concurrency: BTreeMap<String, usize>,
    /// Wait for an upstream's response headers at most this long, seconds (a hung server
    /// must not hold a slot forever).
    pub upstream_timeout_s: f64,
    /// Attempts of one request, the rungs of its task's ladder and retries of the same model
    /// together (1: neither fallback nor retry). A request moves on after a refused
    /// connection, a 5xx or 429 answer, or no first byte within `upstream_timeout_s`, and only
    /// while its budget lasts; an answer whose first byte went to the client is never
    /// replayed (3).
    pub max_attempts: u32,
    /// Pause before retrying the same model, seconds, doubled at each retry; an upstream's
    /// `Retry-After` wins when longer (0.25).
    pub retry_backoff_s: f64,
    /// The task registry.
    pub tasks: BTreeMap<String, TaskSpec>,
    /// The model manifest: what the coordinator does per model, by the name clients use (a chat
    /// template rendered here, the thinking mode, reasoning split from the answer). See
    /// [`ModelManifest`].
    pub manifest: BTreeMap<String, ModelManifest>,
    /// Models served by OpenAI-compatible APIs elsewhere ("cloud" models), by the name clients
    /// use here. They are always ready, count as cloud models for the fallback guard, and are
    /// called with the API key read from the environment variable each one names.
    pub remotes: BTreeMap<String, RemoteModel>,
    /// Initial value of the cloud-fallback guard (the persisted value wins once set).
    pub allow_cloud_fallback: bool,
    /// Model name prefixes that denote cloud models (stripped from task fallbacks when the
    /// guard is off).
    pub cloud_prefixes: Vec<String>,
    /// Bearer token required by the admin API (`/api/*`); `None`: open. Required (it or
    /// `api_key_env`) when `bind` is not a loopback address, unless `allow_unauthenticated_admin`
    /// says otherwise. Prefer `api_key_env`: a key written here is a secret in a file.
    pub api_key: Option<Secret>,
    /// The environment variable holding the admin key (instead of `api_key`; read at start,
    /// unset or empty is an error). `horos-ref`'s admin commands read the same variable.
    pub api_key_env: Option<String>,
    /// Serve `/status*` and `/metrics` without the admin key on a listener that is not a
    /// loopback address (a warning is logged at start-up). Off: there they need the admin key
    /// (`Authorization: Bearer KEY`), as the pages show documents, decisions, callers and usage.
    pub public_status: bool,
    /// Host names (with or without a port) this server answers for besides loopback names
    /// (`localhost`, `*.localhost`) and IP literals; a request whose `Host` is another name
    /// gets 421 before anything of it is read (DNS rebinding). `["*"]`: every name.
    pub public_hosts: Vec<String>,
    /// Browser origins (`https://app.example:8443`) allowed to change state (POST, PUT,
    /// DELETE) and to read answers (CORS). Every other cross-site write gets 403. `["*"]`:
    /// every origin (never on a box whose admin API has no key).
    pub allowed_origins: Vec<String>,
    /// Models (names as callers send them; `"*"`: every model) whose chat requests may carry
    /// an `image_url` with an `http(s)` address. Elsewhere such a request is refused (400): the
    /// inference server would fetch the address on the caller's behalf, from inside the
    /// network. `data:` URLs always pass.
    pub allow_remote_images: Vec<String>,
    /// Seconds an answer may wait on a slow reader (a stalled stream, a client that stopped
    /// reading) before the connection is closed and its model slot given back.
    pub write_timeout_s: f64,
    /// Data-plane API keys ("virtual keys") by name, each with its allowed models and limits.
    /// When any is set, a data-plane request must carry one (`Authorization: Bearer KEY`)
    /// unless `allow_anonymous` is on; a wrong key is always a 401.
    pub keys: BTreeMap<String, VirtualKey>,
    /// With `keys`, let requests without a key in too (limited by `clients`).
    pub allow_anonymous: bool,
    /// With `keys`, the document collections callers without a key search and are answered
    /// from (`"*"`: every collection; `[]`: none). Without keys, every caller reads every
    /// collection (one scope).
    pub anonymous_collections: Vec<String>,
    /// Limits of callers without a key, by `x_client_id`; `"*"` applies to every other client
    /// and to requests without an id.
    pub clients: BTreeMap<String, Limits>,
    /// Callers' defaults by profile name (a caller's `x_client_id`, `key:NAME` for a virtual
    /// key, `"*"` for every other caller): model aliases, priority, budget, allowed models,
    /// thinking mode. Changed at run time through `/api/v1/profiles`.
    pub profiles: BTreeMap<String, ClientProfile>,
    /// Serve the admin API without a key on a non-loopback `bind` (anyone who can reach the
    /// port may change the settings and requeue jobs). Off: such a configuration is refused.
    pub allow_unauthenticated_admin: bool,
    /// SQLite file for the runtime settings and the async jobs (squeueha queue + results).
    /// `None`: settings live in memory only and `/v1/jobs` answers 501.
    pub state_path: Option<PathBuf>,
    /// Jobs processed at the same time by this process (0: submit only, no worker).
    pub job_workers: usize,
    /// Visibility timeout of a claimed job, seconds (renewed while it runs).
    pub job_visibility_s: u64,
    /// Attempts of a job that fails with a retryable error before it is dead.
    pub job_max_attempts: u32,
    /// Time budget of a job's call, seconds (background work tolerates cold loads).
    pub job_budget_s: f64,
    /// How long a finished job's result (and its place in the admin's job list) is kept,
    /// seconds (7 days).
    pub job_result_retention_s: f64,
    /// How often the control plane's snapshot is refreshed, milliseconds.
    pub snapshot_interval_ms: u64,
    /// How often the upstream pool's housekeeping runs (stay-warm, keep-alive), milliseconds.
    pub maintain_interval_ms: u64,
    /// Recent routing decisions shown on the status page.
    pub decisions_kept: usize,
    /// Other queues of the state database shown with the job queues in `/metrics` and
    /// `/status` (a binary that also runs a feeder lists its lanes here).
    pub watch_queues: Vec<String>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8210)),
            max_body_bytes: 8 * 1024 * 1024,
            body_read_timeout_s: 30.0,
            max_connections: 1024,
            default_budget_s: 120.0,
            default_load_s: 60.0,
            load_s: BTreeMap::new(),
            load_avg_alpha: 0.3,
            default_priority: 5,
            max_in_flight: 256,
            per_model_concurrency: 8,
            model_concurrency: BTreeMap::new(),
            upstream_timeout_s: 600.0,
            max_attempts: 3,
            retry_backoff_s: 0.25,
            tasks: BTreeMap::new(),
            remotes: BTreeMap::new(),
            manifest: BTreeMap::new(),
            allow_cloud_fallback: true,
            cloud_prefixes: vec!["claude:".to_owned()],
            api_key: None,
            api_key_env: None,
            public_status: false,
            public_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            allow_remote_images: Vec::new(),
            write_timeout_s: 30.0,
            allow_unauthenticated_admin: false,
            keys: BTreeMap::new(),
            allow_anonymous: false,
            anonymous_collections: vec![horos_server_control::Collection::DEFAULT.to_owned()],
            clients: BTreeMap::new(),
            profiles: BTreeMap::new(),
            state_path: None,
            job_workers: 4,
            job_visibility_s: 300,
            job_max_attempts: 3,
            job_budget_s: 3600.0,
            job_result_retention_s: 7.0 * 86_400.0,
            snapshot_interval_ms: 500,
            maintain_interval_ms: 1000,
            decisions_kept: 200,
            watch_queues: Vec::new(),
        }
    }
}

impl CoordinatorConfig {
    /// The part of these settings a reload changes (keys, limits, profiles).
    pub fn tenancy(&self) -> Tenancy {
        Tenancy {
            keys: self.keys.clone(),
            allow_anonymous: self.allow_anonymous,
            anonymous_collections: self.anonymous_collections.clone(),
            clients: self.clients.clone(),
            profiles: self.profiles.clone(),
        }
    }

    /// The admin key: `api_key`, or the value of the variable `api_key_env` names (read through
    /// `env`; unset or empty is an error naming the variable, never its value).
    pub fn admin_key(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Secret>, InvalidConfig> {
        match (&self.api_key_env, &self.api_key) {
            (Some(var), _) => env(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .map(|v| Some(Secret::new(v)))
                .ok_or_else(|| InvalidConfig {
                    key: "api_key_env".into(),
                    value: var.clone(),
                    expected: "a set, non-empty environment variable",
                }),
            (None, key) => Ok(key.clone()),
        }
    }

    /// What `horos-ref check` finds wrong on this machine, as far as `scope` looks: `bind`
    /// taken by another process. (Its environment variables, `api_key_env` and the keys'
    /// `key_env`, are checked with every other `_env` key of the file.)
    pub fn problems(
        &self,
        scope: horos_server_control::settings::CheckScope,
    ) -> Vec<horos_server_control::settings::Problem> {
        if !scope.ports {
            return Vec::new();
        }
        horos_server_control::settings::port_problem("coordinator.bind", self.bind)
            .into_iter()
            .collect()
    }

    /// Checks every value's range; the error names the first key out of range.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        fn bad(
            key: impl Into<String>,
            value: impl ToString,
            expected: &'static str,
        ) -> InvalidConfig {
            InvalidConfig {
                key: key.into(),
                value: value.to_string(),
                expected,
            }
        }
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(bad(key, v, "a positive number of seconds"))
            }
        };
        if !self.bind.ip().is_loopback()
            && self.api_key.is_none()
            && self.api_key_env.is_none()
            && !self.allow_unauthenticated_admin
        {
            return Err(bad(
                "api_key",
                "none",
                "required when bind is not a loopback address (api_key_env or api_key; or set allow_unauthenticated_admin = true)",
            ));
        }
        if self.api_key.as_ref().is_some_and(Secret::is_empty) {
            return Err(bad("api_key", "\"\"", "a non-empty key (or none)"));
        }
        match &self.api_key_env {
            Some(_) if self.api_key.is_some() => {
                return Err(bad(
                    "api_key_env",
                    "set with api_key",
                    "one of api_key_env and api_key, not both",
                ));
            }
            Some(v) if v.is_empty() => {
                return Err(bad("api_key_env", "\"\"", "an environment variable's name"));
            }
            _ => {}
        }
        if !(1..=1 << 30).contains(&self.max_body_bytes) {
            return Err(bad(
                "max_body_bytes",
                self.max_body_bytes,
                "between 1 and 2^30",
            ));
        }
        positive("default_budget_s", self.default_budget_s)?;
        positive("body_read_timeout_s", self.body_read_timeout_s)?;
        positive("write_timeout_s", self.write_timeout_s)?;
        if self.allowed_origins.iter().any(|o| o == "*")
            && self.api_key.is_none()
            && self.api_key_env.is_none()
        {
            return Err(bad(
                "allowed_origins",
                "[\"*\"]",
                "named origins: every web page may not drive an admin API without a key",
            ));
        }
        if let Some(o) = self
            .allowed_origins
            .iter()
            .find(|o| *o != "*" && !(o.starts_with("http://") || o.starts_with("https://")))
        {
            return Err(bad(
                "allowed_origins",
                o,
                "origins as a browser sends them: http(s)://host[:port]",
            ));
        }
        if self.max_connections == 0 {
            return Err(bad("max_connections", 0, "at least 1"));
        }
        positive("upstream_timeout_s", self.upstream_timeout_s)?;
        positive("job_budget_s", self.job_budget_s)?;
        positive("job_result_retention_s", self.job_result_retention_s)?;
        for (key, v) in std::iter::once(("default_load_s".to_owned(), self.default_load_s))
            .chain(self.load_s.iter().map(|(m, v)| (format!("load_s.{m}"), *v)))
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(key, v, "a number of seconds, 0 or more"));
            }
        }
        if !(0.0..=1.0).contains(&self.load_avg_alpha) {
            return Err(bad(
                "load_avg_alpha",
                self.load_avg_alpha,
                "between 0 and 1",
            ));
        }
        if self.max_in_flight == 0 {
            return Err(bad("max_in_flight", 0, "at least 1"));
        }
        if self.per_model_concurrency == 0 {
            return Err(bad("per_model_concurrency", 0, "at least 1"));
        }
        if let Some((m, _)) = self.model_concurrency.iter().find(|(_, n)| **n == 0) {
            return Err(bad(format!("model_concurrency.{m}"), 0, "at least 1"));
        }
        if self.job_visibility_s == 0 {
            return Err(bad("job_visibility_s", 0, "at least 1 second"));
        }
        if self.job_max_attempts == 0 {
            return Err(bad("job_max_attempts", 0, "at least 1"));
        }
        if self.snapshot_interval_ms == 0 || self.maintain_interval_ms == 0 {
            return Err(bad(
                "snapshot_interval_ms / maintain_interval_ms",
                0,
                "at least 1 ms",
            ));
        }
        if self.max_attempts == 0 {
            return Err(bad("max_attempts", 0, "at least 1"));
        }
        if !(self.retry_backoff_s.is_finite() && self.retry_backoff_s >= 0.0) {
            return Err(bad(
                "retry_backoff_s",
                self.retry_backoff_s,
                "a number of seconds, 0 or more",
            ));
        }
        for (name, remote) in &self.remotes {
            remote
                .validate()
                .map_err(|expected| bad(format!("remotes.{name}"), &remote.url, expected))?;
        }
        let collections = self
            .keys
            .iter()
            .filter_map(|(n, k)| Some((format!("keys.{n}.collections"), k.collections.as_ref()?)))
            .chain(std::iter::once((
                "anonymous_collections".to_owned(),
                &self.anonymous_collections,
            )));
        for (key, names) in collections {
            horos_server_control::Collections::from_names(names).map_err(|e| {
                bad(
                    key,
                    e.name,
                    "collection names (1 to 64 bytes of letters, digits, `.`, `_`, `-`) or \"*\"",
                )
            })?;
        }
        horos_manifest::validate(&self.manifest).map_err(InvalidConfig::from)?;
        crate::tenancy::profiles::Profiles::new(&self.profiles)?;
        for (name, task) in &self.tasks {
            if task.models.is_empty() || task.models.iter().any(String::is_empty) {
                return Err(bad(
                    format!("tasks.{name}.models"),
                    format!("{:?}", task.models),
                    "a ladder of one or more model names",
                ));
            }
            for (key, v) in [
                ("budget_s", task.budget_s),
                ("keep_alive_s", task.keep_alive_s),
            ] {
                if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(bad(
                        format!("tasks.{name}.{key}"),
                        v,
                        "a number of seconds, 0 or more",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The concurrency limit of one model.
    pub fn concurrency_of(&self, model: &str) -> usize {
        self.model_concurrency
            .get(model)
            .copied()
            .unwrap_or(self.per_model_concurrency)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bind_loopback_8210() {
        let c = CoordinatorConfig::default();
        assert_eq!(c.bind.to_string(), DEFAULT_BIND);
        assert_eq!(c.max_body_bytes, 8 * 1024 * 1024);
    }

    #[test]
    fn deserializes_partial_json() {
        let c: CoordinatorConfig = serde_json::from_value(serde_json::json!({
            "per_model_concurrency": 2,
            "tasks": {"classify": {"models": ["a", "b"], "pin_primary": true}}
        }))
        .unwrap();
        assert_eq!(c.concurrency_of("x"), 2);
        assert!(c.tasks["classify"].pin_primary);
        assert_eq!(c.default_priority, 5);
        c.validate().unwrap();
    }

    #[test]
    fn unknown_keys_and_out_of_range_values_are_named() {
        let e = serde_json::from_value::<CoordinatorConfig>(serde_json::json!({"max_inflight": 2}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_inflight"), "{e}");
        let e = serde_json::from_value::<CoordinatorConfig>(
            serde_json::json!({"tasks": {"t": {"model": ["a"]}}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("model"), "{e}");
        type Change = fn(&mut CoordinatorConfig);
        let cases: [(Change, &str); 5] = [
            (|c| c.max_body_bytes = 0, "max_body_bytes"),
            (|c| c.default_budget_s = f64::NAN, "default_budget_s"),
            (|c| c.load_avg_alpha = 1.5, "load_avg_alpha"),
            (|c| c.per_model_concurrency = 0, "per_model_concurrency"),
            (
                |c| {
                    c.tasks.insert("t".into(), TaskSpec::default());
                },
                "tasks.t.models",
            ),
        ];
        let open = CoordinatorConfig {
            bind: SocketAddr::from(([0, 0, 0, 0], 8210)),
            ..CoordinatorConfig::default()
        };
        assert_eq!(open.validate().unwrap_err().key, "api_key");
        CoordinatorConfig {
            api_key: Some("k".into()),
            ..open.clone()
        }
        .validate()
        .unwrap();
        CoordinatorConfig {
            allow_unauthenticated_admin: true,
            ..open
        }
        .validate()
        .unwrap();
        for (change, key) in cases {
            let mut c = CoordinatorConfig::default();
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }
}
