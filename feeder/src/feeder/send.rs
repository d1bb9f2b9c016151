//! Sending a group of jobs concurrently (with refills and lease renewals) and settling each
//! one: stored, nacked, buried, released, or left as a suspect of a crash.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use horos_vllm_client::{ChatResponse, ErrorClass, TimeoutPhase};
use squeueha::{Job, Lease};
use tokio::task::JoinSet;

use super::{Feeder, blocking};
use crate::error::Result;
use crate::lane::Lane;
use crate::report::BatchReport;
use crate::sink::Completed;

/// What sending a group of jobs left undecided: jobs whose connection was cut or refused.
pub(super) struct GroupOutcome {
    /// (job, whether its request reached the server).
    pub(super) suspects: Vec<(Job, bool)>,
    /// No job of the group reached the server (every one was refused at connect).
    pub(super) none_reached: bool,
}

enum Sent {
    Answer(ChatResponse),
    Invalid(String),
    Failed(horos_vllm_client::Error),
    Lost(String),
}

impl Feeder {
    pub(super) async fn release(
        &self,
        jobs: Vec<Job>,
        delay: Duration,
        report: &mut BatchReport,
    ) -> Result<()> {
        self.release_leases(jobs.into_iter().map(|j| j.lease), delay, report)
            .await
    }

