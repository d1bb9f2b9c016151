//! sqlxmq's drain, for `squeueha-peer-bench` (which runs this binary as a child process: see
//! Cargo.toml for why it lives in a workspace of its own).
//!
//! `sqlxmq-drain --url URL --schema NAME --jobs N --runners W --min A --max B --pool P`
//!
//! In a fresh schema (dropped at the end): sqlxmq's own migrations, then `W` job runners (each a
//! polling loop with its own LISTEN connection, as `W` nodes would run), sharing one pool of `P`
//! connections, started on the empty queue. Each runner polls (`mq_poll`, one statement claiming
//! up to `max - running` jobs) whenever fewer than `min` of its jobs are running; each job is
//! acked by `CurrentJob::complete` (`mq_delete` of its id: sqlxmq has no batched ack). Then `N`
//! jobs (64-byte binary payloads) are enqueued in one transaction through `mq_insert`, whose
//! commit notifies the runners; the clock starts when that commit has returned (so a runner may
//! start a little before it: in sqlxmq's favour) and stops at the last ack. Prints jobs/s and
//! the number of failed acks (jobs left to sqlxmq's retry) on the last line of stdout.

use std::error::Error;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use sqlxmq::{CurrentJob, JobRunnerOptions};
use tokio::sync::Notify;

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The payload size of every queue benchmark (`horos_benches::PAYLOAD`).
const PAYLOAD: usize = 64;

/// sqlxmq 0.6.0's migrations, in order.
const MIGRATIONS: [&str; 5] = [
    include_str!("../sql/20210316025847_setup.up.sql"),
    include_str!("../sql/20210921115907_clear.up.sql"),
    include_str!("../sql/20211013151757_fix_mq_latest_message.up.sql"),
    include_str!("../sql/20220208120856_fix_concurrent_poll.up.sql"),
    include_str!("../sql/20220713122907_fix-clear_all-keep-nil-message.up.sql"),
];

struct Args {
    url: String,
    schema: String,
    jobs: usize,
    runners: usize,
    min: usize,
    max: usize,
    pool: u32,
}

fn args() -> BenchResult<Args> {
    let mut a = Args {
        url: String::new(),
        schema: String::new(),
        jobs: 0,
        runners: 1,
        min: 1,
        max: 32,
        pool: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => a.url = v,
            "--schema" => a.schema = v,
            "--jobs" => a.jobs = v.parse()?,
            "--runners" => a.runners = v.parse()?,
            "--min" => a.min = v.parse()?,
            "--max" => a.max = v.parse()?,
            "--pool" => a.pool = v.parse()?,
            _ => return Err(format!("unknown argument {flag}").into()),
        }
    }
    if a.url.is_empty() || a.jobs == 0 || a.runners == 0 || a.min == 0 || a.max < a.min {
        return Err(
            "usage: sqlxmq-drain --url URL --schema NAME --jobs N --runners W \
                    [--min A --max B --pool P]"
                .into(),
        );
    }
    if !a
        .schema
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        || a.schema.is_empty()
    {
        return Err("the schema name must be [a-z0-9_]+".into());
    }
    if a.pool == 0 {
        a.pool = a.runners as u32 + 1;
    }
    Ok(a)
}

async fn drain(a: &Args) -> BenchResult<(f64, usize)> {
    let base = PgConnectOptions::from_str(&a.url)?;
    let s = &a.schema;
    let mut admin = PgConnection::connect_with(&base).await?;
    // uuid-ossp (sqlxmq's migration creates it) once, outside the schema that is dropped.
    sqlx::raw_sql(&format!(
        "CREATE EXTENSION IF NOT EXISTS \"uuid-ossp\" SCHEMA public;
         DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}"
    ))
    .execute(&mut admin)
    .await?;
    let ext: String = sqlx::query_scalar(
        "SELECT n.nspname::text FROM pg_extension e
         JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'uuid-ossp'",
    )
    .fetch_one(&mut admin)
    .await?;
    let opts = base.options([("search_path", format!("{s},{ext}"))]);
    let result = run(a, &opts).await;
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
        .execute(&mut admin)
        .await?;
    result
}

