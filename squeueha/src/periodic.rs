//! Periodic jobs: a schedule enqueues one job per period (every hour, every day at a given
//! offset, ...) however many processes run the same schedule. The process that leads the
//! schedule's election enqueues; the job's dedup key names its period, so a leader that changes
//! hands around a boundary cannot enqueue a period twice. A period is enqueued only within its
//! grace time after the boundary (a schedule started late skips the periods it missed, as cron
//! does), which also keeps the dedup key inside the queue's dedup window.
//!
//! ```
//! use std::time::Duration;
//! use squeueha::periodic::{Periodic, Schedule};
//! use squeueha::{AsyncQueue, Config};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> squeueha::Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| squeueha::Error::InvalidArgument(e.to_string()))?;
//! let queue = AsyncQueue::open(dir.path().join("jobs.db"), Config::default()).await?;
//! let running = Periodic::new(queue.clone(), "worker-7")
//!     .schedule(Schedule::every("reindex", "maintenance", Duration::from_secs(3600), b"{}".to_vec()))
//!     .start();
//! // ... this hour's job is enqueued once, whichever process leads ...
//! # tokio::time::sleep(Duration::from_millis(200)).await;
//! # assert_eq!(queue.stats("maintenance").await?.ready, 1);
//! running.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{AsyncQueue, Config, DedupWindow, NewJob, now_ms};

/// One schedule: a job for `queue` every `every`, starting at `offset` past each period's start
/// (periods are counted from the Unix epoch, so every process agrees on them).
#[derive(Debug, Clone)]
pub struct Schedule {
    name: String,
    queue: String,
    every: Duration,
    offset: Duration,
    grace: Option<Duration>,
    payload: Vec<u8>,
    priority: i32,
}

impl Schedule {
    /// A job with `payload` for `queue` every `every` (at least a second), named `name` (its
    /// election and its jobs' dedup keys).
    pub fn every(name: &str, queue: &str, every: Duration, payload: Vec<u8>) -> Self {
        Self {
            name: name.to_owned(),
            queue: queue.to_owned(),
            every: every.max(Duration::from_secs(1)),
            offset: Duration::ZERO,
            grace: None,
            payload,
            priority: 0,
        }
    }

    /// Enqueue `offset` after each period's start (for example 2 h into each day); taken modulo
    /// the period.
    pub fn offset(mut self, offset: Duration) -> Self {
        self.offset = offset;
        self
    }

    /// How long after its time a period's job may still be enqueued (default: the period, at
    /// most half the queue's dedup window, so a period's key is always remembered).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// The jobs' priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    fn every_ms(&self) -> i64 {
        i64::try_from(self.every.as_millis()).unwrap_or(i64::MAX)
    }

    fn offset_ms(&self) -> i64 {
        i64::try_from(self.offset.as_millis()).unwrap_or(0) % self.every_ms()
    }

    /// The period due at `now_ms` and when it was due, if it is still within its grace.
    fn due(&self, now_ms: i64, grace: Duration) -> Option<(i64, i64)> {
        let every = self.every_ms();
        let period = (now_ms - self.offset_ms()).div_euclid(every);
        let at = period * every + self.offset_ms();
        let grace = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        (now_ms - at <= grace).then_some((period, at))
    }

    /// The grace time under `config`'s dedup window.
    fn grace_under(&self, config: &Config) -> Duration {
        let wanted = self.grace.unwrap_or(self.every);
        match config.dedup_window {
            DedupWindow::Permanent => wanted,
            DedupWindow::Window(w) => wanted.min(w / 2),
        }
    }
}

/// Schedules, not running yet.
pub struct Periodic {
    queue: AsyncQueue,
    holder: String,
    schedules: Vec<Schedule>,
    tick: Duration,
}

impl Periodic {
    /// No schedule yet. `holder` names this process in the schedules' elections (unique among
    /// the processes sharing the database: a host name and pid, a node id).
    pub fn new(queue: AsyncQueue, holder: &str) -> Self {
        Self {
            queue,
            holder: holder.to_owned(),
            schedules: Vec::new(),
            tick: Duration::from_secs(1),
        }
    }

