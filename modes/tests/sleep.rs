//! The mode executor through real sleeps and wakes: each lane's server a horos-fakeai process
//! with vLLM's sleep API (the test binary acting as the server), supervised by horos-servers,
//! switched over 127.0.0.1 HTTP as `horos-ref run` switches it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horos_fakeai::{CHILD_ENV, FakeConfig, Fault, SleepScript};
use horos_gpu_alloc::allocator::AllocatorConfig;
use horos_gpu_alloc::catalogue::SleepSpec;
use horos_modes::{
    Instance, LaneState, ModeAction, ModeLane, ModesConfig, QueueBacklog, Reporter, SwapMetrics,
};
use horos_server_control::ModeServer;
use horos_servers::{BookedServer, ManagedServer, ProbeConfig, ProcessConfig, ProcessServer};
use horos_testkit::{free_port, runtime, wait_until};
use squeueha::Queue;

const LIMIT: Duration = Duration::from_secs(60);

/// This test binary as a fake vLLM started with `--enable-sleep-mode` (its command line says
/// so, as vLLM's would: sh hands it over as `$0`, unused; the fake reads its flags from the
/// environment).
fn sleepy_server(test: &str, fake: &FakeConfig, log: std::path::PathBuf) -> Arc<ProcessServer> {
    let exe = std::env::current_exe().unwrap();
    let mut args = fake.to_args();
    if let Some(i) = args.iter().position(|a| a == "--port") {
        args[i + 1] = "{port}".into();
    }
    let command = [
        "sh",
        "-c",
        "exec \"$@\"",
        "--enable-sleep-mode",
        &exe.to_string_lossy(),
        "--exact",
        test,
        "--nocapture",
        "--test-threads=1",
    ]
    .map(str::to_owned)
    .to_vec();
    let env = BTreeMap::from([(CHILD_ENV.to_owned(), serde_json::to_string(&args).unwrap())]);
    Arc::new(
        ProcessServer::new(ProcessConfig {
            name: log.file_stem().unwrap().to_string_lossy().into_owned(),
            command,
            env,
            port: free_port(),
            log_path: Some(log),
            start_timeout_s: 60,
            stop_timeout_s: 5,
            probe: ProbeConfig::default(),
            ..ProcessConfig::default()
        })
        .unwrap(),
    )
}

fn sleep_mode(wake_fault: Fault) -> FakeConfig {
    FakeConfig {
        sleep: SleepScript {
            enabled: true,
            sleep_latency: Duration::from_millis(150),
            wake_latency_l1: Duration::from_millis(250),
            wake_latency_l2: Duration::from_millis(400),
            wake_fault,
            ..SleepScript::default()
        },
        ..FakeConfig::default()
    }
}

/// The decisions, as the decision log gets them.
#[derive(Clone, Default)]
struct Decisions(Arc<Mutex<Vec<(ModeAction, String)>>>);

impl Decisions {
    fn has(&self, action: ModeAction, text: &str) -> bool {
        let d = self.0.lock().unwrap();
        d.iter().any(|(a, r)| *a == action && r.contains(text))
    }
}

impl Reporter for Decisions {
    fn decision(&self, _gpu: u32, action: ModeAction, reason: &str) {
        self.0.lock().unwrap().push((action, reason.to_owned()));
    }
    fn mode(&self, _gpu: u32, _mode: &str, _state: &LaneState) {}
}

fn lane(queue: &str, server: &BookedServer, open: bool) -> ModeLane {
    ModeLane {
        queue: queue.into(),
        instances: vec![Instance {
            // A feeder lane's gate, without a feeder: no batch ever runs.
            gate: Arc::new(horos_feeder::LaneGate::new(open)),
            server: Arc::new(server.clone()) as Arc<dyn ModeServer>,
        }],
        swap_in_s: 2.0,
        job_s: 0.5,
        batch_size: 4,
        demand: None,
        keep_warm: None,
        // Priors below any real start of the fake, so that a sleep is chosen before its
        // costs are measured (a fake starts in a fraction of a second: measured, its load can
        // be cheaper than a sleep and a wake).
        sleep: SleepSpec {
            can_sleep: true,
            sleep_s: Some(0.01),
            wake_l1_s: Some(0.01),
            ..SleepSpec::default()
        },
    }
}

/// The executor on one GPU with sleep on, switching as soon as work waits (50 ms ticks, no
/// dwell, no hysteresis), level-1 sleepers within `host_memory_mb` (a host RAM of its own).
fn one_gpu_with_sleep(host_memory_mb: Option<u64>) -> ModesConfig {
    ModesConfig {
        gpus: vec![0],
        policy: AllocatorConfig {
            tick_s: 0.05,
            min_dwell_s: 0.0,
            hysteresis_s: 0.0,
            horizon_s: 60.0,
            max_wait_s: 60.0,
            reversal_window_s: 0.0,
            sleep: true,
            ..AllocatorConfig::default()
        },
        retry_after_failure: Duration::from_secs(30),
        initial_mode_age_s: 0.0,
        costs: None,
        host_ram: host_memory_mb.map(|mb| Arc::new(horos_modes::HostRam::new(mb))),
    }
}

