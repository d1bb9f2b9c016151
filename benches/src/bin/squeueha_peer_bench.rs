//! squeueha on PostgreSQL next to the raw SQL ceiling and a peer Rust queue on PostgreSQL
//! (sqlxmq, from crates.io), on the same server, in the same run (issue #19).
//!
//! ```text
//! cargo build --release --manifest-path benches/sqlxmq-peer/Cargo.toml
//! HOROS_PG_URL=postgres://… cargo run --release -p horos-benches --bin squeueha-peer-bench [-- --quick]
//! ```
//!
//! N jobs (64-byte payloads, already enqueued) are drained by 1, 4 and 16 workers; median of 3
//! runs of each side, the sides interleaved, each in a fresh schema:
//!
//! - squeueha: `workers` threads on one `Queue` handle (pool of `workers + 1`), each looping on
//!   `ack_and_poll(&leases, "q", 32, …)` (the ack of the last batch and the claim of the next in
//!   one statement), as `squeueha-pg-bench` does;
//! - the raw ceiling: `workers` threads on their own connections, each looping on a bare
//!   `DELETE … WHERE id IN (SELECT … LIMIT 32 FOR UPDATE SKIP LOCKED) RETURNING` (the same SQL as
//!   `squeueha-pg-bench`);
//! - sqlxmq 0.6: `workers` job runners sharing one pool of `workers + 32` connections (plus a
//!   listening connection each; with squeueha's `workers + 1` its concurrent per-job acks
//!   starve), each claiming up to 32 jobs per poll and acking each job with
//!   `CurrentJob::complete` (sqlxmq has no batched ack). sqlxmq cannot share the workspace's
//!   lockfile (sqlx's optional libsqlite3-sys clashes with rusqlite's), so its drain is the
//!   `sqlxmq-drain` binary of `benches/sqlxmq-peer`, run as a child process (found at
//!   `$HOROS_SQLXMQ_DRAIN`, or that crate's `target/release/sqlxmq-drain`); it times itself.
//!
//! `--sqlxmq-concurrency MIN,MAX` sets sqlxmq's `set_concurrency` (default 1,32: a runner polls
//! for 32 jobs once its last batch is done, as a squeueha worker does).

use std::process::Command;

use horos_benches::median;
use horos_benches::pg::{BATCH, BenchResult, Raw, machine, raw_drain, squeueha_drain};

fn sqlxmq_binary() -> String {
    std::env::var("HOROS_SQLXMQ_DRAIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/sqlxmq-peer/target/release/sqlxmq-drain"
        )
        .to_owned()
    })
}

/// One sqlxmq drain in a child process; jobs/s, and the acks that failed (left to sqlxmq's
/// retry).
fn sqlxmq_drain(
    base: &str,
    n: usize,
    workers: usize,
    (min, max): (usize, usize),
) -> BenchResult<(f64, usize)> {
    let bin = sqlxmq_binary();
    let schema = format!("sqh_bench_{}_sqlxmq", std::process::id());
    let out = Command::new(&bin)
        .args(["--url", base, "--schema", &schema])
        .args(["--jobs", &n.to_string(), "--runners", &workers.to_string()])
        .args(["--min", &min.to_string(), "--max", &max.to_string()])
        .args(["--pool", &sqlxmq_pool(workers).to_string()])
        .output()
        .map_err(|e| {
            format!(
                "{bin}: {e} (build it: cargo build --release --manifest-path \
                 benches/sqlxmq-peer/Cargo.toml, or set HOROS_SQLXMQ_DRAIN)"
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "sqlxmq-drain failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .last()
        .ok_or("sqlxmq-drain printed nothing")?;
    let (rate, failed) = last
        .trim()
        .split_once(' ')
        .ok_or_else(|| format!("sqlxmq-drain printed {last:?}"))?;
    Ok((rate.parse()?, failed.parse()?))
}

/// sqlxmq acks each job with its own statement, concurrently: a pool of `workers + 1` (what
/// squeueha gets) starves it, so it gets `workers + 32`, a connection for every ack of a batch.
fn sqlxmq_pool(workers: usize) -> usize {
    workers + BATCH
}

fn concurrency_arg() -> BenchResult<(usize, usize)> {
    let args: Vec<String> = std::env::args().collect();
    let Some(i) = args.iter().position(|a| a == "--sqlxmq-concurrency") else {
        return Ok((1, BATCH));
    };
    let v = args
        .get(i + 1)
        .ok_or("--sqlxmq-concurrency needs MIN,MAX")?;
    let (min, max) = v
        .split_once(',')
        .ok_or("--sqlxmq-concurrency needs MIN,MAX")?;
    Ok((min.parse()?, max.parse()?))
}

fn main() -> BenchResult<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let base = std::env::var("HOROS_PG_URL")
        .map_err(|_| "HOROS_PG_URL is not set (scripts/setup_postgres.sh prints it)")?;
    let conc = concurrency_arg()?;
    let (n, repeats) = if quick { (2_000, 1) } else { (20_000, 3) };
    let nproc = Command::new("nproc")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("machine: {}", machine(&base)?);
    println!(
        "nproc: {nproc}; load average before: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "drain of {n} jobs ({} bytes each), median of {repeats}, sides interleaved, each in a fresh schema",
        horos_benches::PAYLOAD
    );
    println!(
        "squeueha: W threads, one Queue (pool W+1), ack_and_poll with {BATCH} per batch (ack + claim in one statement)"
    );
    println!(
        "raw ceiling: W threads on own connections, DELETE … (SELECT … LIMIT {BATCH} FOR UPDATE SKIP LOCKED) RETURNING"
    );
    println!(
        "sqlxmq 0.6: W job runners (own LISTEN connection each), one pool of W+{BATCH} connections, \
         set_concurrency({}, {}) (poll for up to {} jobs when fewer than {} run), keep-alive on \
         (default), one mq_delete per job (CurrentJob::complete)",
        conc.0, conc.1, conc.1, conc.0
    );
    println!(
        "| workers | squeueha (jobs/s) | raw ceiling (jobs/s) | sqlxmq (jobs/s) | squeueha / ceiling | squeueha / sqlxmq |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for workers in [1, 4, 16] {
        let (mut sq, mut raw, mut peer) = (Vec::new(), Vec::new(), Vec::new());
        let mut failed_acks = 0;
        for _ in 0..repeats {
            // Interleaved, so that no side always runs on a warmer (or quieter) server.
            raw.push(raw_drain(&base, n, workers, Raw::Ceiling)?);
            sq.push(squeueha_drain(&base, n, workers, 1)?);
            let (rate, failed) = sqlxmq_drain(&base, n, workers, conc)?;
            peer.push(rate);
            failed_acks += failed;
        }
        let (sq, raw, peer) = (median(&mut sq), median(&mut raw), median(&mut peer));
        println!(
            "| {workers} | {sq:.0} | {raw:.0} | {peer:.0} | {:.2}× | {:.2}× |",
            sq / raw,
            sq / peer
        );
        if failed_acks > 0 {
            eprintln!(
                "note: {workers} workers: {failed_acks} sqlxmq acks failed over {repeats} runs \
                 (those jobs were redelivered by sqlxmq's retry and acked later)"
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average after: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}
