//! squeueha on PostgreSQL next to the raw SQL ceiling on the same server, in the same run.
//!
//! `HOROS_PG_URL=postgres://… cargo run --release -p horos-benches --bin squeueha-pg-bench [-- --quick]`
//! (`scripts/setup_postgres.sh` prints the URL). Each run works in a fresh schema, dropped at
//! the end.
//!
//! - Drain: N jobs (64-byte payloads) drained by 1, 4 and 16 worker threads, each on its own
//!   connection, 32 jobs per batch: squeueha with `ack_and_poll` (ack the last batch and claim the
//!   next in one statement) against the ceiling, a bare
//!   `DELETE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT 32) RETURNING` per batch (a claim
//!   that is also its ack: no lease, no retry, no dead letters). Median of 3 runs each.
//! - Latency: enqueue on one queue handle → claim on another (two handles are two nodes: no
//!   in-process signal between them, so the consumer is woken by LISTEN/NOTIFY), one job at a
//!   time, p50/p99.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use horos_benches::{PAYLOAD, median, percentile};
use squeueha::pg::{Client, NoTls};
use squeueha::{Config, NewJob, Queue};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

const VIS: Duration = Duration::from_secs(300);
const BATCH: usize = 32;

struct Schema {
    base: String,
    name: String,
}

impl Schema {
    fn create(base: &str, tag: &str) -> BenchResult<Schema> {
        let name = format!("sqh_bench_{}_{tag}", std::process::id());
        let mut c = Client::connect(base, NoTls)?;
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))?;
        Ok(Schema {
            base: base.to_owned(),
            name,
        })
    }

    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.base, self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.base, NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

/// `workers` threads spread over `nodes` queue handles (each with its own pool and listener, as
/// separate nodes would have).
fn squeueha_drain(base: &str, n: usize, workers: usize, nodes: usize) -> BenchResult<f64> {
    let schema = Schema::create(base, "drain")?;
    let cfg = Config {
        pool_size: workers.div_ceil(nodes) as u32 + 1,
        ..Config::default()
    };
    let handles: Vec<Queue> = (0..nodes)
        .map(|_| Queue::open_postgres(&schema.url(), cfg.clone()))
        .collect::<Result<_, _>>()?;
    let q = handles[0].clone();
    let jobs: Vec<NewJob> = (0..n).map(|_| NewJob::new(vec![7u8; PAYLOAD])).collect();
    for chunk in jobs.chunks(5000) {
        q.enqueue_batch("q", chunk)?;
    }
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let q = handles[w % nodes].clone();
            std::thread::spawn(move || -> BenchResult<usize> {
                let mut leases = Vec::new();
                let mut done = 0;
                loop {
                    let (report, jobs) = q.ack_and_poll(&leases, "q", BATCH, VIS)?;
                    done += report.acked;
                    if jobs.is_empty() {
                        return Ok(done);
                    }
                    leases = jobs.iter().map(|j| j.lease).collect();
                }
            })
        })
        .collect();
    let mut done = 0;
    for h in handles {
        done += h.join().map_err(|_| "worker panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    let left = q.stats("q")?.pending();
    if done != n || left != 0 {
        return Err(format!("squeueha drained {done} of {n}, {left} left").into());
    }
    Ok(n as f64 / secs)
}

/// The bare ceiling (`leased == false`): one `DELETE … SKIP LOCKED … RETURNING` per batch. The
/// leased control (`leased == true`): what any lease costs, in plain SQL on squeueha's table shape
/// (the claim moves rows from the ready index to the timers' index; the next statement deletes
/// them), without promotion, dead letters, dedup or notifications.
fn raw_drain(base: &str, n: usize, workers: usize, leased: bool) -> BenchResult<f64> {
    let schema = Schema::create(base, if leased { "lease" } else { "raw" })?;
    let url = schema.url();
    let mut c = Client::connect(&url, NoTls)?;
    c.batch_execute(
        "CREATE TABLE raw_jobs (id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL,
             state INTEGER NOT NULL DEFAULT 0, priority INTEGER NOT NULL, due_at BIGINT NOT NULL,
             token BIGINT, payload BYTEA NOT NULL);",
    )?;
    if leased {
        c.batch_execute(
            "CREATE INDEX raw_jobs_claim ON raw_jobs (queue, priority DESC, due_at, id)
                 WHERE state = 0;
             CREATE INDEX raw_jobs_timed ON raw_jobs (state, queue, due_at) WHERE state <> 0;",
        )?;
    } else {
        c.batch_execute(
            "CREATE INDEX raw_jobs_claim ON raw_jobs (queue, priority DESC, due_at, id);",
        )?;
    }
    let payloads: Vec<Vec<u8>> = vec![vec![7u8; PAYLOAD]; 5000];
    let mut left = n;
    while left > 0 {
        let k = left.min(5000);
        c.execute(
            "INSERT INTO raw_jobs (queue, priority, due_at, payload)
             SELECT 'q', 0, 0, p FROM unnest($1::bytea[]) AS t(p)",
            &[&payloads[..k].to_vec()],
        )?;
        left -= k;
    }
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || -> BenchResult<usize> {
                let mut c = Client::connect(&url, NoTls)?;
                if !leased {
                    let stmt = c.prepare(
                        "DELETE FROM raw_jobs WHERE id IN (
                             SELECT id FROM raw_jobs WHERE queue = 'q'
                             ORDER BY priority DESC, due_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
                         RETURNING id, payload",
                    )?;
                    let mut done = 0;
                    loop {
                        let rows = c.query(&stmt, &[&(BATCH as i64)])?;
                        if rows.is_empty() {
                            return Ok(done);
                        }
                        done += rows.len();
                    }
                }
                let stmt = c.prepare(
                    // The ack is read first (as squeueha's statement does), so that it has
                    // deleted before the claim locks anything: locks taken by a SKIP LOCKED scan
                    // that follows an update chain are held to the end, and a delete waiting
                    // behind them while holding its own would deadlock.
                    "WITH acked AS (DELETE FROM raw_jobs WHERE id = ANY($2) AND token = $3
                                    RETURNING id),
                          pick AS (SELECT id FROM raw_jobs WHERE queue = 'q' AND state = 0
                                   ORDER BY priority DESC, due_at, id LIMIT $1
                                   FOR UPDATE SKIP LOCKED),
                          claimed AS (UPDATE raw_jobs SET state = 1, due_at = 9000000000000,
                                          token = $4
                                      WHERE id = ANY(ARRAY(SELECT id FROM pick))
                                      RETURNING id, payload)
                     SELECT 0, id, NULL::bytea FROM acked
                     UNION ALL SELECT 1, id, payload FROM claimed",
                )?;
                let mut held: Vec<i64> = Vec::new();
                let mut token = 0i64;
                let mut done = 0;
                loop {
                    let next = token + 1;
                    let rows = c.query(&stmt, &[&(BATCH as i64), &held, &token, &next])?;
                    done += rows.iter().filter(|r| r.get::<_, i32>(0) == 0).count();
                    held = rows
                        .iter()
                        .filter(|r| r.get::<_, i32>(0) == 1)
                        .map(|r| r.get(1))
                        .collect();
                    if held.is_empty() {
                        return Ok(done);
                    }
                    token = next;
                }
            })
        })
        .collect();
    let mut done = 0;
    for h in handles {
        done += h.join().map_err(|_| "worker panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    if done != n {
        return Err(format!("raw drained {done} of {n}").into());
    }
    Ok(n as f64 / secs)
}

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