/// Takes every job of `lane` off the queue (the work done elsewhere).
fn drain(queue: &Queue, lane: &str) {
    for job in queue
        .poll_batch(lane, 1000, Duration::from_secs(60))
        .unwrap()
    {
        queue.ack(job.lease).unwrap();
    }
}

fn enqueue(queue: &Queue, lane: &str, n: usize) {
    for i in 0..n {
        queue
            .enqueue(lane, squeueha::NewJob::new(format!("{lane} {i}")))
            .unwrap();
    }
}

/// Think serves, vision's backlog takes the GPU (think put to sleep), then think's takes it
/// back (think woken, or restarted where its wake fails); vision sleeps in its turn.
struct ThereAndBack {
    decisions: Decisions,
    metrics: Arc<SwapMetrics>,
    think: Arc<ProcessServer>,
    vision: Arc<ProcessServer>,
    /// Whether think slept once the GPU had gone to vision.
    think_slept: bool,
    /// The swap costs kept.
    store: Arc<horos_gpu_alloc::cost_store::CostStore>,
}

/// [`there_and_back_on`] with think a fake vLLM scripted by `think_fake`.
async fn there_and_back(test: &str, think_fake: &FakeConfig) -> ThereAndBack {
    let dir = tempfile::tempdir().unwrap();
    let think = sleepy_server(test, think_fake, dir.path().join("think.log"));
    let r = there_and_back_on(test, think, dir.path()).await;
    assert_eq!(r.think_slept, think_fake.sleep.sleep_fault == Fault::None);
    r
}

