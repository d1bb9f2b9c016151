//! Server down, bad requests, connection hiccups, the run loop, and fan-in fragments.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use horos_fakeai::{FakeConfig, FakeServer};
use horos_feeder::{FanInSink, Feeder, HealthOnly, Lane, ServerControl};
use horos_testkit::{free_port, runtime, wait_until};
use horos_vllm_client::Client;
use squeueha::{AsyncQueue, JobState};

#[test]
fn server_down_releases_the_batch_without_counting_attempts() {
    horos_fakeai::run_child_if_requested();
    let control = FakeControl::start(
        "server_down_releases_the_batch_without_counting_attempts",
        FakeConfig::default(),
    );
    let setup = setup(control.clone(), control.url(), 16);
    let rt = runtime();
    let reqs: Vec<_> = (0..16).map(|i| chat(&prompt(i, false))).collect();
    let ids = enqueue(&setup.queue, &reqs, 5);
    control.kill();

    let report = rt.block_on(setup.feeder.run_batch(0)).unwrap();
    assert_eq!(report.claimed, 16);
    assert!(report.server_down, "{report:#?}");
    assert!(!report.crashed);
    assert_eq!(report.released, 16);
    assert_eq!(
        (report.completed, report.retried, report.dead, report.reruns),
        (0, 0, 0, 0)
    );
    for id in &ids {
        let info = setup.queue.get(*id).unwrap().unwrap();
        assert_eq!(info.state, JobState::Ready, "job {id}");
        assert_eq!(info.attempts, 0, "job {id}: the release counted an attempt");
    }

    // The server comes back: the same jobs complete, once each.
    rt.block_on(control.recover()).unwrap();
    let reports = rt.block_on(drain(&setup, 5));
    assert_eq!(reports.iter().map(|r| r.completed).sum::<usize>(), 16);
    assert_eq!(setup.sink.count().unwrap(), 16);
    assert!(setup.queue.dead_letters("think", 10).unwrap().is_empty());
}

fn in_process_setup(rt: &tokio::runtime::Runtime) -> (FakeServer, Setup) {
    let server = fake_server(rt, Duration::ZERO);
    let client = Client::new(server.url()).unwrap();
    let control = Arc::new(HealthOnly::new(client, Duration::from_secs(1)));
    let s = setup(control, &server.url(), 16);
    (server, s)
}

#[test]
fn a_bad_request_is_dead_lettered_after_its_attempts_and_the_others_complete() {
    let rt = runtime();
    let (_server, setup) = in_process_setup(&rt);
    let mut reqs: Vec<_> = (0..16).map(|i| chat(&prompt(i, false))).collect();
    reqs[4] = chat("job 4: malformed").extra_field("x_fakeai_fault", "status:400".into());
    let ids = enqueue(&setup.queue, &reqs, 3);

    let reports = rt.block_on(drain(&setup, 10));
    let dead = setup.queue.dead_letters("think", 10).unwrap();
    assert_eq!(dead.len(), 1, "{dead:#?}");
    assert_eq!(dead[0].id, ids[4]);
    assert_eq!(dead[0].attempts, 3);
    let reason = dead[0].last_error.as_deref().unwrap_or("");
    assert!(
        reason.contains("bad request") && reason.contains("400"),
        "{reason}"
    );
    assert_eq!(reports.iter().map(|r| r.completed).sum::<usize>(), 15);
    assert_eq!(reports.iter().map(|r| r.retried).sum::<usize>(), 2);
    assert_eq!(reports.iter().map(|r| r.dead).sum::<usize>(), 1);
    assert!(
        reports
            .iter()
            .all(|r| !r.crashed && r.restarts == 0 && !r.server_down)
    );
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| *i != 4) {
        assert_eq!(
            setup.sink.result_text(*id).unwrap().as_deref(),
            Some(prompt(i, false).as_str())
        );
    }
}

#[test]
fn a_cut_connection_on_a_healthy_server_is_a_retry_not_a_crash() {
    let rt = runtime();
    let (_server, setup) = in_process_setup(&rt);
    let mut reqs: Vec<_> = (0..8).map(|i| chat(&prompt(i, false))).collect();
    reqs[2] = chat("job 2: reset").extra_field("x_fakeai_fault", "reset".into());
    let ids = enqueue(&setup.queue, &reqs, 2);

    let reports = rt.block_on(drain(&setup, 10));
    assert!(
        reports
            .iter()
            .all(|r| !r.crashed && r.reruns == 0 && r.restarts == 0)
    );
    let dead = setup.queue.dead_letters("think", 10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, ids[2]);
    assert_eq!(dead[0].attempts, 2);
    assert_eq!(setup.sink.count().unwrap(), 7);
}