fn machine(base: &str) -> BenchResult<String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut c = Client::connect(base, NoTls)?;
    let version: String = c.query_one("SHOW server_version", &[])?.get(0);
    let fsync: String = c.query_one("SHOW fsync", &[])?.get(0);
    let sync: String = c.query_one("SHOW synchronous_commit", &[])?.get(0);
    Ok(format!(
        "{cpu}, {cores} cores; PostgreSQL {version} on the same machine over TCP loopback \
         (fsync={fsync}, synchronous_commit={sync})"
    ))
}

fn main() -> BenchResult<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let base = std::env::var("HOROS_PG_URL")
        .map_err(|_| "HOROS_PG_URL is not set (scripts/setup_postgres.sh prints it)")?;
    let (n, repeats, samples) = if quick {
        (5_000, 1, 100)
    } else {
        (20_000, 3, 500)
    };
    println!("machine: {}", machine(&base)?);
    println!("drain of {n} jobs, {BATCH} per batch, median of {repeats}");
    println!(
        "| workers | squeueha (jobs/s) | raw SKIP LOCKED ceiling (jobs/s) | ratio | raw lease control (jobs/s) | squeueha / control |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for workers in [1, 4, 16] {
        let mut sq = Vec::new();
        let mut raw = Vec::new();
        let mut lease = Vec::new();
        for _ in 0..repeats {
            // Interleaved, so that no side always runs on a warmer (or quieter) server.
            raw.push(raw_drain(&base, n, workers, false)?);
            sq.push(squeueha_drain(&base, n, workers, 1)?);
            lease.push(raw_drain(&base, n, workers, true)?);
        }
        let (sq, raw, lease) = (median(&mut sq), median(&mut raw), median(&mut lease));
        println!(
            "| {workers} | {sq:.0} | {raw:.0} | {:.2}× | {lease:.0} | {:.2}× |",
            sq / raw,
            sq / lease
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