    /// Adds a schedule.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// How often the schedules are looked at (default 1 s; a period's job is enqueued at most
    /// this late).
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick.max(Duration::from_millis(10));
        self
    }

    /// Runs the schedules on a task of their own (on the current tokio runtime).
    pub fn start(self) -> Running {
        let (stop, mut stopping) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut done: Vec<Option<i64>> = vec![None; self.schedules.len()];
            loop {
                for (i, s) in self.schedules.iter().enumerate() {
                    let grace = s.grace_under(self.queue.blocking().config());
                    let Some((period, _)) = s.due(now_ms(), grace) else {
                        continue;
                    };
                    if done[i] == Some(period) {
                        continue;
                    }
                    if enqueue_if_leading(&self.queue, &self.holder, s, period).await {
                        done[i] = Some(period);
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.tick) => {}
                    _ = stopping.changed() => return,
                }
            }
        });
        Running { stop, task }
    }
}

/// Enqueues `s`'s job of `period` if this process leads its election; whether this period is
/// settled here (enqueued now or before, by anyone).
async fn enqueue_if_leading(queue: &AsyncQueue, holder: &str, s: &Schedule, period: i64) -> bool {
    let election = format!("squeueha.periodic:{}", s.name);
    // The lease outlives a tick comfortably; a leader that stops is replaced after it.
    let ttl = (s.every / 2).clamp(Duration::from_secs(5), Duration::from_secs(60));
    match queue.try_lead(&election, holder, ttl).await {
        Ok(Some(_)) => {}
        // Another process leads (it enqueues), or the database is busy (the next tick retries).
        Ok(None) | Err(_) => return false,
    }
    let job = NewJob::new(s.payload.clone())
        .priority(s.priority)
        .dedup_key(format!("squeueha.periodic:{}:{period}", s.name));
    queue.enqueue(&s.queue, job).await.is_ok()
}

/// Running schedules.
pub struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops the schedules (a job being enqueued is finished first).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn periods_count_from_the_epoch_with_their_offset_and_grace() {
        let s = Schedule::every("r", "q", Duration::from_secs(10), Vec::new())
            .offset(Duration::from_secs(3));
        let grace = Duration::from_secs(2);
        assert_eq!(s.due(13_000, grace), Some((1, 13_000)));
        assert_eq!(s.due(14_999, grace), Some((1, 13_000)));
        assert_eq!(s.due(15_001, grace), None, "past its grace: skipped");
        assert_eq!(s.due(23_500, grace), Some((2, 23_000)));
        assert_eq!(
            s.due(2_000, grace),
            None,
            "period -1 ended at 3 s - 10 s + 2 s"
        );
        let config = Config {
            dedup_window: DedupWindow::Window(Duration::from_secs(8)),
            ..Config::default()
        };
        assert_eq!(s.grace_under(&config), Duration::from_secs(4));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_processes_on_one_schedule_enqueue_each_period_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let mut running = Vec::new();
        let mut queues = Vec::new();
        let first_started = now_ms();
        for p in 0..3 {
            // Three handles on the file, as three processes would have.
            let q = AsyncQueue::open(&path, Config::default()).await.unwrap();
            running.push(
                Periodic::new(q.clone(), &format!("process-{p}"))
                    .tick(Duration::from_millis(20))
                    .schedule(Schedule::every(
                        "beat",
                        "beats",
                        Duration::from_secs(1),
                        b"beat".to_vec(),
                    ))
                    .start(),
            );
            queues.push(q);
        }
        let all_started = now_ms();
        tokio::time::sleep(Duration::from_millis(3_300)).await;
        for r in running {
            r.shutdown().await;
        }
        let ended = now_ms();
        let ready = queues[0].stats("beats").await.unwrap().ready as i64;
        // One job per period the schedules saw: at most every period from the first start's to
        // the end's, at least those after the last start's but the end's (the first and the
        // last only if a tick came in them). Three enqueuers without the election and the keys
        // would have made about three times as many.
        let most = ended / 1000 - first_started / 1000 + 1;
        let least = ended / 1000 - all_started / 1000 - 1;
        assert!(
            (least..=most).contains(&ready),
            "{ready} jobs for {least} to {most} periods \
             (started {first_started} to {all_started}, ended {ended})"
        );
    }
}
