//! `[queue]` of horos-ref's configuration: the queue database's housekeeping, as squeueha's
//! [`Config`](squeueha::Config) and the feeder's results table
//! ([`TableSink::purge_results`]) take it: how long finished jobs and answers are kept, and the
//! back-off after a busy database.

use std::time::Duration;

use horos_server_control::settings::InvalidSettings;
use serde::Deserialize;

use crate::TableSink;

/// Seven days, the default retention of the feeder's answers.
const WEEK_S: f64 = 7.0 * 24.0 * 3600.0;

/// The longest retention accepted: a year.
const MAX_RETENTION_S: f64 = 365.0 * 24.0 * 3600.0;

/// `[queue]`: retention of finished jobs and answers, busy back-off.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSettings {
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

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            retain_done_s: 0.0,
            results_retention_s: WEEK_S,
            busy_backoff_ms: None,
        }
    }
}

impl QueueSettings {
    /// Checks the values; the message names the key (`queue.results_retention_s`).
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        for (key, v) in [
            ("retain_done_s", self.retain_done_s),
            ("results_retention_s", self.results_retention_s),
        ] {
            if !(v.is_finite() && (0.0..=MAX_RETENTION_S).contains(&v)) {
                return Err(InvalidSettings(format!(
                    "queue.{key} = {v} is not between 0 and {MAX_RETENTION_S} (a year)"
                )));
            }
        }
        if let Some(b) = &self.busy_backoff_ms {
            if !(1..=20).contains(&b.len()) {
                return Err(InvalidSettings(format!(
                    "queue.busy_backoff_ms has {} entries: give 1 to 20",
                    b.len()
                )));
            }
            if let Some(ms) = b.iter().find(|ms| !(1..=60_000).contains(*ms)) {
                return Err(InvalidSettings(format!(
                    "queue.busy_backoff_ms: {ms} is not between 1 and 60000"
                )));
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

    /// How often [`spawn_results_purge`] purges the answers: a tenth of their retention, 1 minute to 1 hour.
    pub fn results_purge_every(&self) -> Duration {
        Duration::from_secs_f64((self.results_retention_s / 10.0).clamp(60.0, 3600.0))
    }
}

/// Deletes the answers older than `settings`' retention now and then every
/// [`QueueSettings::results_purge_every`], for as long as the runtime runs (`horos-ref run`
/// starts it beside the feeder).
pub fn spawn_results_purge(
    sink: TableSink,
    settings: &QueueSettings,
) -> tokio::task::JoinHandle<()> {
    let (retention, every) = (settings.results_retention(), settings.results_purge_every());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let sink = sink.clone();
            match tokio::task::spawn_blocking(move || sink.purge_results(retention)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::info!(purged = n, "answers past their retention deleted"),
                Ok(Err(e)) => tracing::warn!("purging old answers failed: {e}"),
                Err(e) => tracing::warn!("purging old answers failed: {e}"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn retention_and_back_off_reach_squeueha_and_a_bad_value_names_its_key() {
        let d = QueueSettings::default();
        assert_eq!(d.squeueha_config().retain_done, None);
        assert_eq!(d.results_retention().as_secs(), 7 * 24 * 3600);
        assert_eq!(d.results_purge_every().as_secs(), 3600);
        let s = QueueSettings {
            retain_done_s: 60.0,
            results_retention_s: 100.0,
            busy_backoff_ms: Some(vec![5, 10, 20]),
        };
        s.validate().unwrap();
        let q = s.squeueha_config();
        assert_eq!(q.retain_done, Some(Duration::from_secs(60)));
        assert_eq!(q.busy_backoff.len(), 3);
        assert_eq!(s.results_purge_every().as_secs(), 60);
        let bad = QueueSettings {
            busy_backoff_ms: Some(vec![0]),
            ..QueueSettings::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .0
                .contains("queue.busy_backoff_ms")
        );
    }
}
