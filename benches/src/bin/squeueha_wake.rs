//! Enqueue → claim latency between two processes on one queue file: a consumer process waits in
//! `poll_batch_wait`, this process enqueues one job every 10 ms carrying the time it was enqueued,
//! the consumer notes when it claimed each. Measured twice in the same run: with squeueha's
//! cross-process wake-up (the default) and without it (`cross_process_wakeup = false`: the
//! consumer notices other processes' work within its idle poll, 200 ms by default).
//!
//! `cargo run --release -p horos-benches --bin squeueha-wake [-- JOBS]` (default 500 jobs each).

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use horos_benches::percentile;
use squeueha::{Config, NewJob, Queue};

const CHILD: &str = "SQUEUEHA_WAKE_CHILD";
const QUEUE: &str = "latency";

fn micros_now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

fn config(wake: bool) -> Config {
    Config {
        cross_process_wakeup: wake,
        ..Config::default()
    }
}

/// The consumer: claims `n` jobs one by one and prints each one's latency in µs.
fn consumer(db: &str, wake: bool, n: usize) -> Result<(), Box<dyn Error>> {
    let q = Queue::open_with(db, config(wake))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut seen = 0;
    while seen < n {
        for job in q.poll_batch_wait(QUEUE, 1, Duration::from_secs(60), Duration::from_secs(5))? {
            let claimed = micros_now();
            let sent: u128 = std::str::from_utf8(&job.payload)?.parse()?;
            q.ack(job.lease)?;
            writeln!(out, "{}", claimed.saturating_sub(sent))?;
            seen += 1;
        }
    }
    out.flush()?;
    Ok(())
}

/// One measurement: a consumer process with wake-up on or off, `n` jobs; their latencies.
fn measure(wake: bool, n: usize) -> Result<Vec<Duration>, Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("wake.db");
    let producer = Queue::open_with(&db, config(wake))?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(CHILD, format!("{}\n{wake}\n{n}", db.display()))
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    if lines.next().transpose()?.as_deref() != Some("ready") {
        return Err("the consumer did not start".into());
    }
    // Let the consumer settle into its wait (and be seen by the producer's peer list).
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..n {
        producer.enqueue(QUEUE, NewJob::new(micros_now().to_string().into_bytes()))?;
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut latencies = Vec::with_capacity(n);
    for line in lines.take(n) {
        latencies.push(Duration::from_micros(line?.trim().parse()?));
    }
    child.wait()?;
    Ok(latencies)
}

fn main() -> Result<(), Box<dyn Error>> {
    if let Ok(spec) = std::env::var(CHILD) {
        let mut parts = spec.lines();
        let db = parts.next().ok_or("no db")?.to_owned();
        let wake = parts.next() == Some("true");
        let n: usize = parts.next().ok_or("no n")?.parse()?;
        return consumer(&db, wake, n);
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    println!("enqueue -> claim across processes, {n} jobs 10 ms apart, one consumer waiting");
    for wake in [true, false] {
        let mut l = measure(wake, n)?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "  {:<32} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
            if wake {
                "cross-process wake-up (default)"
            } else {
                "idle poll only (200 ms)"
            },
            ms(percentile(&mut l, 50.0)),
            ms(percentile(&mut l, 99.0)),
            ms(l.iter().copied().max().unwrap_or_default())
        );
    }
    Ok(())
}