async fn run(a: &Args, opts: &PgConnectOptions) -> BenchResult<(f64, usize)> {
    let mut c = PgConnection::connect_with(opts).await?;
    for m in MIGRATIONS {
        sqlx::raw_sql(m).execute(&mut c).await?;
    }
    let pool = PgPoolOptions::new()
        .max_connections(a.pool)
        .min_connections(a.pool)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(opts.clone())
        .await?;
    // Open every pooled connection before the clock starts (as squeueha's pool is).
    let mut warm = Vec::new();
    for _ in 0..a.pool {
        warm.push(pool.acquire().await?);
    }
    drop(warm);

    let n = a.jobs;
    let done = Arc::new(AtomicUsize::new(0));
    let failed_acks = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(Notify::new());
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut runner = JobRunnerOptions::new(&pool, {
        let (done, failed_acks, finished, errors) = (
            done.clone(),
            failed_acks.clone(),
            finished.clone(),
            errors.clone(),
        );
        move |mut job: CurrentJob| {
            let (done, failed_acks, finished, errors) = (
                done.clone(),
                failed_acks.clone(),
                finished.clone(),
                errors.clone(),
            );
            tokio::spawn(async move {
                let len = job.raw_bytes().map_or(0, <[u8]>::len);
                if len != PAYLOAD {
                    if let Ok(mut errors) = errors.lock() {
                        errors.push(format!("a payload of {len} bytes"));
                    }
                    finished.notify_one();
                    return;
                }
                match job.complete().await {
                    // A failed ack (sqlxmq's mq_delete can deadlock with a concurrent poll)
                    // leaves the job to sqlxmq's retry, after its backoff: counted, not fatal.
                    Err(_) => {
                        failed_acks.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(()) => {
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == n {
                            finished.notify_one();
                        }
                    }
                }
            });
        }
    });
    runner
        .set_concurrency(a.min, a.max)
        .set_channel_names(&["q"]);
    let mut handles = Vec::new();
    for _ in 0..a.runners {
        handles.push(runner.run().await?);
    }
    // Let every runner make its first (empty) poll and wait on its listener.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let payloads: Vec<Vec<u8>> = vec![vec![7u8; PAYLOAD]; 5000];
    let mut tx = pool.begin().await?;
    let mut left = n;
    while left > 0 {
        let k = left.min(5000);
        // JobBuilder's defaults (4 retries, 1 s backoff, unordered, no two-phase commit), a
        // batch per statement.
        sqlx::query(
            "SELECT mq_insert(ARRAY(
                 SELECT (gen_random_uuid(), interval '0', 4, interval '1 second', 'q', '',
                         NULL::interval, false, 'bench', NULL::text, p)::mq_new_t
                 FROM unnest($1::bytea[]) AS t(p)))",
        )
        .bind(&payloads[..k])
        .execute(&mut *tx)
        .await?;
        left -= k;
    }
    tx.commit().await?;
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < n {
        let failed = errors.lock().map(|e| e.first().cloned()).unwrap_or(None);
        if let Some(e) = failed {
            return Err(format!("sqlxmq job failed: {e}").into());
        }
        if start.elapsed() > Duration::from_secs(600) {
            return Err(format!(
                "sqlxmq drained {} of {n} in 600 s",
                done.load(Ordering::SeqCst)
            )
            .into());
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), finished.notified()).await;
    }
    let secs = start.elapsed().as_secs_f64();
    for h in &mut handles {
        h.stop().await;
    }
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM mq_msgs WHERE id != uuid_nil()")
        .fetch_one(&pool)
        .await?;
    if left != 0 {
        return Err(format!("sqlxmq: {left} jobs left after the drain").into());
    }
    pool.close().await;
    Ok((n as f64 / secs, failed_acks.load(Ordering::SeqCst)))
}

fn main() -> BenchResult<()> {
    let a = args()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (rate, failed_acks) = rt.block_on(drain(&a))?;
    println!("{rate:.1} {failed_acks}");
    Ok(())
}