/// Think (`think`'s server, started here) serves; vision, a fake vLLM, takes the GPU and gives
/// it back; the costs kept in `dir`.
async fn there_and_back_on(
    test: &str,
    think: Arc<ProcessServer>,
    dir: &std::path::Path,
) -> ThereAndBack {
    let vision = sleepy_server(test, &sleep_mode(Fault::None), dir.join("vision.log"));
    let think_booked = BookedServer::new(think.clone(), None);
    let vision_booked = BookedServer::new(vision.clone(), None);
    think_booked.start().await.unwrap();
    let store =
        Arc::new(horos_gpu_alloc::cost_store::CostStore::open(dir.join("ledger.db")).unwrap());
    let queue = Queue::open(dir.join("jobs.db")).unwrap();
    enqueue(&queue, "vision", 40);
    let decisions = Decisions::default();
    let metrics = Arc::new(SwapMetrics::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = horos_modes::spawn_with_metrics(
        ModesConfig {
            costs: Some(Arc::clone(&store)),
            ..one_gpu_with_sleep(None)
        },
        vec![
            lane("think", &think_booked, true),
            lane("vision", &vision_booked, false),
        ],
        vec![0],
        Arc::new(QueueBacklog(queue.clone())),
        Arc::new(decisions.clone()),
        Arc::clone(&metrics),
        stopped,
    )
    .unwrap();
    wait_until("think -> vision", LIMIT, || async {
        decisions.has(ModeAction::Switched, "think -> vision")
    })
    .await;
    let think_slept = think.probe().sleeping().await == Some(true);
    assert_eq!(think.generation(), 1);
    assert_eq!(vision.generation(), 1);

    drain(&queue, "vision");
    enqueue(&queue, "think", 40);
    wait_until("vision -> think", LIMIT, || async {
        decisions.has(ModeAction::Switched, "vision -> think")
    })
    .await;
    assert_eq!(
        vision.probe().sleeping().await,
        Some(true),
        "vision not asleep"
    );
    assert_eq!(think.probe().sleeping().await, Some(false), "think asleep");
    stop.send(true).unwrap();
    task.await.unwrap();
    think_booked.stop().await.unwrap();
    vision_booked.stop().await.unwrap();
    ThereAndBack {
        decisions,
        metrics,
        think,
        vision,
        think_slept,
        store,
    }
}

/// A lane left is put to sleep, not stopped, and woken, not started, when the GPU comes back
/// to it: its process stays (no second start), and the swaps' seconds are counted by kind.
#[test]
fn a_lane_left_sleeps_and_is_woken_when_the_gpu_comes_back() {
    horos_fakeai::run_child_if_requested();
    let test = "a_lane_left_sleeps_and_is_woken_when_the_gpu_comes_back";
    runtime().block_on(async {
        let r = there_and_back(test, &sleep_mode(Fault::None)).await;
        assert_eq!(r.think.generation(), 1, "think was restarted, not woken");
        assert_eq!(r.vision.generation(), 1);
        assert!(!r.decisions.has(ModeAction::Fallback, ""));
        let m = r.metrics.snapshot();
        assert_eq!(m.count("sleep"), 2, "{m:?}");
        assert_eq!(m.count("wake"), 1, "{m:?}");
        assert_eq!(m.count("load"), 1, "vision's first start: {m:?}");
        assert_eq!(m.count("stop"), 0, "{m:?}");
        assert_eq!(m.avoided, 1, "{m:?}");
        // The scripted latencies, measured through the supervisor: 150 ms to sleep, 250 ms
        // to wake from level 1.
        assert!(m.seconds("sleep") >= 0.3, "{m:?}");
        assert!(m.seconds("wake") >= 0.25, "{m:?}");
        let text = r.metrics.render();
        assert!(text.contains("horos_swaps_avoided_total 1"), "{text}");
        assert!(
            text.contains("horos_swap_seconds_total{kind=\"wake\"}"),
            "{text}"
        );
    });
}

/// A wake that fails (the server answers 500) is a stop and a start: the lane serves again,
/// restarted, and the decision log says why.
#[test]
fn a_wake_that_fails_falls_back_to_a_restart() {
    horos_fakeai::run_child_if_requested();
    let test = "a_wake_that_fails_falls_back_to_a_restart";
    runtime().block_on(async {
        let r = there_and_back(test, &sleep_mode(Fault::Status(500))).await;
        assert!(
            r.decisions.has(ModeAction::Fallback, "wake failed"),
            "{:?}",
            r.decisions.0.lock().unwrap()
        );
        assert_eq!(r.think.generation(), 2, "think was not restarted");
        let m = r.metrics.snapshot();
        assert_eq!(m.count("wake"), 0, "{m:?}");
        assert_eq!(m.count("load"), 2, "{m:?}");
        assert_eq!(m.avoided, 0, "{m:?}");
    });
}

/// A sleep that fails (the server answers 500) is a stop: the lane's server is stopped, said in
/// the decision log, and started (a load, not a wake) when the GPU comes back.
#[test]
fn a_sleep_that_fails_falls_back_to_a_stop() {
    horos_fakeai::run_child_if_requested();
    let test = "a_sleep_that_fails_falls_back_to_a_stop";
    runtime().block_on(async {
        let mut fake = sleep_mode(Fault::None);
        fake.sleep.sleep_fault = Fault::Status(500);
        let r = there_and_back(test, &fake).await;
        assert!(
            r.decisions.has(ModeAction::Fallback, "sleep failed"),
            "{:?}",
            r.decisions.0.lock().unwrap()
        );
        assert_eq!(r.think.generation(), 2, "think was not started again");
        let m = r.metrics.snapshot();
        assert_eq!((m.count("stop"), m.count("sleep")), (1, 1), "{m:?}");
        assert_eq!((m.count("load"), m.count("wake")), (2, 0), "{m:?}");
        assert_eq!(m.avoided, 0, "{m:?}");
    });
}

/// Level-1 sleepers hold at most the host RAM given: a third lane put to sleep where two do not
/// fit stops the oldest level-1 sleeper first (an `evict` decision), and each lane left is a
/// `retire` decision with its level and reason. Coming back to the evicted lane is a load.
#[test]
fn host_ram_full_stops_the_oldest_level_one_sleeper() {
    horos_fakeai::run_child_if_requested();
    let test = "host_ram_full_stops_the_oldest_level_one_sleeper";
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let fake = sleep_mode(Fault::None);
        let servers: Vec<Arc<ProcessServer>> = ["a", "b", "c"]
            .iter()
            .map(|n| sleepy_server(test, &fake, dir.path().join(format!("{n}.log"))))
            .collect();
        let booked: Vec<BookedServer> = servers
            .iter()
            .map(|s| BookedServer::new(s.clone(), None))
            .collect();
        booked[0].start().await.unwrap();
        let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
        let decisions = Decisions::default();
        let metrics = Arc::new(SwapMetrics::default());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let lanes = ["a", "b", "c"]
            .iter()
            .zip(&booked)
            .enumerate()
            .map(|(i, (n, b))| {
                let mut l = lane(n, b, i == 0);
                l.sleep.host_mb = Some(10_000);
                l
            })
            .collect();
        // 25 GB of host RAM of which the model pool holds 10 GB: 15 GB left to the lanes.
        let host = Arc::new(horos_modes::HostRam::new(25_000));
        host.set_held("pool", 10_000);
        let task = horos_modes::spawn_with_metrics(
            ModesConfig {
                host_ram: Some(Arc::clone(&host)),
                ..one_gpu_with_sleep(None)
            },
            lanes,
            vec![0],
            Arc::new(QueueBacklog(queue.clone())),
            Arc::new(decisions.clone()),
            Arc::clone(&metrics),
            stopped,
        )
        .unwrap();
        let all = || format!("{:?}", decisions.0.lock().unwrap());
        enqueue(&queue, "b", 40);
        wait_until("a -> b", LIMIT, || async {
            decisions.has(ModeAction::Switched, "a -> b")
        })
        .await;
        assert!(
            decisions.has(ModeAction::Retire, "a: asleep at level 1"),
            "{}",
            all()
        );
        assert_eq!(servers[0].probe().sleeping().await, Some(true));
        wait_until("the lanes' share of the host RAM", LIMIT, || async {
            host.held_by(horos_modes::HOST_OWNER) == 10_000
        })
        .await;
        drain(&queue, "b");
        enqueue(&queue, "c", 40);
        wait_until("b -> c", LIMIT, || async {
            decisions.has(ModeAction::Switched, "b -> c")
        })
        .await;
        assert!(
            decisions.has(ModeAction::Evict, "a asleep at level 1 stopped"),
            "{}",
            all()
        );
        assert!(
            decisions.has(ModeAction::Retire, "b: asleep at level 1"),
            "{}",
            all()
        );
        assert_eq!(servers[0].probe().sleeping().await, None, "a still runs");
        assert_eq!(servers[1].probe().sleeping().await, Some(true));
        // Back to a: started again, not woken.
        drain(&queue, "c");
        enqueue(&queue, "a", 40);
        wait_until("c -> a", LIMIT, || async {
            decisions.has(ModeAction::Switched, "c -> a")
        })
        .await;
        assert_eq!(servers[0].generation(), 2, "a was not started again");
        let m = metrics.snapshot();
        assert_eq!((m.count("load"), m.count("wake")), (3, 0), "{m:?}");
        stop.send(true).unwrap();
        task.await.unwrap();
        for b in &booked {
            b.stop().await.unwrap();
        }
    });
}