    /// [`Feeder::release`] by leases; a lease no longer current (the job was settled meanwhile)
    /// is skipped.
    async fn release_leases(
        &self,
        leases: impl IntoIterator<Item = Lease>,
        delay: Duration,
        report: &mut BatchReport,
    ) -> Result<()> {
        for lease in leases {
            match self.queue.release(lease, delay).await {
                Ok(()) => report.released += 1,
                Err(squeueha::Error::StaleLease { job_id }) => tracing::info!(
                    job = job_id,
                    "release refused: the job's lease went stale (taken over elsewhere)"
                ),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Sends `jobs` concurrently, stores the answers, settles the jobs that failed for their own
    /// reasons, and returns those whose connection was cut or refused. With `refill > 0`, each
    /// finished job is replaced by a newly claimed one (up to `refill` more in all) as long as no
    /// connection was cut or refused, so the server never waits for the slowest request of a batch.
    pub(super) async fn run_group(
        &self,
        lane: &Lane,
        jobs: Vec<Job>,
        refill: usize,
        report: &mut BatchReport,
    ) -> Result<GroupOutcome> {
        let mut set: JoinSet<Sent> = JoinSet::new();
        let mut held: HashMap<tokio::task::Id, Job> = HashMap::new();
        let mut budget = refill;
        let mut suspects = Vec::new();
        let mut answered = 0usize;
        let mut others = 0usize;
        // Jobs of the round being settled, out of `held` but not yet stored, nacked or released:
        // given back if the queue or the sink fails midway.
        let mut unsettled: Vec<Lease> = Vec::new();
        self.spawn_requests(lane, jobs, &mut set, &mut held);
        // The leases of the requests in flight are renewed every third of the lease, so a long
        // request (a vision model on a big page) is never claimed again while it runs, and a short
        // lease still brings a crashed feeder's jobs back soon.
        let every = (lane.visibility / 3).max(Duration::from_millis(50));
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let driven: Result<()> = async {
            loop {
                let first = tokio::select! {
                    next = set.join_next_with_id() => match next {
                        Some(first) => first,
                        None => break,
                    },
                    _ = renew.tick() => {
                        self.renew_leases(lane, held.values().map(|j| j.lease)).await;
                        continue;
                    }
                };
                let mut finished = vec![first];
                while let Some(more) = set.try_join_next_with_id() {
                    finished.push(more);
                }
                let freed = finished.len();
                let mut done = Vec::new();
                let mut release = Vec::new();
                for result in finished {
                    let (id, sent) = match result {
                        Ok(pair) => pair,
                        Err(e) => (e.id(), Sent::Lost(format!("request task failed: {e}"))),
                    };
                    let Some(job) = held.remove(&id) else {
                        continue;
                    };
                    unsettled.push(job.lease);
                    match sent {
                        Sent::Answer(response) => done.push(Completed { job, response }),
                        Sent::Invalid(msg) => {
                            others += 1;
                            self.sink_bury(lane, &job, &format!("invalid request: {msg}"))
                                .await?;
                            report.dead += 1;
                        }
                        Sent::Lost(msg) => {
                            others += 1;
                            let delay = self.config.retry_delay;
                            self.nack_counted(lane, job, msg, delay, report).await?;
                        }
                        Sent::Failed(e) => match e.class() {
                            ErrorClass::ServerCrashed => suspects.push((job, true)),
                            ErrorClass::Retryable if is_refusal(&e) => suspects.push((job, false)),
                            ErrorClass::Retryable if e.status().is_some() => {
                                // 429/503...: the server is busy, not the job's fault.
                                others += 1;
                                release.push(job);
                            }
                            class => {
                                others += 1;
                                let (delay, reason) = if class == ErrorClass::BadRequest {
                                    (self.config.bad_request_delay, format!("bad request: {e}"))
                                } else {
                                    (self.config.retry_delay, e.to_string())
                                };
                                self.nack_counted(lane, job, reason, delay, report).await?;
                            }
                        },
                    }
                }
                answered += done.len();
                if !done.is_empty() {
                    let sink = Arc::clone(&lane.sink);
                    let n = blocking(move || sink.store(&done)).await?;
                    report.completed += n;
                }
                self.release(release, self.config.release_delay, report)
                    .await?;
                unsettled.clear();
                // A closed gate (the GPU is leaving this lane) ends the refills: the switch
                // waits for this group only.
                if suspects.is_empty() && budget > 0 && lane.gate.is_open() {
                    let n = freed.min(budget);
                    let more = self
                        .queue
                        .poll_batch(&lane.queue, n, lane.visibility)
                        .await?;
                    // An empty claim: the backlog is drained, stop refilling.
                    budget = if more.is_empty() {
                        0
                    } else {
                        budget.saturating_sub(more.len())
                    };
                    report.claimed += more.len();
                    self.spawn_requests(lane, more, &mut set, &mut held);
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = driven {
            // The queue or the sink failed: give back what this group still holds (best effort;
            // what cannot be released comes back when its lease expires).
            set.abort_all();
            let mut left: Vec<Lease> = held.into_values().map(|j| j.lease).collect();
            left.extend(suspects.into_iter().map(|(j, _)| j.lease));
            // Settled ones among them answer `StaleLease`, which `release_leases` skips.
            left.extend(unsettled);
            let _ = self.release_leases(left, Duration::ZERO, report).await;
            return Err(e);
        }
        let none_reached = report_none_reached(&suspects) && others == 0 && answered == 0;
        Ok(GroupOutcome {
            suspects,
            none_reached,
        })
    }

    /// Extends `leases` by the lane's visibility. Best effort: a lease that went stale (the job
    /// was claimed again) or a queue error is only logged, the request runs on either way.
    async fn renew_leases(&self, lane: &Lane, leases: impl Iterator<Item = Lease>) {
        for lease in leases {
            match self.queue.extend(lease, lane.visibility).await {
                Ok(_) => {}
                Err(squeueha::Error::StaleLease { .. }) => {
                    tracing::warn!(lane = %lane.queue, job = lease.job_id, "lease lost while the request ran");
                }
                Err(e) => {
                    tracing::warn!(lane = %lane.queue, job = lease.job_id, error = %e, "lease renewal failed");
                }
            }
        }
    }

    async fn nack_counted(
        &self,
        lane: &Lane,
        job: Job,
        reason: String,
        delay: Option<Duration>,
        report: &mut BatchReport,
    ) -> Result<()> {
        if self.sink_nack(lane, job, reason, delay).await? {
            report.dead += 1;
        } else {
            report.retried += 1;
        }
        Ok(())
    }

    fn spawn_requests(
        &self,
        lane: &Lane,
        jobs: Vec<Job>,
        set: &mut JoinSet<Sent>,
        held: &mut HashMap<tokio::task::Id, Job>,
    ) {
        for job in jobs {
            let request = (lane.build)(&job);
            let client = lane.client.clone();
            let gauge = Arc::clone(&self.in_flight);
            let beat = self.heartbeat.clone();
            let handle = set.spawn(async move {
                let request = match request {
                    Ok(r) => r,
                    Err(msg) => return Sent::Invalid(msg),
                };
                gauge.fetch_add(1, Ordering::Relaxed);
                let answer = client.chat(&request).await;
                gauge.fetch_sub(1, Ordering::Relaxed);
                beat.beat();
                match answer {
                    Ok(a) => Sent::Answer(a),
                    Err(e) => Sent::Failed(e),
                }
            });
            held.insert(handle.id(), job);
        }
    }

    pub(super) async fn sink_bury(&self, lane: &Lane, job: &Job, reason: &str) -> Result<()> {
        let sink = Arc::clone(&lane.sink);
        let job = job.clone();
        let reason = reason.to_owned();
        blocking(move || sink.bury(&job, &reason)).await
    }

    pub(super) async fn sink_nack(
        &self,
        lane: &Lane,
        job: Job,
        reason: String,
        delay: Option<Duration>,
    ) -> Result<bool> {
        let sink = Arc::clone(&lane.sink);
        blocking(move || sink.nack(&job, &reason, delay)).await
    }
}

/// A connection refused (or not opened in time): the request never reached the server.
fn is_refusal(e: &horos_vllm_client::Error) -> bool {
    matches!(
        e,
        horos_vllm_client::Error::Connect { .. }
            | horos_vllm_client::Error::Timeout {
                phase: TimeoutPhase::Connect,
                ..
            }
    )
}

fn report_none_reached(suspects: &[(Job, bool)]) -> bool {
    !suspects.is_empty() && suspects.iter().all(|(_, reached)| !reached)
}
