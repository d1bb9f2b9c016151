//! One batch: claim, send, and when it took the server down, have the server recovered and
//! bisect the unfinished jobs to isolate the poison pill(s).

use std::time::Duration;

use squeueha::Job;

use super::Feeder;
use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::report::{BatchReport, Poison};

impl Feeder {
    /// Claims and runs one batch of lane `index` (see [`Feeder::run`]); a report with `claimed ==
    /// 0` when its queue had nothing ready.
    pub async fn run_batch(&self, index: usize) -> Result<BatchReport> {
        let lane = self
            .lanes
            .get(index)
            .ok_or_else(|| Error::Config(format!("no lane {index}")))?;
        self.run_lane_batch(lane).await
    }

    pub(super) async fn run_lane_batch(&self, lane: &Lane) -> Result<BatchReport> {
        let mut report = BatchReport {
            lane: lane.queue.clone(),
            ..BatchReport::default()
        };
        let jobs = self
            .queue
            .poll_batch(&lane.queue, lane.batch_size, lane.visibility)
            .await?;
        report.claimed = jobs.len();
        if jobs.is_empty() {
            return Ok(report);
        }
        let result = self.batch(lane, jobs, &mut report).await;
        self.record(&report);
        result.map(|()| report)
    }

    async fn batch(&self, lane: &Lane, jobs: Vec<Job>, report: &mut BatchReport) -> Result<()> {
        let outcome = self.run_group(lane, jobs, lane.refill, report).await?;
        if outcome.suspects.is_empty() {
            return Ok(());
        }
        if outcome.none_reached {
            // Not the jobs' fault: nothing was sent. Give the batch back, attempts not counted.
            report.server_down = true;
            let jobs = outcome.suspects.into_iter().map(|(j, _)| j).collect();
            return self.release(jobs, self.config.release_delay, report).await;
        }
        if lane.control.healthy().await {
            return self.settle_hiccups(lane, outcome.suspects, report).await;
        }
        report.crashed = true;
        tracing::warn!(lane = %lane.queue, suspects = outcome.suspects.len(), "batch crashed the server: bisecting");
        let suspects = outcome.suspects.into_iter().map(|(j, _)| j).collect();
        self.isolate(lane, suspects, report).await
    }

    /// Connections were cut or refused but the server is healthy: a cut request counts an attempt
    /// (a request that keeps cutting its connection dies eventually), a refused one is released.
    async fn settle_hiccups(
        &self,
        lane: &Lane,
        suspects: Vec<(Job, bool)>,
        report: &mut BatchReport,
    ) -> Result<()> {
        let mut refused = Vec::new();
        for (job, reached) in suspects {
            if reached {
                let dead = self
                    .sink_nack(
                        lane,
                        job,
                        "connection lost mid-request".into(),
                        self.config.retry_delay,
                    )
                    .await?;
                if dead {
                    report.dead += 1;
                } else {
                    report.retried += 1;
                }
            } else {
                refused.push(job);
            }
        }
        self.release(refused, self.config.release_delay, report)
            .await
    }

    /// Bisection: rerun the smaller half of the suspects; if it crashes, its unfinished jobs are the
    /// new suspects and the untested half is released; if not, the other half is. A suspect that
    /// crashes the server when sent alone is buried. At most ⌈log2 n⌉ + 1 reruns per poison job.
    async fn isolate(
        &self,
        lane: &Lane,
        suspects: Vec<Job>,
        report: &mut BatchReport,
    ) -> Result<()> {
        let mut suspects = suspects;
        let mut need_restart = true;
        let mut reruns = 0usize;
        loop {
            if need_restart {
                if let Err(e) = self.restart(lane, report).await {
                    self.release(suspects, self.config.release_delay, report)
                        .await?;
                    return Err(e);
                }
                suspects = self.extend_all(lane, suspects).await?;
            }
            if suspects.is_empty() {
                return Ok(());
            }
            let half = suspects.len() / 2;
            let rest = if half == 0 {
                Vec::new()
            } else {
                suspects.split_off(half)
            };
            let alone = suspects.len() == 1 && rest.is_empty();
            reruns += 1;
            report.reruns += 1;
            let outcome = match self.run_group(lane, suspects, 0, report).await {
                Ok(o) => o,
                Err(e) => {
                    // Best effort: the untested half goes back now rather than at lease expiry.
                    let _ = self.release(rest, Duration::ZERO, report).await;
                    return Err(e);
                }
            };
            let crashed = !outcome.suspects.is_empty() && !lane.control.healthy().await;
            if !crashed {
                self.settle_hiccups(lane, outcome.suspects, report).await?;
                if rest.is_empty() {
                    // Sent alone without crashing: the crash did not reproduce.
                    return Ok(());
                }
                suspects = rest;
                need_restart = false;
                continue;
            }
            // This group crashed the server again: the untested half goes back to the queue.
            self.release(rest, Duration::ZERO, report).await?;
            let failed: Vec<Job> = outcome.suspects.into_iter().map(|(j, _)| j).collect();
            if alone {
                for job in failed {
                    let reason = format!(
                        "poison pill: this request crashed the inference server of lane `{}` when sent alone (isolated by bisection in {} reruns)",
                        lane.queue, reruns
                    );
                    tracing::warn!(lane = %lane.queue, job = job.id, reruns, "poison pill buried");
                    self.sink_bury(lane, &job, &reason).await?;
                    report.poisoned.push(Poison {
                        job_id: job.id,
                        reruns,
                        reason,
                    });
                }
                return self.restart(lane, report).await;
            }
            suspects = failed;
            need_restart = true;
        }
    }

    async fn restart(&self, lane: &Lane, report: &mut BatchReport) -> Result<()> {
        report.restarts += 1;
        lane.control
            .recover()
            .await
            .map_err(|source| Error::Restart {
                lane: lane.queue.clone(),
                source,
            })
    }

    /// Extends every lease by the lane's visibility (a restart can be long); jobs whose lease went
    /// stale are dropped (another worker has them).
    async fn extend_all(&self, lane: &Lane, jobs: Vec<Job>) -> Result<Vec<Job>> {
        let mut kept = Vec::with_capacity(jobs.len());
        for job in jobs {
            match self.queue.extend(job.lease, lane.visibility).await {
                Ok(_) => kept.push(job),
                Err(squeueha::Error::StaleLease { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(kept)
    }
}
