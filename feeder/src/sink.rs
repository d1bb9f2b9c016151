//! Where results go: the feeder's own results table (ack in the same transaction), or fan-in
//! (a fragment's result recorded, its job acked and its parent completed in one transaction).

use std::time::Duration;

use horos_vllm_client::ChatResponse;
use squeueha::{Job, Nacked, Queue};

use crate::error::{Error, Result};

/// A job whose request succeeded, with the server's answer.
#[derive(Debug, Clone)]
pub struct Completed {
    /// The claimed job (its lease acks it).
    pub job: Job,
    /// The server's answer.
    pub response: ChatResponse,
}

/// Stores results and settles jobs. Methods block (SQLite): the feeder calls them on tokio's
/// blocking pool.
pub trait ResultSink: Send + Sync {
    /// Stores the results of `items` and acks their jobs, atomically per job at least (a result is
    /// never stored without its ack, nor acked without its result). Jobs whose lease went stale
    /// (the lease expired and another worker claimed the job) are skipped. Returns how many were
    /// stored.
    fn store(&self, items: &[Completed]) -> Result<usize>;

    /// Sends a claimed job to the dead-letter table with `reason` (a poison pill, a payload that can
    /// never become a request).
    fn bury(&self, job: &Job, reason: &str) -> Result<()>;

    /// A failed attempt: retried after `delay` (`None`: the queue's backoff) while attempts remain,
    /// dead-lettered with `reason` after the last. Returns true when the job is now dead.
    fn nack(&self, job: &Job, reason: &str, delay: Option<Duration>) -> Result<bool>;
}

/// The name of the table [`TableSink`] writes.
pub const RESULTS_TABLE: &str = "horos_feeder_results";

/// The feeder's tables' migrations (namespace `horos_feeder` of squeueha's migrator), on SQLite
/// and PostgreSQL: the results table (version 1, idempotent: files written before the table was
/// versioned are adopted unchanged) and the one row the deep health check writes (version 2,
/// [`DatabaseWrites`](crate::health::DatabaseWrites)).
pub const MIGRATIONS: squeueha::Migrations = squeueha::Migrations::new(
    "horos_feeder",
    &[
        squeueha::Migration {
            version: 1,
            sql: "CREATE TABLE IF NOT EXISTS horos_feeder_results (
                  job_id INTEGER PRIMARY KEY,
                  queue TEXT NOT NULL,
                  text TEXT NOT NULL,
                  response TEXT NOT NULL,
                  completed_at INTEGER NOT NULL
              )",
        },
        squeueha::Migration {
            version: 2,
            sql: "CREATE TABLE IF NOT EXISTS horos_feeder_health (
                  id INTEGER PRIMARY KEY,
                  written_at INTEGER NOT NULL
              )",
        },
    ],
)
.with_postgres(&[
    squeueha::Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS horos_feeder_results (
              job_id BIGINT PRIMARY KEY,
              queue TEXT NOT NULL,
              text TEXT NOT NULL,
              response TEXT NOT NULL,
              completed_at BIGINT NOT NULL
          )",
    },
    squeueha::Migration {
        version: 2,
        sql: "CREATE TABLE IF NOT EXISTS horos_feeder_health (
              id BIGINT PRIMARY KEY,
              written_at BIGINT NOT NULL
          )",
    },
]);

/// Results in a table of the queue's own database (`horos_feeder_results`: job id, queue, answer
/// text, the full answer as JSON, time), written in the same transaction as the acks.
#[derive(Debug, Clone)]
pub struct TableSink {
    queue: Queue,
}

impl TableSink {
    /// Creates the results table if needed (a file written by a newer release is refused with
    /// `squeueha::Error::SchemaTooNew`).
    pub fn new(queue: Queue) -> Result<Self> {
        queue.transaction(|tx| -> Result<()> {
            MIGRATIONS.apply_in_tx(tx)?;
            Ok(())
        })?;
        Ok(TableSink { queue })
    }

    /// The stored answer text of a job, if any.
    pub fn result_text(&self, job_id: i64) -> Result<Option<String>> {
        let row = self.queue.query_opt(
            "SELECT text FROM horos_feeder_results WHERE job_id = ?1",
            squeueha::params![job_id],
        )?;
        Ok(row.map(|r| r.get(0)).transpose()?)
    }

    /// Deletes the results completed more than `older_than` ago (`horos_feeder_results` grows
    /// by one row per answered job; `horos-ref run` calls this periodically with `[queue]
    /// results_retention_s`). Returns how many were deleted.
    pub fn purge_results(&self, older_than: Duration) -> Result<u64> {
        let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let before = squeueha::now_ms().saturating_sub(age);
        let deleted = self.queue.transaction(|tx| -> Result<u64> {
            Ok(tx.execute(
                "DELETE FROM horos_feeder_results WHERE completed_at < ?1",
                squeueha::params![before],
            )?)
        })?;
        Ok(deleted)
    }

    /// How many results are stored.
    pub fn count(&self) -> Result<u64> {
        let row = self.queue.query_opt(
            "SELECT COUNT(*) FROM horos_feeder_results",
            squeueha::params![],
        )?;
        Ok(row.map(|r| r.get(0)).transpose()?.unwrap_or(0))
    }
}

