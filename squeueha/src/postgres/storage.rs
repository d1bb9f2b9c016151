//! `Storage` for PostgreSQL: single statements in autocommit where one statement does the work,
//! a transaction where several must hold together.

use super::{PgStore, lease, ops};
use crate::error::{Error, Result};
use crate::job::{DeadJob, Dedup, Enqueued, Job, JobInfo, Lease, Millis, Nacked, NewJob, now_ms};
use crate::leader::Leadership;
use crate::stats::QueueStats;
use crate::storage::{AckReport, MaintenanceReport, Storage};

fn check_batch(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidArgument(
            "batch size must be at least 1".into(),
        ));
    }
    Ok(())
}

impl Storage for PgStore {
    fn enqueue(&self, queue: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        ops::check_queue_name(queue)?;
        ops::validate(jobs, &self.cfg)?;
        if jobs.iter().all(|j| matches!(j.dedup, Dedup::None)) {
            // One statement (with its notification).
            self.auto(|ctx| ops::enqueue(ctx, queue, jobs, &self.cfg, now_ms()))
        } else {
            self.tx(|ctx| ops::enqueue(ctx, queue, jobs, &self.cfg, now_ms()))
        }
    }

    fn claim(&self, queue: &str, n: usize, visibility_ms: i64, token: i64) -> Result<Vec<Job>> {
        self.ack_and_claim(&[], queue, n, visibility_ms, token)
            .map(|(_, jobs)| jobs)
    }

    fn ack(&self, leases: &[Lease]) -> Result<AckReport> {
        self.auto(|ctx| lease::ack_many(ctx, leases, &self.cfg, now_ms()))
    }

    fn ack_and_claim(
        &self,
        leases: &[Lease],
        queue: &str,
        n: usize,
        visibility_ms: i64,
        token: i64,
    ) -> Result<(AckReport, Vec<Job>)> {
        check_batch(n)?;
        // Each statement's lease row has a token of its own (even: see ops).
        let claim = |leases: &[Lease], n: usize, step: i64, timers, large| {
            self.auto(|ctx| {
                lease::ack_and_claim(
                    ctx,
                    leases,
                    queue,
                    n,
                    visibility_ms,
                    token.wrapping_add(2 * step),
                    timers,
                    large,
                    &self.cfg,
                    now_ms(),
                )
            })
        };
        let plan = self.claim_plan(queue);
        let (mut report, first) = claim(leases, n, 0, plan.timers, plan.large)?;
        if !first.unacked.is_empty() {
            let rest =
                self.auto(|ctx| lease::ack_many(ctx, &first.unacked, &self.cfg, now_ms()))?;
            report.acked += rest.acked;
            report.stale.extend(rest.stale);
        }
        let mut jobs = first.jobs;
        let mut timers_looked = plan.timers == lease::Timers::Due;
        if first.large_left && jobs.len() < n {
            // Large jobs were next in order: claimed now, before anything behind them.
            jobs.extend(
                claim(&[], n - jobs.len(), 1, lease::Timers::Skip, true)?
                    .1
                    .jobs,
            );
        }
        if jobs.is_empty() && !timers_looked {
            // Nothing ready: whatever there is to claim is a timer.
            jobs = claim(&[], n, 2, lease::Timers::Due, true)?.1.jobs;
            timers_looked = true;
        }
        jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        self.claimed(queue, timers_looked, jobs.len() == n, first.large_left);
        Ok((report, jobs))
    }

    fn nack(&self, lease: Lease, error: &str, delay_ms: Option<i64>) -> Result<Nacked> {
        self.tx(|ctx| lease::nack(ctx, lease, error, delay_ms, &self.cfg, now_ms()))
    }

    fn release(&self, lease: Lease, delay_ms: i64) -> Result<()> {
        self.auto(|ctx| lease::release(ctx, lease, delay_ms, now_ms()))
    }

    fn extend(&self, lease: Lease, visibility_ms: i64) -> Result<Millis> {
        self.auto(|ctx| lease::extend(ctx, lease, visibility_ms, now_ms()))
    }

    fn bury(&self, lease: Lease, reason: &str) -> Result<()> {
        self.auto(|ctx| lease::bury(ctx, lease, reason, now_ms()))
    }

    fn get(&self, id: i64) -> Result<Option<JobInfo>> {
        self.auto(|ctx| ops::get(ctx, id))
    }

    fn list_dead(&self, queue: &str, after: (Millis, i64), limit: usize) -> Result<Vec<DeadJob>> {
        self.auto(|ctx| ops::list_dead(ctx, queue, after, limit))
    }

    fn list_dead_newest(&self, queue: &str, limit: usize) -> Result<Vec<DeadJob>> {
        self.auto(|ctx| ops::list_dead_newest(ctx, queue, limit))
    }

    fn get_dead(&self, id: i64) -> Result<Option<DeadJob>> {
        self.auto(|ctx| ops::get_dead(ctx, id))
    }

    fn requeue_dead(&self, id: i64) -> Result<i64> {
        self.tx(|ctx| ops::requeue_dead(ctx, id, &self.cfg, now_ms()).map(|(_, new_id)| new_id))
    }

    fn cancel(&self, job_id: i64) -> Result<bool> {
        self.auto(|ctx| ops::cancel(ctx, job_id))
    }

    fn purge_dead(&self, queue: &str, older_than: Option<Millis>) -> Result<usize> {
        self.auto(|ctx| ops::purge_dead(ctx, queue, older_than))
    }

    fn purge_done(&self, before: Millis) -> Result<usize> {
        self.auto(|ctx| ops::purge_done(ctx, before))
    }

    fn purge_dedup(&self, before: Millis) -> Result<usize> {
        self.auto(|ctx| ops::purge_dedup(ctx, before))
    }

    fn stats(&self, queue: &str) -> Result<QueueStats> {
        self.auto(|ctx| ops::stats(ctx, queue, now_ms()))
    }

    fn queues(&self) -> Result<Vec<String>> {
        self.auto(ops::queues)
    }

    fn next_due(&self, queue: &str) -> Result<Option<Millis>> {
        self.auto(|ctx| ops::next_due(ctx, queue))
    }

    fn try_lead(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<Leadership>> {
        self.auto(|ctx| {
            Ok(
                ops::try_lead(ctx, name, holder, ttl_ms, now_ms())?.map(|(fencing, expires_at)| {
                    Leadership {
                        name: name.to_owned(),
                        holder: holder.to_owned(),
                        fencing_token: fencing,
                        expires_at,
                    }
                }),
            )
        })
    }

    fn resign(&self, lead: &Leadership) -> Result<bool> {
        self.auto(|ctx| ops::resign(ctx, &lead.name, &lead.holder, lead.fencing_token))
    }

    fn leader(&self, name: &str) -> Result<Option<Leadership>> {
        self.auto(|ctx| {
            Ok(
                ops::leader(ctx, name, now_ms())?.map(|(holder, fencing, expires_at)| Leadership {
                    name: name.to_owned(),
                    holder,
                    fencing_token: fencing,
                    expires_at,
                }),
            )
        })
    }

    fn maintain(&self) -> Result<MaintenanceReport> {
        self.maintain_now(now_ms())
    }
}
