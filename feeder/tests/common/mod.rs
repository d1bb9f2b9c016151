//! Shared test fixtures: a queue in a temp dir, a fakeai server process as the `ServerControl`.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use horos_fakeai::{FakeConfig, FakeProcess};
use horos_feeder::{BatchReport, Feeder, FeederConfig, Lane, ServerControl, TableSink};
use horos_server_control::ThermalPolicy;
use horos_vllm_client::{ChatMessage, ChatRequest, Client};
use squeueha::{AsyncQueue, NewJob, Queue};

/// A fake server in a child process (the test binary re-executed); `restart` spawns it again on
/// the same port.
pub struct FakeControl {
    test: String,
    config: FakeConfig,
    process: Mutex<Option<FakeProcess>>,
    client: Client,
    pub restarts: AtomicUsize,
    url: String,
}

impl FakeControl {
    pub fn start(test: &str, config: FakeConfig) -> Arc<FakeControl> {
        let process = FakeProcess::spawn_self(test, &config).unwrap();
        let url = process.url().to_owned();
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        let config = FakeConfig { port, ..config };
        Arc::new(FakeControl {
            test: test.to_owned(),
            config,
            process: Mutex::new(Some(process)),
            client: Client::new(url.clone()).unwrap(),
            restarts: AtomicUsize::new(0),
            url,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&self) {
        let p = self.process.lock().unwrap().take();
        if let Some(mut p) = p {
            p.kill().unwrap();
        }
    }
}

/// Spawns the server again on its port (just freed: binding it can race with the kernel for a
/// moment, so a few tries).
fn spawn_on_port(test: &str, config: &FakeConfig) -> std::io::Result<FakeProcess> {
    let mut last = None;
    for _ in 0..50 {
        match FakeProcess::spawn_self(test, config) {
            Ok(p) => return Ok(p),
            Err(e) => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    Err(last.unwrap())
}

#[async_trait::async_trait]
impl ServerControl for FakeControl {
    async fn recover(&self) -> Result<(), horos_server_control::ControlError> {
        self.restarts.fetch_add(1, Ordering::SeqCst);
        let old = self.process.lock().unwrap().take();
        let (test, config) = (self.test.clone(), self.config.clone());
        let fresh = tokio::task::spawn_blocking(move || {
            drop(old); // kills and reaps it if it still runs
            spawn_on_port(&test, &config)
        })
        .await
        .map_err(horos_server_control::ControlError::other)?
        .map_err(horos_server_control::ControlError::other)?;
        *self.process.lock().unwrap() = Some(fresh);
        Ok(())
    }

    async fn healthy(&self) -> bool {
        let exited = match self.process.lock().unwrap().as_mut() {
            None => true,
            Some(p) => !matches!(p.try_exit_status(), Ok(None)),
        };
        !exited && self.client.health().await.is_ok()
    }
}

pub fn test_config() -> FeederConfig {
    FeederConfig {
        thermal: ThermalPolicy::Fixed { cooldown_s: 0.0 },
        idle_poll: Duration::from_millis(20),
        release_delay: Duration::ZERO,
        bad_request_delay: Some(Duration::ZERO),
        retry_delay: Some(Duration::ZERO),
        error_pause: Duration::from_millis(20),
        health_interval: None,
    }
}

pub fn prompt(i: usize, poison: bool) -> String {
    if poison {
        format!("job {i}: POISON")
    } else {
        format!("job {i}: read page {i}")
    }
}

pub fn chat(text: &str) -> ChatRequest {
    ChatRequest::new("fake-model", vec![ChatMessage::user(text)]).max_tokens(16)
}

pub struct Setup {
    pub dir: tempfile::TempDir,
    pub queue: Queue,
    pub sink: Arc<TableSink>,
    pub feeder: Feeder,
}

pub fn setup(control: Arc<dyn ServerControl>, url: &str, batch: usize) -> Setup {
    setup_refill(control, url, batch, 0)
}

pub fn setup_refill(
    control: Arc<dyn ServerControl>,
    url: &str,
    batch: usize,
    refill: usize,
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let sink = Arc::new(TableSink::new(queue.clone()).unwrap());
    let client = Client::new(url).unwrap();
    let lane = Lane::new("think", client, control, sink.clone())
        .batch_size(batch)
        .refill(refill)
        .visibility(Duration::from_secs(60));
    let feeder = Feeder::new(AsyncQueue::new(queue.clone()), vec![lane], test_config()).unwrap();
    Setup {
        dir,
        queue,
        sink,
        feeder,
    }
}

pub fn enqueue(queue: &Queue, reqs: &[ChatRequest], max_attempts: u32) -> Vec<i64> {
    let jobs: Vec<NewJob> = reqs
        .iter()
        .map(|r| NewJob::json(r).unwrap().max_attempts(max_attempts))
        .collect();
    queue
        .enqueue_batch("think", &jobs)
        .unwrap()
        .into_iter()
        .map(|e| e.id())
        .collect()
}

/// Runs batches until the queue has nothing ready, delayed or in flight.
pub async fn drain(setup: &Setup, max_batches: usize) -> Vec<BatchReport> {
    let mut reports = Vec::new();
    for _ in 0..max_batches {
        let stats = setup.queue.stats("think").unwrap();
        if stats.ready + stats.delayed + stats.in_flight == 0 {
            return reports;
        }
        let r = setup.feeder.run_batch(0).await.unwrap();
        if r.claimed == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        reports.push(r);
    }
    panic!("queue not drained after {max_batches} batches: {reports:#?}");
}

/// ⌈log2 n⌉ + 1.
pub fn bisection_bound(n: usize) -> usize {
    let mut bits = 0;
    while (1usize << bits) < n {
        bits += 1;
    }
    bits + 1
}

/// A fake server in this process, answering after `latency`.
pub fn fake_server(rt: &tokio::runtime::Runtime, latency: Duration) -> horos_fakeai::FakeServer {
    rt.block_on(horos_fakeai::FakeServer::start(FakeConfig {
        latency,
        ..FakeConfig::default()
    }))
    .unwrap()
}

/// A fresh queue in a temp dir, with the results table.
pub fn fresh_queue() -> (tempfile::TempDir, Queue, Arc<TableSink>) {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open(dir.path().join("jobs.db")).unwrap();
    let sink = Arc::new(TableSink::new(queue.clone()).unwrap());
    (dir, queue, sink)
}

/// A lane on `url` whose server someone else runs (a "restart" only waits `restart_wait` for
/// it), storing into `sink`.
pub fn lane_on(
    queue: &str,
    url: &str,
    sink: Arc<dyn horos_feeder::ResultSink>,
    restart_wait: Duration,
) -> Lane {
    let client = Client::new(url).unwrap();
    Lane::new(
        queue,
        client.clone(),
        Arc::new(horos_feeder::HealthOnly::new(client, restart_wait)),
        sink,
    )
}