impl ResultSink for TableSink {
    fn store(&self, items: &[Completed]) -> Result<usize> {
        if items.is_empty() {
            return Ok(0);
        }
        let now = squeueha::now_ms();
        self.queue.transaction(|tx| -> Result<usize> {
            let mut stored = 0;
            for item in items {
                match tx.check_lease(item.job.lease) {
                    Ok(()) => {}
                    Err(squeueha::Error::StaleLease { .. }) => {
                        // Its lease expired and another worker (or node) took the job over: that
                        // worker's answer is the one kept.
                        tracing::info!(
                            job = item.job.id,
                            "answer discarded: the job's lease went stale (taken over elsewhere)"
                        );
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                let response = serde_json::to_string(&item.response)
                    .map_err(|e| Error::Task(format!("cannot encode an answer: {e}")))?;
                tx.execute(
                    "INSERT INTO horos_feeder_results
                     (job_id, queue, text, response, completed_at) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (job_id) DO UPDATE SET queue = excluded.queue,
                         text = excluded.text, response = excluded.response,
                         completed_at = excluded.completed_at",
                    squeueha::params![
                        item.job.id,
                        &item.job.queue,
                        item.response.text(),
                        response,
                        now
                    ],
                )?;
                tx.ack(item.job.lease)?;
                stored += 1;
            }
            Ok(stored)
        })
    }

    fn bury(&self, job: &Job, reason: &str) -> Result<()> {
        match self.queue.bury(job.lease, reason) {
            Ok(()) | Err(squeueha::Error::StaleLease { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn nack(&self, job: &Job, reason: &str, delay: Option<Duration>) -> Result<bool> {
        match self.queue.nack(job.lease, reason, delay) {
            Ok(Nacked::Dead) => Ok(true),
            Ok(Nacked::Retry { .. }) => Ok(false),
            Err(squeueha::Error::StaleLease { .. }) => {
                tracing::info!(
                    job = job.id,
                    "failure not recorded: the job's lease went stale (taken over elsewhere)"
                );
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Results of fragment jobs recorded through [`fanin::FanIn`]: the answer text is the fragment's
/// result; the fragment's job is acked, and its parent completed (next stage enqueued) when it was
/// the last, in one transaction per batch. A poison fragment is failed through fan-in, so its
/// parent applies its failure policy. Every job of a lane using this sink should be a fragment: one
/// that is not is buried (`not a fan-in fragment`) and the others are recorded.
#[derive(Debug)]
pub struct FanInSink {
    fan: fanin::FanIn,
}

impl FanInSink {
    /// Records through `fan`.
    pub fn new(fan: fanin::FanIn) -> Self {
        FanInSink { fan }
    }

    /// The fan-in handle.
    pub fn fan_in(&self) -> &fanin::FanIn {
        &self.fan
    }
}

impl ResultSink for FanInSink {
    fn store(&self, items: &[Completed]) -> Result<usize> {
        let mut items: Vec<&Completed> = items.iter().collect();
        // A job that is not a fragment would fail the whole batch: bury it and record the rest.
        for _ in 0..=items.len() {
            let batch = items
                .iter()
                .map(|c| {
                    (
                        &c.job,
                        fanin::FragmentResult::Bytes(c.response.text().as_bytes().to_vec()),
                    )
                })
                .collect();
            match self.fan.complete_batch(batch) {
                Ok(recorded) => {
                    return Ok(recorded
                        .iter()
                        .filter(|r| {
                            matches!(
                                r,
                                fanin::Recorded::Recorded | fanin::Recorded::ParentFinished(_)
                            )
                        })
                        .count());
                }
                Err(fanin::Error::NotAFragment(id)) => {
                    let Some(pos) = items.iter().position(|c| c.job.id == id) else {
                        return Err(fanin::Error::NotAFragment(id).into());
                    };
                    let stray = items.remove(pos);
                    match self.fan.queue().bury(
                        stray.job.lease,
                        "not a fan-in fragment: this lane records results through fan-in",
                    ) {
                        Ok(()) | Err(squeueha::Error::StaleLease { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(0)
    }

    fn bury(&self, job: &Job, reason: &str) -> Result<()> {
        self.fan.fail(job, reason)?;
        Ok(())
    }

    fn nack(&self, job: &Job, reason: &str, delay: Option<Duration>) -> Result<bool> {
        if job.is_last_attempt() {
            self.fan.fail(job, reason)?;
            return Ok(true);
        }
        match self.fan.queue().nack(job.lease, reason, delay) {
            Ok(Nacked::Dead) => Ok(true),
            Ok(Nacked::Retry { .. }) | Err(squeueha::Error::StaleLease { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn results_older_than_the_retention_are_purged_and_newer_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let queue = Queue::open(dir.path().join("q.db")).unwrap();
        let sink = TableSink::new(queue.clone()).unwrap();
        let now = squeueha::now_ms();
        let hour = 3_600_000;
        queue
            .transaction(|tx| -> Result<()> {
                for (id, at) in [(1_i64, now - 10 * hour), (2, now - 2 * hour), (3, now)] {
                    tx.execute(
                        "INSERT INTO horos_feeder_results (job_id, queue, text, response,
                         completed_at) VALUES (?1, 'think', 'a', '{}', ?2)",
                        squeueha::params![id, at],
                    )?;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(
            sink.purge_results(Duration::from_secs(3 * 3600)).unwrap(),
            1
        );
        assert_eq!(sink.count().unwrap(), 2);
        assert_eq!(sink.result_text(1).unwrap(), None);
        assert_eq!(sink.result_text(2).unwrap().as_deref(), Some("a"));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(sink.purge_results(Duration::ZERO).unwrap(), 2);
        assert_eq!(sink.count().unwrap(), 0);
    }
}
