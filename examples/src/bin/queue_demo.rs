//! The queue demo: enqueue a mixed workload, drain it with four workers (some jobs fail and are
//! retried, a poison job ends in the dead-letter table), and print the stats.
//!
//! `cargo run --release -p horos-examples --bin queue-demo -- [DB_PATH] [JOBS]`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use squeueha::{Config, NewJob, Queue, RetryBackoff};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let db = args.next().unwrap_or_else(|| ".horos/queue-demo.db".into());
    let jobs: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    if let Some(dir) = std::path::Path::new(&db).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let cfg = Config {
        retry_backoff: RetryBackoff {
            base: Duration::from_millis(20),
            max: Duration::from_millis(200),
        },
        ..Config::default()
    };
    let queue = Queue::open_with(&db, cfg)?;
    println!("queue database: {db}");

    // A mixed workload: interactive jobs (priority 10) among batch jobs, one poison pill.
    let start = Instant::now();
    let batch: Vec<NewJob> = (0..jobs)
        .map(|i| {
            let kind = if i == jobs / 2 {
                "poison"
            } else if i % 10 == 0 {
                "interactive"
            } else {
                "batch"
            };
            let priority = if kind == "interactive" { 10 } else { 0 };
            NewJob::json(&serde_json::json!({ "n": i, "kind": kind }))
                .map(|j| j.priority(priority).max_attempts(3))
        })
        .collect::<Result<_, _>>()?;
    for chunk in batch.chunks(500) {
        queue.enqueue_batch("demo", chunk)?;
    }
    println!(
        "enqueued {jobs} jobs in {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );

    let done = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (queue, done, retried) = (queue.clone(), done.clone(), retried.clone());
            std::thread::spawn(move || -> squeueha::Result<()> {
                loop {
                    let claimed = queue.poll_batch_wait(
                        "demo",
                        32,
                        Duration::from_secs(30),
                        Duration::from_millis(500),
                    )?;
                    if claimed.is_empty() && queue.stats("demo")?.pending() == 0 {
                        return Ok(());
                    }
                    let mut ok = Vec::with_capacity(claimed.len());
                    for job in claimed {
                        let value: serde_json::Value = job.json()?;
                        let n = value["n"].as_u64().unwrap_or(0);
                        if value["kind"] == "poison" {
                            queue.nack(job.lease, "poison pill: handler always fails", None)?;
                        } else if n.is_multiple_of(97) && job.attempts == 1 {
                            retried.fetch_add(1, Ordering::Relaxed);
                            queue.nack(job.lease, "transient failure", None)?;
                        } else {
                            ok.push(job.lease);
                        }
                    }
                    done.fetch_add(queue.ack_batch(&ok)?.acked, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "worker panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    let completed = done.load(Ordering::Relaxed);
    println!(
        "drained: {completed} completed, {} retried once, in {:.2} s ({:.0} jobs/s, 4 workers)",
        retried.load(Ordering::Relaxed),
        secs,
        completed as f64 / secs
    );
    let stats = queue.stats("demo")?;
    println!("{}", serde_json::to_string_pretty(&stats)?);
    for dead in queue.dead_letters("demo", 10)? {
        println!(
            "dead letter: job {} after {} attempts: {}",
            dead.id,
            dead.attempts,
            dead.last_error.unwrap_or_default()
        );
    }
    queue.purge_dead("demo", None)?;
    Ok(())
}
