//! Edge cases of settling and recovery: a closed gate ends a refilling group, a failed store
//! gives the answered jobs back at once, and an idle lane's failed recovery is tried again.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::*;
use horos_feeder::{
    Completed, Feeder, FeederConfig, Lane, LaneGate, ResultSink, ServerControl, TableSink,
};
use horos_testkit::{runtime, wait_until};
use horos_vllm_client::Client;
use squeueha::{AsyncQueue, Job, JobState};

#[test]
fn closing_the_gate_ends_a_refilling_group_after_its_running_requests() {
    let rt = runtime();
    let server = fake_server(&rt, Duration::from_millis(150));
    let (_dir, queue, sink) = fresh_queue();
    let gate = Arc::new(LaneGate::new(true));
    // Two at a time, and up to 100 more claimed as they finish: left alone, this group would
    // run the whole backlog (40 jobs, about 3 s).
    let lane = lane_on("think", &server.url(), sink.clone(), Duration::from_secs(1))
        .batch_size(2)
        .refill(100)
        .gate(Arc::clone(&gate));
    let reqs: Vec<_> = (0..40).map(|i| chat(&prompt(i, false))).collect();
    enqueue(&queue, &reqs, 5);
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), vec![lane], test_config()).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    rt.block_on(async move {
        let task = tokio::spawn(async move { feeder.run(rx).await });
        wait_until("a batch to start", Duration::from_secs(20), || async {
            gate.is_busy()
        })
        .await;
        // The allocator takes the GPU away: the requests under way finish, nothing new is claimed.
        gate.close();
        tokio::time::timeout(Duration::from_secs(20), gate.wait_idle())
            .await
            .unwrap();
        stop.send(true).unwrap();
        task.await.unwrap();
    });
    let done = sink.count().unwrap();
    let s = queue.stats("think").unwrap();
    assert_eq!(s.in_flight, 0, "{s:?}");
    assert!(
        done <= 6,
        "{done} jobs ran after the gate closed on a group of 2"
    );
    assert_eq!(done + s.ready, 40, "{s:?}");
}

/// The results table, except that the first `store` fails (a full disk, say).
struct FailFirstStore {
    inner: TableSink,
    failed: AtomicBool,
}

impl ResultSink for FailFirstStore {
    fn store(&self, items: &[Completed]) -> horos_feeder::Result<usize> {
        if !self.failed.swap(true, SeqCst) {
            return Err(horos_feeder::Error::Config("disk full (injected)".into()));
        }
        self.inner.store(items)
    }
    fn bury(&self, job: &Job, reason: &str) -> horos_feeder::Result<()> {
        self.inner.bury(job, reason)
    }
    fn nack(&self, job: &Job, reason: &str, delay: Option<Duration>) -> horos_feeder::Result<bool> {
        self.inner.nack(job, reason, delay)
    }
}

#[test]
fn a_failed_store_gives_the_answered_jobs_back_at_once() {
    let rt = runtime();
    let server = fake_server(&rt, Duration::ZERO);
    let (_dir, queue, table) = fresh_queue();
    let sink = Arc::new(FailFirstStore {
        inner: Arc::into_inner(table).unwrap(),
        failed: AtomicBool::new(false),
    });
    // A long lease: jobs not given back would stay in flight for ten minutes.
    let lane = lane_on("think", &server.url(), sink.clone(), Duration::from_secs(1))
        .batch_size(4)
        .visibility(Duration::from_secs(600));
    let reqs: Vec<_> = (0..4).map(|i| chat(&prompt(i, false))).collect();
    let ids = enqueue(&queue, &reqs, 5);
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), vec![lane], test_config()).unwrap();

    let err = rt.block_on(feeder.run_batch(0)).unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    for id in &ids {
        let info = queue.get(*id).unwrap().unwrap();
        assert_eq!(
            (info.state, info.attempts),
            (JobState::Ready, 0),
            "job {id} was not given back: {info:?}"
        );
    }
    // The next batch stores them, once each.
    let report = rt.block_on(feeder.run_batch(0)).unwrap();
    assert_eq!(report.completed, 4, "{report:#?}");
    assert_eq!(sink.inner.count().unwrap(), 4);
}