/// A REAL llama-server lane (scripts/setup_llama.sh; skipped without it unless
/// `HOROS_REQUIRE_LLAMA=1`) started with `--sleep-idle-seconds 1`: when the GPU leaves it, the
/// executor puts it to sleep (it falls asleep by its own idle timer, its gate closed), and when
/// the GPU comes back a request wakes it, the same process (no restart); the wake is timed, fed
/// to the swap costs and kept in the cost store.
#[test]
fn a_real_llama_server_lane_sleeps_by_its_idle_timer_and_a_request_wakes_it() {
    horos_fakeai::run_child_if_requested();
    let test = "a_real_llama_server_lane_sleeps_by_its_idle_timer_and_a_request_wakes_it";
    let Some((llama, model)) = horos_testkit::llama_smollm2() else {
        return;
    };
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let think = Arc::new(
            ProcessServer::new(ProcessConfig {
                name: "think".into(),
                command: horos_testkit::llama_sleepy_command(&llama, &model),
                port: free_port(),
                log_path: Some(dir.path().join("think.log")),
                start_timeout_s: 60,
                stop_timeout_s: 5,
                probe: ProbeConfig {
                    inference_timeout_ms: 60_000,
                    ..ProbeConfig::default()
                },
                ..ProcessConfig::default()
            })
            .unwrap(),
        );
        let r = there_and_back_on(test, think, dir.path()).await;
        let all = format!("{:?}", r.decisions.0.lock().unwrap());
        assert!(r.think_slept, "llama not asleep: {all}");
        assert!(
            r.decisions
                .has(ModeAction::Retire, "think: asleep at level"),
            "{all}"
        );
        assert_eq!(r.think.generation(), 1, "llama was restarted, not woken");
        assert!(!r.decisions.has(ModeAction::Fallback, ""), "{all}");
        let m = r.metrics.snapshot();
        assert_eq!(m.count("wake"), 1, "{m:?}");
        assert!(m.seconds("wake") > 0.0, "{m:?}");
        eprintln!(
            "llama-server (SmolLM2-135M, CPU) woken by a request in {:.3} s",
            m.seconds("wake")
        );
        let kept = r.store.load().unwrap();
        let wake = kept
            .iter()
            .find(|(mode, _, kind, _)| {
                *mode == "think" && matches!(kind, horos_gpu_alloc::allocator::SwapKind::Wake(_))
            })
            .map(|(_, _, _, m)| m);
        assert!(
            wake.is_some_and(|w| w.count == 1 && w.mean_s > 0.0),
            "{wake:?}"
        );
    });
}
