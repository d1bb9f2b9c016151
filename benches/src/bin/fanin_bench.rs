//! Fragment completions per second (record + ack + "last fragment?" check + completion) against
//! squeueha's plain ack in the same run, at 1 and 4 workers, for parents of N = 10 and N = 10,000.
//!
//! `cargo run --release -p horos-benches --bin fanin-bench [-- --quick]`

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fanin::{FanIn, FanInConfig, FragmentResult, ParentSpec};
use horos_benches::{PAYLOAD, median};
use squeueha::{Config, NewJob, Queue};

const VIS: Duration = Duration::from_secs(300);
const BATCH: usize = 32;

/// Errors from any step, `Send + Sync` so worker threads can return them through `join`.
type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn setup(total: usize, n: usize, workers: usize) -> BenchResult<(tempfile::TempDir, FanIn)> {
    let dir = tempfile::tempdir()?;
    let cfg = Config {
        pool_size: workers as u32 + 1,
        ..Config::default()
    };
    let q = Queue::open_with(dir.path().join("bench.db"), cfg)?;
    let fan = FanIn::open(q, FanInConfig::default())?;
    for p in 0..total / n {
        fan.create_parent(
            ParentSpec::new(format!("p{p}"), "frag")
                .jobs((0..n).map(|_| NewJob::new(vec![7u8; PAYLOAD])))
                .then("next", serde_json::Value::Null),
        )?;
    }
    Ok((dir, fan))
}

fn run(workers: usize, fan: &Arc<FanIn>, fan_in: bool) -> BenchResult<f64> {
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let fan = fan.clone();
            std::thread::spawn(move || -> BenchResult<usize> {
                let mut done = 0;
                loop {
                    let jobs = fan.queue().poll_batch("frag", BATCH, VIS)?;
                    if jobs.is_empty() {
                        return Ok(done);
                    }
                    done += jobs.len();
                    if fan_in {
                        let items = jobs
                            .iter()
                            .map(|j| (j, FragmentResult::Bytes(vec![1u8; PAYLOAD])))
                            .collect();
                        fan.complete_batch(items)?;
                    } else {
                        let leases: Vec<_> = jobs.iter().map(|j| j.lease).collect();
                        fan.queue().ack_batch(&leases)?.all_acked()?;
                    }
                }
            })
        })
        .collect();
    let mut total = 0usize;
    for h in handles {
        total += h.join().map_err(|_| "worker thread panicked")??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

fn main() -> BenchResult<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (total, repeats) = if quick { (10_000, 1) } else { (40_000, 5) };
    println!(
        "fanin bench: {total} fragments per run, batches of {BATCH}, {repeats} repeats (medians)"
    );
    println!();
    println!(
        "| workers | N per parent | plain ack (jobs/s) | fan-in completion (fragments/s) | ratio | target |"
    );
    println!("|---|---|---|---|---|---|");
    for workers in [1, 4] {
        for n in [10, 10_000] {
            let mut plain = Vec::new();
            let mut fan = Vec::new();
            let mut ratios = Vec::new();
            for _ in 0..repeats {
                let (_d, f) = setup(total, n, workers)?;
                let p = run(workers, &Arc::new(f), false)?;
                let (_d, f) = setup(total, n, workers)?;
                let f = Arc::new(f);
                let c = run(workers, &f, true)?;
                assert_eq!(f.queue().stats("next")?.ready as usize, total / n);
                plain.push(p);
                fan.push(c);
                ratios.push(c / p);
            }
            // The ratio is the median of the per-round ratios (each round measures both sides
            // back to back, so drifting load on a shared machine hits both).
            let (p, f, r) = (median(&mut plain), median(&mut fan), median(&mut ratios));
            println!(
                "| {workers} | {n} | {p:.0} | {f:.0} | {r:.2}x | >= 0.5x {} |",
                if r >= 0.5 { "PASS" } else { "FAIL" }
            );
        }
    }
    Ok(())
}