#[test]
fn an_unusable_payload_is_buried_at_once() {
    let rt = runtime();
    let (_server, setup) = in_process_setup(&rt);
    let good = enqueue(&setup.queue, &[chat("fine")], 5);
    let bad = setup
        .queue
        .enqueue("think", squeueha::NewJob::new(b"not json".to_vec()))
        .unwrap()
        .id();
    let reports = rt.block_on(drain(&setup, 5));
    assert_eq!(reports.iter().map(|r| r.dead).sum::<usize>(), 1);
    let dead = setup.queue.dead_letters("think", 10).unwrap();
    assert_eq!((dead.len(), dead[0].id, dead[0].attempts), (1, bad, 1));
    assert!(
        dead[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("invalid request")
    );
    assert_eq!(
        setup.sink.result_text(good[0]).unwrap().as_deref(),
        Some("fine")
    );
}

#[test]
fn the_run_loop_drains_a_backlog_with_poison_and_stops_on_request() {
    horos_fakeai::run_child_if_requested();
    let control = FakeControl::start(
        "the_run_loop_drains_a_backlog_with_poison_and_stops_on_request",
        FakeConfig {
            crash_marker: Some("POISON".into()),
            ..FakeConfig::default()
        },
    );
    let Setup {
        dir: _dir,
        queue,
        sink,
        feeder,
    } = setup_refill(control.clone(), control.url(), 8, 16);
    let rt = runtime();
    let n = 40;
    let reqs: Vec<_> = (0..n)
        .map(|i| chat(&prompt(i, i == 5 || i == 33)))
        .collect();
    enqueue(&queue, &reqs, 5);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let stats = rt.block_on(async {
        let task = tokio::spawn(async move { feeder.run(rx).await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let s = queue.stats("think").unwrap();
            if s.ready + s.delayed + s.in_flight == 0 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "not drained: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap()
    });
    assert_eq!(stats.completed, n as u64 - 2, "{stats:?}");
    assert_eq!(stats.poisoned, 2, "{stats:?}");
    assert_eq!(sink.count().unwrap(), n as u64 - 2);
    assert_eq!(queue.dead_letters("think", 10).unwrap().len(), 2);
}

#[test]
fn fragments_go_through_fan_in_and_a_poison_fragment_fails_its_slot() {
    horos_fakeai::run_child_if_requested();
    let control = FakeControl::start(
        "fragments_go_through_fan_in_and_a_poison_fragment_fails_its_slot",
        FakeConfig {
            crash_marker: Some("POISON".into()),
            ..FakeConfig::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let queue = squeueha::Queue::open(dir.path().join("jobs.db")).unwrap();
    let fan = fanin::FanIn::open(queue.clone(), fanin::FanInConfig::default()).unwrap();
    let tiles: Vec<_> = (0..6)
        .map(|i| squeueha::NewJob::json(&chat(&prompt(i, i == 4))).unwrap())
        .collect();
    let parent = fan
        .create_parent(
            fanin::ParentSpec::new("page-1", "think")
                .jobs(tiles)
                .policy(fanin::FailurePolicy::Partial)
                .then("index", serde_json::json!({"page": 1})),
        )
        .unwrap();
    // A stray job that is not a fragment, on the same queue.
    let stray = queue
        .enqueue("think", squeueha::NewJob::json(&chat("stray")).unwrap())
        .unwrap()
        .id();
    let sink = Arc::new(FanInSink::new(fan.clone()));
    let lane = Lane::new(
        "think",
        Client::new(control.url()).unwrap(),
        control.clone(),
        sink,
    )
    .batch_size(16);
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), vec![lane], test_config()).unwrap();
    let rt = runtime();
    rt.block_on(async {
        for _ in 0..20 {
            let s = queue.stats("think").unwrap();
            if s.ready + s.delayed + s.in_flight == 0 {
                return;
            }
            feeder.run_batch(0).await.unwrap();
        }
        panic!("not drained");
    });
    let progress = fan.progress(parent).unwrap();
    assert_eq!(
        progress.state,
        fanin::ParentState::Completed,
        "{progress:?}"
    );
    assert_eq!((progress.done, progress.failed), (5, 1));
    let results = fan.results(parent).unwrap();
    for (i, r) in results.iter().enumerate() {
        match r {
            fanin::FragmentOutcome::Done(text) if i != 4 => {
                assert_eq!(String::from_utf8_lossy(text), prompt(i, false));
            }
            fanin::FragmentOutcome::Failed(reason) if i == 4 => {
                assert!(reason.contains("poison pill"), "{reason}");
            }
            other => panic!("fragment {i}: {other:?}"),
        }
    }
    // The next stage was enqueued once.
    assert_eq!(queue.stats("index").unwrap().ready, 1);
    // The stray job was buried, the poison fragment's job too.
    let dead = queue.dead_letters("think", 10).unwrap();
    assert_eq!(dead.len(), 2, "{dead:#?}");
    let stray_dead = dead.iter().find(|d| d.id == stray).unwrap();
    assert!(
        stray_dead
            .last_error
            .as_deref()
            .unwrap()
            .contains("not a fan-in fragment")
    );
}

/// Runs `feeder` until `done` says so (checked every 20 ms, at most 60 s), then stops it.
fn run_until(
    rt: &tokio::runtime::Runtime,
    feeder: Feeder,
    mut done: impl FnMut() -> bool + Send + 'static,
) -> horos_feeder::FeederStats {
    let (stop, rx) = tokio::sync::watch::channel(false);
    rt.block_on(async move {
        let task = tokio::spawn(async move { feeder.run(rx).await });
        wait_until("the condition", Duration::from_secs(60), || {
            std::future::ready(done())
        })
        .await;
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap()
    })
}

/// A URL where nothing listens.
fn dead_url() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// A lane on `url` whose server someone else runs (a "restart" only waits 50 ms for it).
fn health_only_lane(queue: &str, url: &str, sink: &Arc<horos_feeder::TableSink>) -> Lane {
    lane_on(queue, url, sink.clone(), Duration::from_millis(50))
}

/// `n` chat jobs on `lane`.
fn enqueue_chats(queue: &squeueha::Queue, lane: &str, n: usize) {
    let jobs: Vec<_> = (0..n)
        .map(|i| squeueha::NewJob::json(&chat(&format!("{lane} {i}"))).unwrap())
        .collect();
    queue.enqueue_batch(lane, &jobs).unwrap();
}

/// Runs a feeder over `lanes` until `lane`'s queue has nothing ready, in flight or delayed.
fn feed_until_drained(
    rt: &tokio::runtime::Runtime,
    queue: &squeueha::Queue,
    lanes: Vec<Lane>,
    lane: &'static str,
) -> horos_feeder::FeederStats {
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), lanes, test_config()).unwrap();
    let q = queue.clone();
    run_until(rt, feeder, move || {
        let s = q.stats(lane).unwrap();
        s.ready + s.in_flight + s.delayed == 0
    })
}

#[test]
fn a_lane_whose_server_stays_down_does_not_starve_the_others() {
    let rt = runtime();
    let server = fake_server(&rt, Duration::ZERO);
    let (_dir, queue, sink) = fresh_queue();
    let think = health_only_lane("think", &dead_url(), &sink);
    let vision = health_only_lane("vision", &server.url(), &sink).batch_size(4);
    let think_ids = enqueue(&queue, &[chat("think 0"), chat("think 1")], 5);
    enqueue_chats(&queue, "vision", 12);
    let stats = feed_until_drained(&rt, &queue, vec![think, vision], "vision");
    assert_eq!(stats.completed, 12, "{stats:?}");
    assert!(stats.released >= 2, "{stats:?}");
    assert_eq!(sink.count().unwrap(), 12);
    for id in think_ids {
        let info = queue.get(id).unwrap().unwrap();
        assert_eq!(
            (info.state, info.attempts),
            (JobState::Ready, 0),
            "{info:?}"
        );
    }
}

#[test]
fn the_run_loop_restarts_a_server_found_down() {
    horos_fakeai::run_child_if_requested();
    let control = FakeControl::start(
        "the_run_loop_restarts_a_server_found_down",
        FakeConfig::default(),
    );
    let Setup {
        dir: _dir,
        queue,
        sink,
        feeder,
    } = setup(control.clone(), control.url(), 8);
    let rt = runtime();
    enqueue(
        &queue,
        &(0..8).map(|i| chat(&prompt(i, false))).collect::<Vec<_>>(),
        5,
    );
    control.kill();
    let q = queue.clone();
    let stats = run_until(&rt, feeder, move || {
        let s = q.stats("think").unwrap();
        s.ready + s.in_flight + s.delayed == 0
    });
    assert!(stats.released >= 8, "{stats:?}");
    assert_eq!(stats.completed, 8, "{stats:?}");
    assert_eq!(sink.count().unwrap(), 8);
    assert!(control.restarts.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

#[test]
fn the_health_monitor_restarts_a_crashed_idle_server() {
    horos_fakeai::run_child_if_requested();
    let control = FakeControl::start(
        "the_health_monitor_restarts_a_crashed_idle_server",
        FakeConfig::default(),
    );
    let (_dir, queue, sink) = fresh_queue();
    let lane = Lane::new(
        "think",
        Client::new(control.url()).unwrap(),
        control.clone(),
        sink,
    );
    let config = horos_feeder::FeederConfig {
        health_interval: Some(Duration::from_millis(20)),
        ..test_config()
    };
    let feeder = Feeder::new(AsyncQueue::new(queue), vec![lane], config).unwrap();
    let rt = runtime();
    // No job at all: only the health checks can notice.
    control.kill();
    let c = control.clone();
    run_until(&rt, feeder, move || {
        c.restarts.load(std::sync::atomic::Ordering::SeqCst) >= 1
    });
    // The restart may still be finishing in the background.
    rt.block_on(async {
        wait_until("the server to be back", Duration::from_secs(30), || {
            control.healthy()
        })
        .await;
    });
}

#[test]
fn the_first_lane_is_served_first_and_the_thermal_policy_reads_the_temperature() {
    let rt = runtime();
    let server = fake_server(&rt, Duration::ZERO);
    let (_dir, queue, sink) = fresh_queue();
    let client = Client::new(server.url()).unwrap();
    let control = Arc::new(HealthOnly::new(client.clone(), Duration::from_millis(50)));
    let lane =
        |name: &str| Lane::new(name, client.clone(), control.clone(), sink.clone()).batch_size(2);
    // Vision work is queued first; think must still go first.
    let vision: Vec<_> = (0..6)
        .map(|i| squeueha::NewJob::json(&chat(&format!("vision {i}"))).unwrap())
        .collect();
    queue.enqueue_batch("vision", &vision).unwrap();
    enqueue(
        &queue,
        &(0..6)
            .map(|i| chat(&format!("think {i}")))
            .collect::<Vec<_>>(),
        5,
    );
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = reads.clone();
    let config = horos_feeder::FeederConfig {
        // Below the 75 °C threshold: no pause, but the policy must ask.
        thermal: horos_server_control::ThermalPolicy::follow_temperature(),
        ..test_config()
    };
    let feeder = Feeder::new(
        AsyncQueue::new(queue.clone()),
        vec![lane("think"), lane("vision")],
        config,
    )
    .unwrap()
    .with_temperature(Arc::new(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(40.0)
    }));
    let q = queue.clone();
    let stats = run_until(&rt, feeder, move || {
        ["think", "vision"].iter().all(|n| {
            let s = q.stats(n).unwrap();
            s.ready + s.in_flight + s.delayed == 0
        })
    });
    assert_eq!(stats.completed, 12);
    let order: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            v["messages"][0]["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(order.len(), 12);
    assert!(
        order[..6].iter().all(|p| p.starts_with("think")),
        "{order:?}"
    );
    assert!(
        order[6..].iter().all(|p| p.starts_with("vision")),
        "{order:?}"
    );
    // One temperature reading per batch (6 batches of 2).
    assert_eq!(
        reads.load(std::sync::atomic::Ordering::SeqCst),
        stats.batches as usize
    );
    assert_eq!(stats.batches, 6);
}

/// A probe that always fails (like a one-token inference queued behind real work on a saturated
/// server) does not restart a server that keeps completing jobs.
struct BusyProbe {
    restarts: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl horos_feeder::ServerControl for BusyProbe {
    async fn recover(&self) -> Result<(), horos_server_control::ControlError> {
        self.restarts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    async fn healthy(&self) -> bool {
        false
    }
}

#[test]
fn a_failed_probe_of_a_lane_completing_jobs_is_not_a_restart() {
    use horos_vllm_client::{ChatMessage, ChatRequest};
    let rt = runtime();
    let server = fake_server(&rt, Duration::from_millis(30));
    let (_dir, queue, sink) = fresh_queue();
    let control = Arc::new(BusyProbe {
        restarts: std::sync::atomic::AtomicUsize::new(0),
    });
    let lane = Lane::new(
        "think",
        Client::new(server.url()).unwrap(),
        control.clone(),
        sink.clone(),
    )
    .batch_size(2);
    let reqs: Vec<ChatRequest> = (0..40)
        .map(|i| ChatRequest::new("m", vec![ChatMessage::user(format!("job {i}"))]))
        .collect();
    enqueue(&queue, &reqs, 3);
    let config = horos_feeder::FeederConfig {
        health_interval: Some(Duration::from_millis(100)),
        ..test_config()
    };
    let feeder = Feeder::new(AsyncQueue::new(queue), vec![lane], config).unwrap();
    let s = sink.clone();
    let stats = run_until(&rt, feeder, move || s.count().unwrap() == 40);
    assert_eq!(stats.completed, 40, "{stats:?}");
    assert_eq!(
        control.restarts.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a busy server was restarted"
    );
}

#[test]
fn a_closed_gate_keeps_its_lane_waiting_and_untouched_until_opened() {
    let rt = runtime();
    let server = fake_server(&rt, Duration::ZERO);
    // The think lane's server is "stopped" (nothing listens): with its gate closed the feeder
    // neither claims its jobs nor tries to recover the server.
    let (_dir, queue, sink) = fresh_queue();
    let think_gate = Arc::new(horos_feeder::LaneGate::new(false));
    let think = health_only_lane("think", &dead_url(), &sink).gate(Arc::clone(&think_gate));
    let vision_gate = Arc::new(horos_feeder::LaneGate::new(true));
    let vision = health_only_lane("vision", &server.url(), &sink)
        .batch_size(4)
        .gate(Arc::clone(&vision_gate));
    let think_ids = enqueue(&queue, &[chat("think 0"), chat("think 1")], 5);
    enqueue_chats(&queue, "vision", 8);
    let stats = feed_until_drained(&rt, &queue, vec![think, vision], "vision");
    assert_eq!(stats.completed, 8, "{stats:?}");
    // Never claimed: no release, no attempt, no restart of the closed lane's server.
    assert_eq!((stats.released, stats.restarts), (0, 0), "{stats:?}");
    for id in &think_ids {
        let info = queue.get(*id).unwrap().unwrap();
        assert_eq!(
            (info.state, info.attempts),
            (JobState::Ready, 0),
            "{info:?}"
        );
    }

    // The GPU switches: vision closed, think opened on a live server.
    vision_gate.close();
    think_gate.open();
    let think = health_only_lane("think", &server.url(), &sink).gate(Arc::clone(&think_gate));
    let vision = health_only_lane("vision", &server.url(), &sink).gate(Arc::clone(&vision_gate));
    queue
        .enqueue(
            "vision",
            squeueha::NewJob::json(&chat("vision late")).unwrap(),
        )
        .unwrap();
    let stats = feed_until_drained(&rt, &queue, vec![think, vision], "think");
    assert_eq!(stats.completed, 2, "{stats:?}");
    assert_eq!(
        queue.stats("vision").unwrap().ready,
        1,
        "the closed lane ran"
    );
    assert!(!think_gate.is_busy() && !vision_gate.is_busy());
}

/// A server that never comes back; each restart takes 400 ms.
#[derive(Default)]
struct SlowRestart {
    started: std::sync::atomic::AtomicUsize,
    finished: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl ServerControl for SlowRestart {
    async fn recover(&self) -> Result<(), horos_server_control::ControlError> {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        self.finished
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(horos_server_control::ControlError::StartFailed(
            "still down".into(),
        ))
    }
    async fn healthy(&self) -> bool {
        false
    }
}

#[test]
fn closing_a_lane_waits_for_its_recovery_and_starts_no_other() {
    use std::sync::atomic::Ordering::SeqCst;
    let rt = runtime();
    let (_dir, queue, sink) = fresh_queue();
    let control = Arc::new(SlowRestart::default());
    let gate = Arc::new(horos_feeder::LaneGate::new(true));
    let lane = Lane::new(
        "think",
        Client::new(dead_url()).unwrap(),
        control.clone(),
        sink,
    )
    .gate(Arc::clone(&gate));
    enqueue_chats(&queue, "think", 2);
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), vec![lane], test_config()).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    rt.block_on(async move {
        let task = tokio::spawn(async move { feeder.run(rx).await });
        // The batch finds the server down and a recovery starts (a 400 ms restart).
        wait_until("a recovery to start", Duration::from_secs(20), || async {
            control.started.load(SeqCst) > 0
        })
        .await;
        // A mode switch closes the lane: it must wait for the restart under way.
        gate.close();
        tokio::time::timeout(Duration::from_secs(5), gate.wait_idle())
            .await
            .unwrap();
        assert_eq!(
            control.finished.load(SeqCst),
            control.started.load(SeqCst),
            "wait_idle returned while a restart was still running"
        );
        // Closed, the lane gets no further recovery (the retry backoff here is short).
        let after_close = control.started.load(SeqCst);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(control.started.load(SeqCst), after_close);
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap();
    });
    // Nothing was lost: the jobs are back in the queue, no attempt counted.
    let s = queue.stats("think").unwrap();
    assert_eq!((s.ready, s.dead), (2, 0), "{s:?}");
}
