//! Runtime settings changed through `PUT /api/v1/config` and persisted in SQLite (a small
//! key/value table in the state file), so they survive restarts.
//!
//! The data plane reads them from atomics; only the admin API touches the database, on a
//! connection of its own.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use crate::error::{ApiError, CoordinatorError};

const KEY_CLOUD: &str = "allowCloudFallback";

/// The runtime settings.
#[derive(Debug)]
pub struct Settings {
    allow_cloud_fallback: AtomicBool,
    store: Option<squeueha::Queue>,
    /// Held from the database write to the atomic's store, so that two concurrent updates
    /// leave memory and disk agreeing (the data plane never takes it: it reads the atomic).
    writing: std::sync::Mutex<()>,
}

/// Opens the state database (a SQLite file, or a `postgres://` URL shared by several nodes) and
/// brings the coordinator's tables to this build's version.
pub fn open_store(target: &Path) -> Result<squeueha::Queue, CoordinatorError> {
    let queue = squeueha::Queue::open(target)?;
    queue.transaction(|tx| {
        crate::schema::MIGRATIONS
            .apply_in_tx(tx)
            .map(drop)
            .map_err(CoordinatorError::from)
    })?;
    Ok(queue)
}

impl Settings {
    /// Loads the persisted values from the state database (blocking), seeding from
    /// `allow_cloud_fallback` when none is stored yet. `store: None` keeps them in memory only.
    pub fn load(
        store: Option<squeueha::Queue>,
        allow_cloud_fallback: bool,
    ) -> Result<Self, CoordinatorError> {
        let mut allow = allow_cloud_fallback;
        if let Some(q) = &store {
            let stored: Option<String> = q
                .query_opt(
                    "SELECT value FROM coord_settings WHERE key = ?1",
                    squeueha::params![KEY_CLOUD],
                )?
                .map(|r| r.get(0))
                .transpose()?;
            if let Some(v) = stored {
                allow = v == "true";
            }
        }
        Ok(Self {
            allow_cloud_fallback: AtomicBool::new(allow),
            store,
            writing: std::sync::Mutex::new(()),
        })
    }

    /// Whether task ladders may fall back to cloud models.
    pub fn allow_cloud_fallback(&self) -> bool {
        self.allow_cloud_fallback.load(Ordering::Relaxed)
    }

    /// The settings as the admin API shows them.
    pub fn to_json(&self) -> Value {
        json!({ KEY_CLOUD: self.allow_cloud_fallback() })
    }

    /// Applies a partial update (blocking: writes the database first, then the atomics).
    pub fn update(&self, patch: &Map<String, Value>) -> Result<Value, ApiError> {
        let mut cloud = None;
        for (k, v) in patch {
            match k.as_str() {
                KEY_CLOUD => {
                    cloud = Some(v.as_bool().ok_or_else(|| {
                        ApiError::bad_request(format!("{KEY_CLOUD} must be a boolean"))
                            .param(KEY_CLOUD)
                    })?)
                }
                other => {
                    return Err(
                        ApiError::bad_request(format!("unknown setting `{other}`")).param(other)
                    );
                }
            }
        }
        if let Some(c) = cloud {
            let _writing = self
                .writing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(q) = &self.store {
                q.transaction(|tx| {
                    tx.execute(
                        "INSERT INTO coord_settings (key, value) VALUES (?1, ?2)
                         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        squeueha::params![KEY_CLOUD, if c { "true" } else { "false" }],
                    )
                })
                .map_err(|e| ApiError::internal(format!("settings: {e}")))?;
            }
            self.allow_cloud_fallback.store(c, Ordering::Relaxed);
            tracing::info!(allow_cloud_fallback = c, "runtime setting changed");
        }
        Ok(self.to_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persisted_across_loads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.db");
        let s = Settings::load(Some(open_store(&p).unwrap()), true).unwrap();
        assert!(s.allow_cloud_fallback());
        let Value::Object(patch) = json!({"allowCloudFallback": false}) else {
            unreachable!()
        };
        assert_eq!(
            s.update(&patch).unwrap(),
            json!({"allowCloudFallback": false})
        );
        drop(s);
        let again = Settings::load(Some(open_store(&p).unwrap()), true).unwrap();
        assert!(!again.allow_cloud_fallback());
        let Value::Object(bad) = json!({"nope": 1}) else {
            unreachable!()
        };
        assert_eq!(again.update(&bad).unwrap_err().status, 400);
    }
}
