//! PostgreSQL drain helpers shared by `squeueha-pg-bench` and `squeueha-peer-bench`: fresh
//! schemas, squeueha's batched drain, the raw `SKIP LOCKED` ceiling (and the raw lease control),
//! and a line naming the machine.

use std::time::{Duration, Instant};

use squeueha::pg::{Client, NoTls};
use squeueha::{Config, Queue};

pub use crate::BenchResult;
use crate::{PAYLOAD, drain_fused, fill};

/// Visibility timeout of every claim (long enough that no lease expires during a drain).
pub const VIS: Duration = Duration::from_secs(300);
/// Jobs per claim.
pub const BATCH: usize = 32;

/// A fresh schema, dropped (with everything in it) when this is dropped.
pub struct Schema {
    base: String,
    name: String,
}

impl Schema {
    /// Creates `sqh_bench_<pid>_<tag>`, dropping any left over under that name.
    pub fn create(base: &str, tag: &str) -> BenchResult<Schema> {
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

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base URL with `search_path` set to this schema.
    pub fn url(&self) -> String {
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

/// squeueha's drain of `n` jobs: `workers` threads spread over `nodes` queue handles (each with
/// its own pool and listener, as separate nodes would have), each looping on
/// `ack_and_poll(&leases, "q", BATCH, VIS)`; returns jobs/s from the first claim to the last ack.
pub fn squeueha_drain(base: &str, n: usize, workers: usize, nodes: usize) -> BenchResult<f64> {
    let schema = Schema::create(base, "drain")?;
    let cfg = Config {
        pool_size: workers.div_ceil(nodes) as u32 + 1,
        ..Config::default()
    };
    let handles: Vec<Queue> = (0..nodes)
        .map(|_| Queue::open_postgres(&schema.url(), cfg.clone()))
        .collect::<Result<_, _>>()?;
    let q = handles[0].clone();
    fill(&q, "q", n, 0)?;
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let q = handles[w % nodes].clone();
            std::thread::spawn(move || drain_fused(&q, "q", BATCH, VIS))
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

/// What [`raw_drain`] runs, in plain SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    /// The bare ceiling: one `DELETE … SKIP LOCKED … RETURNING` per batch (a claim that is its
    /// own ack: no lease, nothing to recover if a worker dies).
    Ceiling,
    /// The same delete with squeueha's two planning choices: the ids taken as
    /// `id = ANY(ARRAY(SELECT … SKIP LOCKED))` and the connection on generic plans. The textbook
    /// `id IN (SELECT … LIMIT $1 …)` gets a plan of its own on every run (its generic plan
    /// reckons the `LIMIT` at a tenth of the table and hash-joins it).
    TunedCeiling,
    /// What a lease costs when it is kept in each job's row, on squeueha's table shape (the claim
    /// moves rows from the ready index to the timers' index; the next statement deletes them),
    /// without promotion, dead letters, dedup or notifications.
    RowLease,
    /// What a lease costs when a claimed batch is kept in one row (squeueha's way on PostgreSQL
    /// for small payloads): the claim deletes its jobs and inserts one lease row with their ids
    /// and payloads, the next statement deletes that row; nothing else.
    BatchLease,
}

/// A fresh schema holding `n` ready jobs in the table (and leases) that `raw` drains.
fn raw_schema(base: &str, n: usize, raw: Raw) -> BenchResult<Schema> {
    let schema = Schema::create(
        base,
        match raw {
            Raw::Ceiling => "raw",
            Raw::TunedCeiling => "tuned",
            Raw::RowLease => "lease",
            Raw::BatchLease => "batch",
        },
    )?;
    let mut c = Client::connect(&schema.url(), NoTls)?;
    c.batch_execute(
        "CREATE TABLE raw_jobs (id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL,
             state INTEGER NOT NULL DEFAULT 0, priority INTEGER NOT NULL, due_at BIGINT NOT NULL,
             token BIGINT, payload BYTEA NOT NULL);",
    )?;
    if raw == Raw::RowLease {
        c.batch_execute(
            "CREATE INDEX raw_jobs_claim ON raw_jobs (queue, priority DESC, due_at, id)
                 WHERE state = 0;
             CREATE INDEX raw_jobs_timed ON raw_jobs (state, queue, due_at) WHERE state <> 0;",
        )?;
    } else {
        c.batch_execute(
            "CREATE INDEX raw_jobs_claim ON raw_jobs (queue, priority DESC, due_at, id);
             CREATE TABLE raw_leases (token BIGINT PRIMARY KEY, expires_at BIGINT NOT NULL,
                 ids BIGINT[] NOT NULL, payloads BYTEA[] NOT NULL);",
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
    Ok(schema)
}

/// Drains the jobs on `c` the `raw` way until a claim finds none; returns how many it took.
/// `worker` keeps lease tokens apart between workers.
fn raw_worker(c: &mut Client, raw: Raw, worker: usize) -> BenchResult<usize> {
    if raw == Raw::BatchLease {
        let stmt = c.prepare(
            "WITH acked AS (DELETE FROM raw_leases WHERE token = $2 RETURNING ids),
                  picked AS (
                      DELETE FROM raw_jobs WHERE id IN (
                          SELECT id FROM raw_jobs WHERE queue = 'q'
                          ORDER BY priority DESC, due_at, id LIMIT $1
                          FOR UPDATE SKIP LOCKED)
                      RETURNING id, payload),
                  leased AS (
                      INSERT INTO raw_leases
                      SELECT $3, 9000000000000, array_agg(id), array_agg(payload)
                      FROM picked HAVING count(*) > 0 RETURNING 1)
             SELECT 0, cardinality(ids)::bigint, NULL::bytea FROM acked
             UNION ALL SELECT 1, id, payload FROM picked",
        )?;
        // Tokens of their own per worker (a lease row's key).
        let mut token = (worker as i64) << 32;
        let mut done = 0usize;
        loop {
            let next = token + 1;
            let rows = c.query(&stmt, &[&(BATCH as i64), &token, &next])?;
            let mut claimed = 0;
            for r in &rows {
                if r.get::<_, i32>(0) == 0 {
                    done += usize::try_from(r.get::<_, i64>(1))?;
                } else {
                    claimed += 1;
                }
            }
            if claimed == 0 {
                return Ok(done);
            }
            token = next;
        }
    }
    if raw == Raw::Ceiling || raw == Raw::TunedCeiling {
        let stmt = if raw == Raw::Ceiling {
            c.prepare(
                "DELETE FROM raw_jobs WHERE id IN (
                     SELECT id FROM raw_jobs WHERE queue = 'q'
                     ORDER BY priority DESC, due_at, id LIMIT $1
                     FOR UPDATE SKIP LOCKED)
                 RETURNING id, payload",
            )?
        } else {
            c.batch_execute("SET plan_cache_mode = force_generic_plan")?;
            c.prepare(
                "DELETE FROM raw_jobs WHERE id = ANY(ARRAY(
                     SELECT id FROM raw_jobs WHERE queue = 'q'
                     ORDER BY priority DESC, due_at, id LIMIT $1
                     FOR UPDATE SKIP LOCKED))
                 RETURNING id, payload",
            )?
        };
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
}

/// `workers` threads on their own connections drain `n` jobs the `raw` way; returns jobs/s.
pub fn raw_drain(base: &str, n: usize, workers: usize, raw: Raw) -> BenchResult<f64> {
    let schema = raw_schema(base, n, raw)?;
    let url = schema.url();
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|worker| {
            let url = url.clone();
            std::thread::spawn(move || -> BenchResult<usize> {
                raw_worker(&mut Client::connect(&url, NoTls)?, raw, worker)
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

/// What one drain by one worker cost the server.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    /// CPU time of the worker's backend process, per job (µs).
    pub server_us: f64,
    /// WAL written during the drain, per job (bytes).
    pub wal_bytes: f64,
    /// Jobs per second.
    pub rate: f64,
}

/// The on-CPU time (ns) of process `pid`, from `/proc/PID/schedstat`; `None` where it cannot be
/// read (a server on another machine).
fn cpu_ns(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The server's WAL position (bytes).
fn wal_lsn(c: &mut Client) -> BenchResult<i64> {
    Ok(
        c.query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])?
            .get(0),
    )
}

/// Times `drain` (which returns how many jobs it took) on backend `pid`; `None` when its CPU time
/// cannot be read.
fn measure(
    pid: i32,
    n: usize,
    wal: &mut Client,
    drain: impl FnOnce() -> BenchResult<usize>,
) -> BenchResult<Option<Cost>> {
    let Some(cpu0) = cpu_ns(pid) else {
        return Ok(None);
    };
    let w0 = wal_lsn(wal)?;
    let start = Instant::now();
    let done = drain()?;
    let secs = start.elapsed().as_secs_f64();
    let (cpu1, w1) = (cpu_ns(pid).unwrap_or(cpu0), wal_lsn(wal)?);
    if done != n {
        return Err(format!("drained {done} of {n}").into());
    }
    Ok(Some(Cost {
        server_us: cpu1.saturating_sub(cpu0) as f64 / 1e3 / n as f64,
        wal_bytes: (w1 - w0) as f64 / n as f64,
        rate: n as f64 / secs,
    }))
}

/// One worker drains `n` jobs, the `raw` way or (`None`) with squeueha's `ack_and_poll`, on one
/// connection whose backend's CPU time is read before and after; `None` when the server's
/// processes cannot be read from here.
pub fn drain_cost(base: &str, n: usize, raw: Option<Raw>) -> BenchResult<Option<Cost>> {
    let mut wal = Client::connect(base, NoTls)?;
    if let Some(raw) = raw {
        let schema = raw_schema(base, n, raw)?;
        let mut c = Client::connect(&schema.url(), NoTls)?;
        let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[])?.get(0);
        return measure(pid, n, &mut wal, || raw_worker(&mut c, raw, 0));
    }
    let schema = Schema::create(base, "cost")?;
    // One connection: the pool's only one, whose backend is read.
    let q = Queue::open_postgres(
        &schema.url(),
        Config {
            pool_size: 1,
            ..Config::default()
        },
    )?;
    fill(&q, "q", n, 0)?;
    let pid: i32 = q.pg_transaction(|tx| -> squeueha::Result<i32> {
        Ok(tx
            .client()
            .query_one("SELECT pg_backend_pid()", &[])?
            .get(0))
    })?;
    measure(pid, n, &mut wal, || drain_fused(&q, "q", BATCH, VIS))
}

/// One line naming the machine (CPU model, cores) and the server (version, fsync,
/// synchronous_commit).
pub fn machine(base: &str) -> BenchResult<String> {
    let cpu = crate::cpu();
    let mut c = Client::connect(base, NoTls)?;
    let version: String = c.query_one("SHOW server_version", &[])?.get(0);
    let fsync: String = c.query_one("SHOW fsync", &[])?.get(0);
    let sync: String = c.query_one("SHOW synchronous_commit", &[])?.get(0);
    Ok(format!(
        "{cpu}; PostgreSQL {version} on the same machine over TCP loopback \
         (fsync={fsync}, synchronous_commit={sync})"
    ))
}
