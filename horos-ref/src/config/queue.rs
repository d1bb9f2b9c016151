//! `[queue]`: the queue database's housekeeping, as squeueha's [`Config`](squeueha::Config)
//! and the feeder's results table ([`TableSink::purge_results`](horos_feeder::TableSink)) take
//! it: how long finished jobs and answers are kept, and the back-off after a busy database.

use std::time::Duration;

use serde::Deserialize;

/// Seven days, the default retention of the feeder's answers.
const WEEK_S: f64 = 7.0 * 24.0 * 3600.0;

/// The longest retention accepted: a year.
const MAX_RETENTION_S: f64 = 365.0 * 24.0 * 3600.0;

/// `[queue]`: retention of finished jobs and answers, busy back-off.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSection {
    /// Seconds a finished (`done`) job's record is kept, so that `result ID` still shows its
    /// queue and attempts (0: deleted at its ack, squeueha's default; its answer stays in the
    /// results table either way). 0 to a year.
    pub retain_done_s: f64,
    /// Seconds an answer stays in `horos_feeder_results` (purged by `run` periodically);
    /// default 7 days, 0 to a year.
    pub results_retention_s: f64,
    /// Milliseconds slept between the retries of a transaction that met a busy database; the
    /// list's length is the number of retries (default squeueha's 50 ... 3200). 1 to 20
    /// entries, each 1 to 60000.
    pub busy_backoff_ms: Option<Vec<u64>>,
}

impl Default for QueueSection {
    fn default() -> Self {
        Self {
            retain_done_s: 0.0,
            results_retention_s: WEEK_S,
            busy_backoff_ms: None,
        }
    }
}

impl QueueSection {
    /// Checks the values; the message names the key (`queue.results_retention_s`).
    pub fn validate(&self) -> Result<(), String> {
        for (key, v) in [
            ("retain_done_s", self.retain_done_s),
            ("results_retention_s", self.results_retention_s),
        ] {
            if !(v.is_finite() && (0.0..=MAX_RETENTION_S).contains(&v)) {
                return Err(format!(
                    "queue.{key} = {v} is not between 0 and {MAX_RETENTION_S} (a year)"
                ));
            }
        }
        if let Some(b) = &self.busy_backoff_ms {
            if !(1..=20).contains(&b.len()) {
                return Err(format!(
                    "queue.busy_backoff_ms has {} entries: give 1 to 20",
                    b.len()
                ));
            }
            if let Some(ms) = b.iter().find(|ms| !(1..=60_000).contains(*ms)) {
                return Err(format!(
                    "queue.busy_backoff_ms: {ms} is not between 1 and 60000"
                ));
            }
        }
        Ok(())
    }

    /// squeueha's settings with this section's: `retain_done`, `busy_backoff`.
    pub fn squeueha_config(&self) -> squeueha::Config {
        let mut config = squeueha::Config::default();
        if self.retain_done_s > 0.0 {
            config.retain_done = Some(Duration::from_secs_f64(self.retain_done_s));
        }
        if let Some(b) = &self.busy_backoff_ms {
            config.busy_backoff = b.iter().map(|ms| Duration::from_millis(*ms)).collect();
        }
        config
    }

    /// How long an answer is kept.
    pub fn results_retention(&self) -> Duration {
        Duration::from_secs_f64(self.results_retention_s)
    }

    /// How often `run` purges the answers: a tenth of their retention, 1 minute to 1 hour.
    pub fn results_purge_every(&self) -> Duration {
        Duration::from_secs_f64((self.results_retention_s / 10.0).clamp(60.0, 3600.0))
    }
}
