//! Criterion benchmarks of squeueha next to the raw SQLite ceilings (file-backed, WAL + NORMAL).
//! `cargo bench -p horos-benches --bench squeueha`
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use horos_benches::{PAYLOAD, raw_connection};
use rusqlite::params;
use squeueha::{NewJob, Queue};

const VIS: Duration = Duration::from_secs(300);

fn enqueue(c: &mut Criterion) {
    let mut g = c.benchmark_group("enqueue");
    let dir = tempfile::tempdir().unwrap();
    let q = Queue::open(dir.path().join("q.db")).unwrap();
    g.throughput(Throughput::Elements(1));
    g.bench_function("squeueha/single", |b| {
        b.iter(|| q.enqueue("q", NewJob::new(vec![7u8; PAYLOAD])).unwrap())
    });
    let mut raw = raw_connection(&dir.path().join("raw.db")).unwrap();
    let mut t = 0i64;
    g.bench_function("raw/single", |b| {
        b.iter(|| {
            t += 1;
            raw.execute(
                "INSERT INTO raw_jobs (queue, priority, visible_at, payload) VALUES ('q', 0, ?1, ?2)",
                params![t, vec![7u8; PAYLOAD]],
            )
            .unwrap()
        })
    });
    g.throughput(Throughput::Elements(100));
    let batch: Vec<NewJob> = (0..100).map(|_| NewJob::new(vec![7u8; PAYLOAD])).collect();
    g.bench_function("squeueha/batch100", |b| {
        b.iter(|| q.enqueue_batch("q", &batch).unwrap())
    });
    g.bench_function("raw/batch100", |b| {
        b.iter(|| {
            let tx = raw.transaction().unwrap();
            {
                let mut st = tx
                    .prepare_cached(
                        "INSERT INTO raw_jobs (queue, priority, visible_at, payload) VALUES ('q', 0, ?1, ?2)",
                    )
                    .unwrap();
                for _ in 0..100 {
                    t += 1;
                    st.execute(params![t, vec![7u8; PAYLOAD]]).unwrap();
                }
            }
            tx.commit().unwrap();
        })
    });
    g.finish();
}

fn claim(c: &mut Criterion) {
    let mut g = c.benchmark_group("claim+ack");
    for n in [1usize, 32] {
        g.throughput(Throughput::Elements(n as u64));
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path().join("q.db")).unwrap();
        let fill: Vec<NewJob> = (0..n).map(|_| NewJob::new(vec![7u8; PAYLOAD])).collect();
        g.bench_function(format!("squeueha/poll_batch({n})+ack_batch"), |b| {
            b.iter_batched(
                || q.enqueue_batch("q", &fill).unwrap(),
                |_| {
                    let jobs = q.poll_batch("q", n, VIS).unwrap();
                    let leases: Vec<_> = jobs.iter().map(|j| j.lease).collect();
                    q.ack_batch(&leases).unwrap()
                },
                BatchSize::PerIteration,
            )
        });
        let raw = raw_connection(&dir.path().join("raw.db")).unwrap();
        let mut t = 0i64;
        g.bench_function(format!("raw/claim({n})+delete"), |b| {
            b.iter_batched(
                || {
                    let tx = raw.unchecked_transaction().unwrap();
                    for _ in 0..n {
                        t += 1;
                        tx.execute(
                            "INSERT INTO raw_jobs (queue, priority, visible_at, payload) VALUES ('q', 0, ?1, ?2)",
                            params![t, vec![7u8; PAYLOAD]],
                        )
                        .unwrap();
                    }
                    tx.commit().unwrap();
                },
                |_| {
                    let tx = raw.unchecked_transaction().unwrap();
                    let ids: Vec<i64> = {
                        let mut st = tx
                            .prepare_cached(
                                "UPDATE raw_jobs SET lease = 1, visible_at = visible_at + 30000
                                 WHERE id IN (SELECT id FROM raw_jobs WHERE queue = 'q'
                                              ORDER BY priority DESC, visible_at LIMIT ?1)
                                 RETURNING id",
                            )
                            .unwrap();
                        st.query_map([n as i64], |r| r.get(0))
                            .unwrap()
                            .collect::<Result<_, _>>()
                            .unwrap()
                    };
                    for id in ids {
                        tx.execute("DELETE FROM raw_jobs WHERE id = ?1", [id]).unwrap();
                    }
                    tx.commit().unwrap();
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3));
    targets = enqueue, claim
}
criterion_main!(benches);
