//! [`Feeder::run`]: lane after lane, background recovery of servers found down, health checks
//! while idle, the thermal pause.

use std::sync::Arc;
use std::time::Duration;

use horos_server_control::{Backoff, ServerControl};

use super::Feeder;
use crate::lane::Lane;
use crate::report::FeederStats;

/// A lane whose server is being brought back by [`Feeder::run`].
struct Recovery {
    /// The background health check / restart: whether the server is back, whether it was
    /// restarted to get there.
    task: Option<tokio::task::JoinHandle<(bool, bool)>>,
    /// When to try the lane again after a failed recovery.
    retry_at: tokio::time::Instant,
    /// The waits after failed recoveries.
    backoff: Backoff,
}

impl Feeder {
    /// Runs until `stop` becomes true (or its sender is dropped): batch after batch, first lane with
    /// work first, the thermal pause after each batch. A batch in progress is finished (results
    /// stored, the rest released) before returning, so stopping loses no job.
    ///
    /// A lane whose server is down (its batch was released) is recovered in the background —
    /// [`ServerControl::recover`] unless it is healthy again — and skipped meanwhile, so the other
    /// lanes keep working; a failed recovery is tried again after a backoff (from
    /// [`FeederConfig::error_pause`](crate::FeederConfig::error_pause), doubling, at most 60 s).
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) -> FeederStats {
        let mut recovering: Vec<Option<Recovery>> = self.lanes.iter().map(|_| None).collect();
        let mut probes: Vec<Option<tokio::task::JoinHandle<bool>>> =
            self.lanes.iter().map(|_| None).collect();
        let mut next_probe = tokio::time::Instant::now();
        // When each lane last completed a job: a failed probe of a lane that is completing jobs
        // means a busy server (the probe queued behind real work), not a hung one.
        let mut progressed: Vec<Option<tokio::time::Instant>> =
            self.lanes.iter().map(|_| None).collect();
        loop {
            self.heartbeat.beat();
            // Stop when asked, or when nobody can ask any more (the sender is gone).
            if *stop.borrow() || stop.has_changed().is_err() {
                // No health check or restart may run on after this returns: the caller goes on
                // to stop the servers. A restart under way is finished rather than cut short
                // (a half-started server could outlive its stop).
                for p in probes.iter().flatten() {
                    p.abort();
                }
                for r in recovering.iter_mut().flatten() {
                    if let Some(t) = r.task.take()
                        && let Ok((_, true)) = t.await
                        && let Ok(mut s) = self.stats.lock()
                    {
                        s.restarts += 1;
                    }
                }
                return self.stats();
            }
            let now = tokio::time::Instant::now();
            if let Some(interval) = self.config.health_interval
                && now >= next_probe
            {
                next_probe = now + interval;
                for ((lane, probe), rec) in self.lanes.iter().zip(&mut probes).zip(&recovering) {
                    if probe.is_none() && rec.is_none() && lane.gate.is_open() {
                        let control = Arc::clone(&lane.control);
                        *probe = Some(tokio::spawn(async move { control.healthy().await }));
                    }
                }
            }
            for (i, lane) in self.lanes.iter().enumerate() {
                if !probes[i].as_ref().is_some_and(|p| p.is_finished()) {
                    continue;
                }
                let healthy = match probes[i].take() {
                    Some(p) => p.await.unwrap_or(false),
                    None => true,
                };
                let busy = match (progressed[i], self.config.health_interval) {
                    (Some(at), Some(interval)) => now.duration_since(at) < interval * 2,
                    _ => false,
                };
                if !healthy && busy {
                    tracing::info!(lane = %lane.queue, "health check failed while the lane completes jobs: busy, not restarted");
                } else if !healthy && recovering[i].is_none() && lane.gate.is_open() {
                    tracing::warn!(lane = %lane.queue, "health check failed: recovering the server");
                    recovering[i] = Some(Recovery {
                        task: Some(spawn_recovery(lane)),
                        retry_at: now,
                        backoff: self.recovery_backoff(),
                    });
                }
            }
            for (lane, slot) in self.lanes.iter().zip(recovering.iter_mut()) {
                if let Some(r) = slot
                    && r.task.as_ref().is_some_and(|t| t.is_finished())
                {
                    let (recovered, restarted) = match r.task.take() {
                        Some(task) => task.await.unwrap_or((false, false)),
                        None => (false, false),
                    };
                    if restarted && let Ok(mut s) = self.stats.lock() {
                        s.restarts += 1;
                    }
                    if recovered {
                        tracing::info!(lane = %lane.queue, "server recovered");
                        *slot = None;
                    } else {
                        let wait = r.backoff.next_delay();
                        tracing::warn!(lane = %lane.queue, retry_in = ?wait, "server recovery failed");
                        r.retry_at = now + wait;
                    }
                }
            }
            let mut worked = false;
            for (i, lane) in self.lanes.iter().enumerate() {
                let backoff = match &recovering[i] {
                    Some(r) if r.task.is_some() || now < r.retry_at => continue,
                    Some(r) => r.backoff.clone(),
                    None => self.recovery_backoff(),
                };
                let Some(busy) = lane.gate.enter() else {
                    continue;
                };
                let outcome = self.run_lane_batch(lane).await;
                drop(busy);
                match outcome {
                    Ok(report) if report.claimed == 0 => {
                        // An idle lane whose recovery failed: nothing else would try again
                        // (probes skip a recovering lane), so retry the recovery itself.
                        if let Some(r) = &mut recovering[i] {
                            tracing::info!(lane = %lane.queue, "retrying the server recovery");
                            r.task = Some(spawn_recovery(lane));
                            r.backoff = backoff;
                        }
                        continue;
                    }
                    Ok(report) if report.server_down => {
                        worked = true;
                        tracing::warn!(lane = %lane.queue, "server down: batch released, recovering the server");
                        recovering[i] = Some(Recovery {
                            task: Some(spawn_recovery(lane)),
                            retry_at: now,
                            backoff,
                        });
                        // Nothing ran: no thermal pause; the next lanes get their turn.
                        continue;
                    }
                    Ok(report) => {
                        worked = true;
                        recovering[i] = None;
                        if report.completed > 0 {
                            progressed[i] = Some(tokio::time::Instant::now());
                        }
                        let temp = match &self.temperature {
                            // NVML behind it: a driver call, kept off the runtime's workers.
                            Some(t) => {
                                let t = Arc::clone(t);
                                tokio::task::spawn_blocking(move || t())
                                    .await
                                    .ok()
                                    .flatten()
                            }
                            None => None,
                        };
                        let s = self.config.thermal.pause_after_batch(temp);
                        // NaN (a bad reading) pauses nothing rather than panicking.
                        let d = Duration::try_from_secs_f64(s.clamp(0.0, 3600.0));
                        pause(&mut stop, d.unwrap_or_default()).await;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(lane = %lane.queue, error = %e, "batch failed");
                        worked = true;
                        pause(&mut stop, self.config.error_pause).await;
                        break;
                    }
                }
            }
            if !worked {
                pause(&mut stop, self.config.idle_poll).await;
            }
        }
    }

    /// The waits between failed recoveries of a lane's server: from
    /// [`FeederConfig::error_pause`] (at least 10 ms), doubling, at most 60 s.
    fn recovery_backoff(&self) -> Backoff {
        Backoff::new(
            self.config.error_pause.max(Duration::from_millis(10)),
            Duration::from_secs(60),
        )
    }
}

/// Checks the lane's server and asks for its recovery if it is down: `(recovered, restarted)`. The
/// recovery counts as work on the lane (its gate's busy flag is held), so a mode switch that
/// closes the gate waits for it instead of having its stopped server started again behind it;
/// a closed gate starts no recovery.
fn spawn_recovery(lane: &Lane) -> tokio::task::JoinHandle<(bool, bool)> {
    let control = Arc::clone(&lane.control);
    let gate = Arc::clone(&lane.gate);
    tokio::spawn(async move {
        // Held until the end, also if the restart panics or is aborted.
        let Some(_busy) = gate.enter() else {
            return (false, false);
        };
        if control.healthy().await {
            (true, false)
        } else {
            match control.recover().await {
                Ok(()) => (true, true),
                Err(e) => {
                    tracing::warn!(error = %e, "server restart failed");
                    (false, true)
                }
            }
        }
    })
}

async fn pause(stop: &mut tokio::sync::watch::Receiver<bool>, d: Duration) {
    if d.is_zero() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}
