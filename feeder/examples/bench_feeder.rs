//! Feeder throughput and server occupancy against an in-process fake server.
//!
//! `cargo run --release -p horos-feeder --example bench_feeder -- [--jobs N] [--slots N]`
//!
//! For each scenario (server latency per request: 0 ms; 20 ms; 10–30 ms uniform; feeder mode: one
//! batch at a time, or refill; `slots` or `2 × slots` requests in flight) the feeder drains a
//! backlog of N jobs (N/4 for the slow servers) through a fake OpenAI server with `slots` slots.
//! Prints jobs/s and the share of time every server slot was busy (the server's own `running`
//! count, sampled every ~0.2 ms) while a backlog existed (from the start until the last job was
//! claimed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use horos_fakeai::{FakeConfig, FakeServer};
use horos_feeder::{Feeder, FeederConfig, HealthOnly, Lane, TableSink};
use horos_server_control::ThermalPolicy;
use horos_vllm_client::{ChatMessage, ChatRequest, Client};
use squeueha::{AsyncQueue, NewJob, Queue};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Row {
    label: String,
    jobs_per_s: f64,
    ideal_per_s: Option<f64>,
    full_share: f64,
    mean_running: f64,
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn scenario(
    jobs: usize,
    slots: usize,
    batch: usize,
    refill: bool,
    latency_ms: u64,
    jitter_ms: u64,
) -> Result<Row, BoxError> {
    let server = Arc::new(
        FakeServer::start(FakeConfig {
            slots,
            ..FakeConfig::default()
        })
        .await?,
    );
    let dir = tempfile::tempdir()?;
    let queue = Queue::open(dir.path().join("jobs.db"))?;
    let sink = Arc::new(TableSink::new(queue.clone())?);
    let client = Client::new(server.url())?;
    let control = Arc::new(HealthOnly::new(client.clone(), Duration::from_secs(1)));
    let lane = Lane::new("think", client, control, sink.clone())
        .batch_size(batch)
        .refill(if refill { jobs } else { 0 });
    let config = FeederConfig {
        thermal: ThermalPolicy::Fixed { cooldown_s: 0.0 },
        idle_poll: Duration::from_millis(1),
        ..FeederConfig::default()
    };
    let aq = AsyncQueue::new(queue.clone());
    let feeder = Feeder::new(aq.clone(), vec![lane], config)?;

    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut total_latency = 0u64;
    let new_jobs: Vec<NewJob> = (0..jobs)
        .map(|i| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let lat = if jitter_ms == 0 {
                latency_ms
            } else {
                latency_ms - jitter_ms + seed % (2 * jitter_ms + 1)
            };
            total_latency += lat;
            let req = ChatRequest::new(
                "fake-model",
                vec![ChatMessage::user(format!("page {i}: read it"))],
            )
            .max_tokens(16)
            .extra_field("x_fakeai_latency_ms", lat.into());
            NewJob::json(&req)
        })
        .collect::<Result<_, _>>()?;
    queue.enqueue_batch("think", &new_jobs)?;

    let backlog = Arc::new(AtomicBool::new(true));
    let sampler = {
        let server = Arc::clone(&server);
        let backlog = Arc::clone(&backlog);
        std::thread::spawn(move || {
            let (mut full, mut total, mut running_sum) = (0u64, 0u64, 0u64);
            while backlog.load(Ordering::Relaxed) {
                let running = server.stats().running;
                running_sum += running;
                full += u64::from(running >= slots as u64);
                total += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            (full, total, running_sum)
        })
    };

    let (stop, rx) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let task = tokio::spawn(async move { feeder.run(rx).await });
    loop {
        let s = aq.stats("think").await?;
        if s.ready + s.delayed == 0 {
            backlog.store(false, Ordering::Relaxed);
        }
        if s.ready + s.delayed + s.in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    backlog.store(false, Ordering::Relaxed);
    stop.send(true)?;
    let stats = task.await?;
    assert_eq!(stats.completed, jobs as u64, "{stats:?}");
    assert_eq!(sink.count()?, jobs as u64);
    let (full, total, running_sum) = sampler.join().map_err(|_| "sampler thread panicked")?;
    let latency = match (latency_ms, jitter_ms) {
        (0, _) => "instant".to_owned(),
        (l, 0) => format!("{l} ms"),
        (l, j) => format!("{}-{} ms uniform", l - j, l + j),
    };
    let mode = if refill {
        "refill"
    } else {
        "batch, wait for all"
    };
    let label = format!("{latency} | {mode}, {batch} in flight");
    Ok(Row {
        label,
        jobs_per_s: jobs as f64 / elapsed,
        ideal_per_s: (total_latency > 0)
            .then(|| slots as f64 * jobs as f64 / (total_latency as f64 / 1000.0)),
        full_share: full as f64 / total.max(1) as f64,
        mean_running: running_sum as f64 / total.max(1) as f64,
    })
}

fn main() -> Result<(), BoxError> {
    let jobs = arg("--jobs", 4000);
    let slots = arg("--slots", 8);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!("{jobs} jobs, batches of {slots}, fake server with {slots} slots (in-process)\n");
    println!(
        "| server latency | feeder | jobs/s | ideal jobs/s (slots / mean latency) | server slots all busy | mean running |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let slow = (jobs / 4).max(1);
    for (latency, jitter, n, batch, refill) in [
        (0, 0, jobs, slots, false),
        (0, 0, jobs, slots, true),
        (0, 0, jobs, 2 * slots, true),
        (20, 0, slow, slots, false),
        (20, 0, slow, 2 * slots, false),
        (20, 0, slow, slots, true),
        (20, 0, slow, 2 * slots, true),
        (20, 10, slow, slots, false),
        (20, 10, slow, 2 * slots, false),
        (20, 10, slow, slots, true),
        (20, 10, slow, 2 * slots, true),
    ] {
        let row = rt.block_on(scenario(n, slots, batch, refill, latency, jitter))?;
        println!(
            "| {} | {:.0} | {} | {:.1}% | {:.2} |",
            row.label,
            row.jobs_per_s,
            row.ideal_per_s
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "-".into()),
            100.0 * row.full_share,
            row.mean_running
        );
    }
    Ok(())
}
