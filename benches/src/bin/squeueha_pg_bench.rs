//! squeueha on PostgreSQL next to the raw SQL ceiling on the same server, in the same run.
//!
//! `HOROS_PG_URL=postgres://… cargo run --release -p horos-benches --bin squeueha-pg-bench [-- --quick]`
//! (`scripts/setup_postgres.sh` prints the URL). Each run works in a fresh schema, dropped at
//! the end.
//!
//! - Drain: 50,000 jobs (64-byte payloads) drained by 1, 4 and 16 worker threads, each on its own
//!   connection, 32 jobs per batch: squeueha with `ack_and_poll` (ack the last batch and claim the
//!   next in one statement) against the ceiling, a bare
//!   `DELETE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT 32) RETURNING` per batch (a claim
//!   that is also its ack: no lease, no retry, no dead letters), and the same delete tuned as
//!   squeueha's claim is (`id = ANY(ARRAY(…))`, generic plans). Median of 3 runs each.
//! - Server cost: one worker drains the jobs each way on one connection; the CPU time of that
//!   connection's backend (`/proc/PID/schedstat`: the server must run on this machine) and the
//!   WAL written, per job. Steadier than the rates on a shared machine.
//! - Latency: enqueue on one queue handle → claim on another (two handles are two nodes: no
//!   in-process signal between them, so the consumer is woken by LISTEN/NOTIFY), one job at a
//!   time, p50/p99.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use horos_benches::pg::{
    BATCH, BenchResult, Cost, Raw, Schema, VIS, drain_cost, machine, raw_drain, squeueha_drain,
};
use horos_benches::{median, percentile};
use squeueha::{Config, NewJob, Queue};

/// Enqueue on `producer`, claim on `consumer` (another handle: woken by NOTIFY), one at a time.
fn latency(base: &str, samples: usize) -> BenchResult<(Duration, Duration, usize)> {
    let schema = Schema::create(base, "latency")?;
    let producer = Queue::open_postgres(&schema.url(), Config::default())?;
    let consumer = Queue::open_postgres(&schema.url(), Config::default())?;
    // Let the consumer's listening connection start.
    std::thread::sleep(Duration::from_millis(500));
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<Duration>();
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || -> BenchResult<()> {
            while !stop.load(Ordering::Relaxed) {
                for job in consumer.poll_batch_wait("lat", 1, VIS, Duration::from_millis(500))? {
                    let got = epoch.elapsed();
                    let sent = u64::from_le_bytes(job.payload[..8].try_into()?);
                    consumer.ack(job.lease)?;
                    let _ = tx.send(got.saturating_sub(Duration::from_nanos(sent)));
                }
            }
            Ok(())
        })
    };
    let mut lat = Vec::with_capacity(samples);
    let mut slow = 0;
    for i in 0..samples + 20 {
        // The consumer is idle and waiting when each job arrives.
        std::thread::sleep(Duration::from_millis(3));
        let sent = epoch.elapsed().as_nanos() as u64;
        producer.enqueue("lat", NewJob::new(sent.to_le_bytes().to_vec()))?;
        let d = rx.recv_timeout(Duration::from_secs(5))?;
        // The first 20 warm the connections and statement caches.
        if i >= 20 {
            if d >= Duration::from_millis(150) {
                slow += 1;
            }
            lat.push(d);
        }
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().map_err(|_| "consumer panicked")??;
    let p50 = percentile(&mut lat, 50.0);
    let p99 = percentile(&mut lat, 99.0);
    Ok((p50, p99, slow))
}