/// A server that is down until restarted; the first restart fails.
#[derive(Default)]
struct SecondRestartWorks {
    restarts: AtomicUsize,
    up: AtomicBool,
}

#[async_trait::async_trait]
impl ServerControl for SecondRestartWorks {
    async fn recover(&self) -> Result<(), horos_server_control::ControlError> {
        if self.restarts.fetch_add(1, SeqCst) == 0 {
            return Err(horos_server_control::ControlError::StartFailed(
                "the first restart fails".into(),
            ));
        }
        self.up.store(true, SeqCst);
        Ok(())
    }
    async fn healthy(&self) -> bool {
        self.up.load(SeqCst)
    }
}

#[test]
fn an_idle_lane_whose_recovery_failed_is_recovered_without_waiting_for_work() {
    let rt = runtime();
    let (_dir, queue, sink) = fresh_queue();
    let control = Arc::new(SecondRestartWorks::default());
    let lane = Lane::new(
        "think",
        Client::new("http://127.0.0.1:9").unwrap(),
        control.clone(),
        sink,
    );
    let config = FeederConfig {
        health_interval: Some(Duration::from_millis(20)),
        ..test_config()
    };
    let feeder = Feeder::new(AsyncQueue::new(queue), vec![lane], config).unwrap();
    // No job ever arrives: the health check finds the server down, the first restart fails, and
    // only a retry of the recovery itself can bring the server back.
    let (stop, rx) = tokio::sync::watch::channel(false);
    let stats = rt.block_on(async {
        let task = tokio::spawn(async move { feeder.run(rx).await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !control.up.load(SeqCst) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the idle lane's server was not recovered after a failed restart ({} restarts)",
                control.restarts.load(SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.send(true).unwrap();
        task.await.unwrap()
    });
    assert_eq!(control.restarts.load(SeqCst), 2);
    assert_eq!(stats.restarts, 2, "{stats:?}");
}

#[test]
fn a_request_longer_than_its_lease_keeps_its_job_and_is_stored_once() {
    let rt = runtime();
    let server = fake_server(&rt, Duration::from_millis(5000));
    let (_dir, queue, sink) = fresh_queue();
    // A 2 s lease for requests of 5 s.
    let lane = lane_on("think", &server.url(), sink.clone(), Duration::from_secs(1))
        .batch_size(2)
        .visibility(Duration::from_secs(2));
    let ids = enqueue(&queue, &[chat("long 0"), chat("long 1")], 5);
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), vec![lane], test_config()).unwrap();
    let report = rt.block_on(async {
        let batch = tokio::spawn(async move { feeder.run_batch(0).await });
        // Once the batch holds both jobs (a slow machine's claim could come after the test's),
        // and past its first lease: another worker polling now must find nothing to claim.
        wait_until("the batch to claim", Duration::from_secs(30), || async {
            queue.stats("think").unwrap().in_flight >= 2
        })
        .await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let q = queue.clone();
        let stolen =
            tokio::task::spawn_blocking(move || q.poll_batch("think", 10, Duration::from_secs(60)))
                .await
                .unwrap()
                .unwrap();
        assert!(
            stolen.is_empty(),
            "jobs still running were claimed again: {:?}",
            stolen.iter().map(|j| j.id).collect::<Vec<_>>()
        );
        batch.await.unwrap().unwrap()
    });
    assert_eq!(report.completed, 2, "{report:#?}");
    assert_eq!(sink.count().unwrap(), 2);
    for id in &ids {
        let info = queue.get(*id).unwrap();
        assert!(
            info.is_none() || info.is_some_and(|i| i.state == JobState::Done),
            "job {id} not done"
        );
    }
}