fn main() -> BenchResult<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let base = std::env::var("HOROS_PG_URL")
        .map_err(|_| "HOROS_PG_URL is not set (scripts/setup_postgres.sh prints it)")?;
    // `--one KIND WORKERS N`: one drain alone (squeueha, ceiling, tuned, rows or batch), e.g. to
    // profile the server under it.
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let arg = |k: usize| args.get(i + k).cloned().unwrap_or_default();
        let (kind, workers, n) = (arg(1), arg(2).parse()?, arg(3).parse()?);
        let rate = match kind.as_str() {
            "squeueha" => squeueha_drain(&base, n, workers, 1)?,
            "ceiling" => raw_drain(&base, n, workers, Raw::Ceiling)?,
            "tuned" => raw_drain(&base, n, workers, Raw::TunedCeiling)?,
            "rows" => raw_drain(&base, n, workers, Raw::RowLease)?,
            "batch" => raw_drain(&base, n, workers, Raw::BatchLease)?,
            other => return Err(format!("--one: unknown drain {other:?}").into()),
        };
        println!("{kind}, {workers} workers, {n} jobs: {rate:.0} jobs/s");
        return Ok(());
    }
    let (n, repeats, samples) = if quick {
        (5_000, 1, 100)
    } else {
        (50_000, 3, 500)
    };
    println!("machine: {}", machine(&base)?);
    println!("drain of {n} jobs, {BATCH} per batch, median of {repeats}");
    println!(
        "| workers | squeueha (jobs/s) | raw SKIP LOCKED ceiling (jobs/s) | ratio | tuned ceiling (jobs/s) | ratio to it | raw row-lease control (jobs/s) | its ratio | raw batch-lease control (jobs/s) | its ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for workers in [1, 4, 16] {
        let (mut sq, mut raw, mut tuned, mut rows, mut batch) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeats {
            // Interleaved, so that no side always runs on a warmer (or quieter) server.
            raw.push(raw_drain(&base, n, workers, Raw::Ceiling)?);
            sq.push(squeueha_drain(&base, n, workers, 1)?);
            tuned.push(raw_drain(&base, n, workers, Raw::TunedCeiling)?);
            rows.push(raw_drain(&base, n, workers, Raw::RowLease)?);
            batch.push(raw_drain(&base, n, workers, Raw::BatchLease)?);
        }
        let (sq, raw, tuned) = (median(&mut sq), median(&mut raw), median(&mut tuned));
        let (rows, batch) = (median(&mut rows), median(&mut batch));
        println!(
            "| {workers} | {sq:.0} | {raw:.0} | {:.2}× | {tuned:.0} | {:.2}× | {rows:.0} | {:.2}× | {batch:.0} | {:.2}× |",
            sq / raw,
            sq / tuned,
            rows / raw,
            batch / raw
        );
    }
    println!(
        "one worker's drain of {n} jobs, what it cost the server: its backend's CPU time and the WAL, per job (median of {repeats})"
    );
    println!("| drain | server CPU (µs/job) | WAL (bytes/job) | jobs/s |");
    println!("|---|---:|---:|---:|");
    for (name, raw) in [
        ("raw SKIP LOCKED ceiling", Some(Raw::Ceiling)),
        ("tuned ceiling", Some(Raw::TunedCeiling)),
        ("raw batch-lease control", Some(Raw::BatchLease)),
        ("squeueha", None),
    ] {
        let mut costs = Vec::new();
        for _ in 0..repeats {
            match drain_cost(&base, n, raw)? {
                Some(c) => costs.push(c),
                None => break,
            }
        }
        if costs.is_empty() {
            println!("| {name} | (the server's processes cannot be read from here) | | |");
            continue;
        }
        let mid = |f: fn(&Cost) -> f64| median(&mut costs.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {name} | {:.2} | {:.0} | {:.0} |",
            mid(|c| c.server_us),
            mid(|c| c.wal_bytes),
            mid(|c| c.rate)
        );
    }
    println!(
        "scale: 4 workers per node, nodes are queue handles of this process (own pools and listeners)"
    );
    println!("| nodes | squeueha (jobs/s) | per node (jobs/s) |");
    println!("|---:|---:|---:|");
    for nodes in [1, 2, 3] {
        let mut sq = Vec::new();
        for _ in 0..repeats {
            sq.push(squeueha_drain(&base, n, 4 * nodes, nodes)?);
        }
        let sq = median(&mut sq);
        println!("| {nodes} | {sq:.0} | {:.0} |", sq / nodes as f64);
    }
    let (p50, p99, slow) = latency(&base, samples)?;
    println!(
        "enqueue → claim across two handles (LISTEN/NOTIFY), {samples} jobs: p50 {:.2} ms, p99 {:.2} ms ({slow} at or above 150 ms, i.e. left to the idle poll)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    Ok(())
}
