//! What only the PostgreSQL backend has: its own transaction type, LISTEN/NOTIFY between
//! handles (nodes), fencing inside a caller's transaction, its schema version, its connection
//! errors, and many consumers on several handles. Skipped without `HOROS_PG_URL` (failed with
//! `HOROS_REQUIRE_POSTGRES=1`).
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Backend, Db};
use horos_testkit::{wait_for, wait_until};
use squeueha::{AsyncQueue, Config, Error, NewJob, Queue};

const VIS: Duration = Duration::from_secs(30);

fn db(test: &str) -> Option<Db> {
    Backend::postgres(test).map(Db::new)
}

#[test]
fn pg_transaction_is_atomic_with_caller_tables() {
    let Some(db) = db("pg_transaction_is_atomic_with_caller_tables") else {
        return;
    };
    let q = db.open(Config::default());
    q.pg_transaction(|tx| -> squeueha::Result<()> {
        tx.client()
            .batch_execute("CREATE TABLE results (id BIGSERIAL PRIMARY KEY, v TEXT)")
            .map_err(Error::from)?;
        Ok(())
    })
    .unwrap();
    q.enqueue("a", NewJob::new(vec![1])).unwrap();
    let job = q.poll_batch("a", 1, VIS).unwrap().remove(0);
    let failed: Result<(), Error> = q.pg_transaction(|tx| {
        tx.client()
            .execute("INSERT INTO results (v) VALUES ('x')", &[])?;
        tx.ack(job.lease)?;
        tx.enqueue("next", NewJob::new(vec![2]))?;
        Err(Error::InvalidArgument("caller changed its mind".into()))
    });
    assert!(matches!(failed, Err(Error::InvalidArgument(_))));
    assert_eq!(q.stats("next").unwrap().ready, 0);
    assert_eq!(q.stats("a").unwrap().in_flight, 1);
    let rows = q
        .pg_transaction(|tx| -> squeueha::Result<i64> {
            tx.client()
                .execute("INSERT INTO results (v) VALUES ('x')", &[])?;
            tx.ack(job.lease)?;
            tx.enqueue("next", NewJob::new(vec![2]))?;
            Ok(tx
                .client()
                .query_one("SELECT count(*) FROM results", &[])?
                .get(0))
        })
        .unwrap();
    assert_eq!(rows, 1);
    assert_eq!(q.stats("next").unwrap().ready, 1);
    assert_eq!(q.stats("a").unwrap().pending(), 0);
    // The backend-neutral transaction reaches the same tables; only SQLite's connection is
    // refused, with a typed error.
    let n: i64 = q
        .transaction(|tx| {
            assert!(matches!(tx.connection(), Err(Error::Unsupported { .. })));
            tx.execute(
                "INSERT INTO results (v) VALUES (?1)",
                squeueha::params!["y"],
            )?;
            tx.query_opt("SELECT count(*) FROM results", squeueha::params![])?
                .ok_or(Error::NotFound("no count".into()))?
                .get(0)
        })
        .unwrap();
    assert_eq!(n, 2);
    assert!(matches!(q.read(|_| Ok(())), Err(Error::Unsupported { .. })));
}

#[test]
fn a_deposed_leaders_writes_are_refused_by_the_fence() {
    let Some(db) = db("a_deposed_leaders_writes_are_refused_by_the_fence") else {
        return;
    };
    // Two nodes.
    let node_a = db.open(Config::default());
    let node_b = db.open(Config::default());
    node_a
        .pg_transaction(|tx| -> squeueha::Result<()> {
            tx.client()
                .batch_execute("CREATE TABLE effects (holder TEXT, fencing BIGINT)")
                .map_err(Error::from)
        })
        .unwrap();
    // Long enough for node b's first try on a busy machine.
    let ttl = Duration::from_millis(1500);
    let a = node_a.try_lead("alloc", "a", ttl).unwrap().unwrap();
    assert!(node_b.try_lead("alloc", "b", ttl).unwrap().is_none());
    std::thread::sleep(ttl + Duration::from_millis(200));
    let b = node_b.try_lead("alloc", "b", ttl * 100).unwrap().unwrap();
    assert!(b.fencing_token > a.fencing_token);
    // The side effect is written only behind the fence.
    let write = |q: &Queue, holder: &str, token: i64| -> Result<(), Error> {
        q.pg_transaction(|tx| {
            if !tx.check_fencing("alloc", token)? {
                return Err(Error::InvalidArgument(format!("{holder}: fenced off")));
            }
            tx.client().execute(
                "INSERT INTO effects (holder, fencing) VALUES ($1, $2)",
                &[&holder, &token],
            )?;
            Ok(())
        })
    };
    assert!(write(&node_a, "a", a.fencing_token).is_err());
    write(&node_b, "b", b.fencing_token).unwrap();
    let rows: Vec<(String, i64)> = node_a
        .pg_transaction(|tx| -> squeueha::Result<_> {
            Ok(tx
                .client()
                .query("SELECT holder, fencing FROM effects", &[])?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect())
        })
        .unwrap();
    assert_eq!(rows, vec![("b".to_owned(), b.fencing_token)]);
}

/// A consumer on one handle is woken by an enqueue on another (another node): a change, not the
/// idle poll's timer, ends its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_nodes_enqueue_wakes_a_waiting_consumer() {
    let Some(db) = db("another_nodes_enqueue_wakes_a_waiting_consumer") else {
        return;
    };
    let producer = AsyncQueue::new(db.open(Config::default()));
    let consumer = AsyncQueue::new(db.open(Config::default()));
    // Let the consumer's listening connection start (set-up, not a measurement).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut watch = consumer.watch("a");
    watch.mark_seen();
    let enqueue = {
        let producer = producer.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            producer.enqueue("a", NewJob::new(vec![1])).await
        })
    };
    assert!(watch.wait(Duration::from_secs(60)).await.unwrap());
    enqueue.await.unwrap().unwrap();
    let jobs = consumer.poll_batch("a", 10, VIS).await.unwrap();
    assert_eq!(jobs.len(), 1);
    // The async caller's transaction: ack and enqueue the next stage together.
    let lease = jobs[0].lease;
    let next = consumer
        .pg_transaction(move |tx| {
            tx.ack(lease)?;
            tx.enqueue("b", NewJob::new(vec![2]))
        })
        .await
        .unwrap();
    assert!(next.is_new());
    assert_eq!(producer.stats("a").await.unwrap().pending(), 0);
    assert_eq!(producer.stats("b").await.unwrap().ready, 1);
}

#[test]
fn a_newer_schema_is_refused() {
    let Some(db) = db("a_newer_schema_is_refused") else {
        return;
    };
    let q = db.open(Config::default());
    q.pg_transaction(|tx| -> squeueha::Result<u64> {
        Ok(tx.client().execute(
            "UPDATE squeueha_schema SET version = 99 WHERE namespace = 'squeueha'",
            &[],
        )?)
    })
    .unwrap();
    drop(q);
    assert!(matches!(
        Queue::open_with(&db.target, Config::default()),
        Err(Error::SchemaTooNew { found: 99, .. })
    ));
}

#[test]
fn a_database_that_refuses_connections_is_a_typed_error() {
    if Backend::postgres("a_database_that_refuses_connections_is_a_typed_error").is_none() {
        return;
    }
    // Port 1 on loopback: nothing listens there.
    let err = Queue::open_postgres("postgres://u:p@127.0.0.1:1/db", Config::default()).unwrap_err();
    assert!(matches!(err, Error::CannotOpen { .. }), "{err:?}");
    assert!(
        !err.to_string().contains(":p@"),
        "the password leaked: {err}"
    );
    assert!(matches!(
        Queue::open_postgres("postgres://[bad", Config::default()),
        Err(Error::InvalidArgument(_))
    ));
}

/// Four consumers on two handles drain a queue with batched claims and acks: every job is
/// delivered exactly once (SKIP LOCKED never hands a row to two claimers).
#[test]
fn consumers_on_two_nodes_take_every_job_once() {
    let Some(db) = db("consumers_on_two_nodes_take_every_job_once") else {
        return;
    };
    let nodes = [db.open(Config::default()), db.open(Config::default())];
    let jobs: Vec<NewJob> = (0..2000u32)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    nodes[0].enqueue_batch("work", &jobs).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let q = nodes[w % 2].clone();
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut leases = Vec::new();
                loop {
                    let (report, jobs) = q.ack_and_poll(&leases, "work", 16, VIS).unwrap();
                    assert!(report.stale.is_empty());
                    if jobs.is_empty() {
                        return;
                    }
                    let mut seen = seen.lock().unwrap();
                    seen.extend(jobs.iter().map(|j| j.payload.clone()));
                    leases = jobs.iter().map(|j| j.lease).collect();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    let distinct: HashSet<&Vec<u8>> = seen.iter().collect();
    assert_eq!(seen.len(), 2000);
    assert_eq!(distinct.len(), 2000);
    assert_eq!(nodes[1].stats("work").unwrap().pending(), 0);
}

/// Completes `job` on `q`: the ack and the completion log row in one transaction, so a job logged
/// twice would be a duplicate completion. `false` when the lease was stale.
fn complete(q: &Queue, job: &squeueha::Job, worker: &str) -> squeueha::Result<bool> {
    q.pg_transaction(|tx| {
        match tx.ack(job.lease) {
            Ok(()) => {}
            Err(Error::StaleLease { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        tx.client().execute(
            "INSERT INTO done_log (payload, worker) VALUES ($1, $2)",
            &[&job.payload, &worker],
        )?;
        Ok(true)
    })
}

/// A node (a real process) claims 50 jobs and is SIGKILLed: its leases expire and two other
/// nodes finish its jobs; every job is completed exactly once (count and content).
#[test]
fn a_sigkilled_nodes_jobs_are_finished_by_the_others_exactly_once() {
    const TEST: &str = "a_sigkilled_nodes_jobs_are_finished_by_the_others_exactly_once";
    if let Ok(target) = std::env::var("SQUEUEHA_PG_CHILD") {
        let q = Queue::open_with(&target, Config::default()).unwrap();
        let jobs = q.poll_batch("work", 50, Duration::from_secs(1)).unwrap();
        println!("CLAIMED {}", jobs.len());
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let Some(db) = db(TEST) else {
        return;
    };
    let nodes = [db.open(Config::default()), db.open(Config::default())];
    nodes[0]
        .pg_transaction(|tx| -> squeueha::Result<()> {
            Ok(tx.client().batch_execute(
                "CREATE TABLE done_log (seq BIGSERIAL PRIMARY KEY, payload BYTEA NOT NULL, worker TEXT)",
            )?)
        })
        .unwrap();
    let jobs: Vec<NewJob> = (0..200u64)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    nodes[0].enqueue_batch("work", &jobs).unwrap();

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env("SQUEUEHA_PG_CHILD", &db.target)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the child closed stdout before claiming");
        if let Some(at) = line.find("CLAIMED") {
            assert_eq!(line[at..].trim(), "CLAIMED 50");
            break;
        }
    }
    // SAFETY: kill(2) on a pid we spawned and have not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0);
    assert!(!child.wait().unwrap().success());
    assert_eq!(nodes[1].stats("work").unwrap().in_flight, 50);

    // Survivors: three threads on two nodes drain until every job is done.
    let handles: Vec<_> = (0..3)
        .map(|w| {
            let q = nodes[w % 2].clone();
            std::thread::spawn(move || {
                let mut retried = 0u32;
                while q.stats("work").unwrap().pending() > 0 {
                    for job in q
                        .poll_batch_wait("work", 8, VIS, Duration::from_millis(300))
                        .unwrap()
                    {
                        if job.attempts > 1 {
                            retried += 1;
                        }
                        complete(&q, &job, &format!("survivor-{w}")).unwrap();
                    }
                }
                retried
            })
        })
        .collect();
    let retried: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    // Exactly the killed node's 50 jobs came back for a second attempt.
    assert_eq!(retried, 50);
    let mut seen: Vec<u64> = nodes[0]
        .pg_transaction(|tx| -> squeueha::Result<Vec<u64>> {
            Ok(tx
                .client()
                .query("SELECT payload FROM done_log", &[])?
                .iter()
                .map(|r| u64::from_le_bytes(r.get::<_, Vec<u8>>(0).try_into().unwrap()))
                .collect())
        })
        .unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..200u64).collect::<Vec<_>>(), "each job once");
}

/// The server ends every session of a node (as a restart does) while it holds leases: the node
/// goes on by itself (each call reconnects), its listening connection comes back, nothing is lost.
#[test]
fn a_node_whose_sessions_the_server_ended_reconnects_by_itself() {
    const TEST: &str = "a_node_whose_sessions_the_server_ended_reconnects_by_itself";
    let Some(db) = db(TEST) else {
        return;
    };
    let app = format!("sqh_reconnect_{}", std::process::id());
    let url = format!("{}&application_name={app}", db.target);
    let q = Queue::open_with(&url, Config::default()).unwrap();
    let jobs: Vec<NewJob> = (0..100u64)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    q.enqueue_batch("work", &jobs).unwrap();
    let held = q.poll_batch("work", 10, VIS).unwrap();
    assert_eq!(held.len(), 10);

    let admin_url = std::env::var("HOROS_PG_URL").unwrap();
    let mut admin = squeueha::pg::Client::connect(&admin_url, squeueha::pg::NoTls).unwrap();
    wait_for_listener(&mut admin, &app);
    let ended: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1) t",
            &[&app],
        )
        .unwrap()
        .get(0);
    assert!(
        ended >= 2,
        "the pool's and the listener's sessions: {ended}"
    );

    // Every call goes on working: the leases held across the loss are still good.
    for job in &held {
        q.ack(job.lease).unwrap();
    }
    let mut leases = Vec::new();
    let mut done = held.len();
    loop {
        let (report, jobs) = q.ack_and_poll(&leases, "work", 16, VIS).unwrap();
        done += report.acked;
        if jobs.is_empty() {
            break;
        }
        leases = jobs.iter().map(|j| j.lease).collect();
    }
    assert_eq!(done, 100);
    assert_eq!(q.stats("work").unwrap().pending(), 0);

    // The listening connection is back.
    wait_for_listener(&mut admin, &app);
}

/// Waits (at most a minute) until the session of `app` that listens for notifications is there.
fn wait_for_listener(admin: &mut squeueha::pg::Client, app: &str) {
    wait_for("the listening session", Duration::from_secs(60), || {
        let listening: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND query LIKE 'LISTEN%'",
                &[&app],
            )
            .unwrap()
            .get(0);
        listening == 1
    });
}

/// The worker runner on two nodes of one PostgreSQL queue: batches, each job's outcome (done,
/// retried past its one attempt, buried), every job handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_two_nodes_apply_each_jobs_outcome() {
    use squeueha::JobState;
    use squeueha::worker::{Outcome, QueueOptions, Worker};
    let Some(db) = db("workers_on_two_nodes_apply_each_jobs_outcome") else {
        return;
    };
    let nodes = [
        AsyncQueue::new(db.open(Config::default())),
        AsyncQueue::new(db.open(Config::default())),
    ];
    let jobs: Vec<NewJob> = (0..40)
        .map(|i| NewJob::new(format!("{i}").into_bytes()).max_attempts(1))
        .collect();
    let ids: Vec<i64> = nodes[0]
        .enqueue_batch("work", jobs)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let running: Vec<_> = nodes
        .iter()
        .map(|q| {
            let handled = Arc::clone(&handled);
            Worker::new(q.clone())
                .register(
                    "work",
                    QueueOptions::default().batch(8).concurrency(2),
                    move |jobs| {
                        let handled = Arc::clone(&handled);
                        async move {
                            handled.lock().unwrap().extend(jobs.iter().map(|j| j.id));
                            jobs.iter()
                                .map(|j| match j.payload.as_slice() {
                                    b"3" => Outcome::Bury("three is malformed".into()),
                                    b"4" => Outcome::Retry {
                                        error: "four failed".into(),
                                        delay: None,
                                    },
                                    _ => Outcome::Done,
                                })
                                .collect()
                        }
                    },
                )
                .start()
        })
        .collect();
    wait_until("the queue to drain", Duration::from_secs(60), || async {
        nodes[1].stats("work").await.unwrap().pending() == 0
    })
    .await;
    for r in running {
        r.shutdown().await;
    }
    let mut handled = handled.lock().unwrap().clone();
    handled.sort_unstable();
    let mut want = ids.clone();
    want.sort_unstable();
    assert_eq!(handled, want, "every job handled once");
    let mut dead = 0;
    for id in &ids {
        if nodes[0].get(*id).await.unwrap().map(|j| j.state) == Some(JobState::Dead) {
            dead += 1;
        }
    }
    assert_eq!(dead, 2, "buried, and retried past its one attempt");
    assert_eq!(nodes[0].stats("work").await.unwrap().dead, 2);
}

/// A periodic schedule run by three nodes of one PostgreSQL queue enqueues each period once
/// (the schedule's leader enqueues, the period's dedup key refuses the others).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_one_schedule_enqueue_each_period_once() {
    use squeueha::periodic::{Periodic, Schedule};
    let Some(db) = db("three_nodes_on_one_schedule_enqueue_each_period_once") else {
        return;
    };
    let mut running = Vec::new();
    let mut nodes = Vec::new();
    // Counted from before the first schedule starts and from after the last (opening a node
    // takes a while here).
    let first_started = squeueha::now_ms();
    for p in 0..3 {
        let q = AsyncQueue::new(db.open(Config::default()));
        running.push(
            Periodic::new(q.clone(), &format!("node-{p}"))
                .tick(Duration::from_millis(20))
                .schedule(Schedule::every(
                    "beat",
                    "beats",
                    Duration::from_secs(1),
                    b"beat".to_vec(),
                ))
                .start(),
        );
        nodes.push(q);
    }
    let all_started = squeueha::now_ms();
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    for r in running {
        r.shutdown().await;
    }
    let ended = squeueha::now_ms();
    let ready = nodes[0].stats("beats").await.unwrap().ready as i64;
    // One job per period seen: at most every period from the first start's to the end's, at
    // least those after the last start's but the end's (the first and the last only if a tick
    // came in them; three enqueuers without the election and the keys would make about three
    // times as many).
    let most = ended / 1000 - first_started / 1000 + 1;
    let least = ended / 1000 - all_started / 1000 - 1;
    let keys = nodes[0]
        .pg_transaction(|tx| -> squeueha::Result<Vec<(String, i64, i64)>> {
            Ok(tx
                .client()
                .query(
                    "SELECT key, job_id, created_at FROM squeueha_dedup ORDER BY created_at",
                    &[],
                )?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
        .await
        .unwrap();
    assert!(
        (least..=most).contains(&ready),
        "{ready} jobs for {least} to {most} periods \
         (started {first_started} to {all_started}, ended {ended}): {keys:?}"
    );
}

#[test]
fn in_flight_jobs_of_a_version_1_database_keep_their_leases() {
    let Some(db) = db("in_flight_jobs_of_a_version_1_database_keep_their_leases") else {
        return;
    };
    let q = db.open(Config::default());
    let now = squeueha::now_ms();
    // Version 1's tables: leases were the jobs' own rows (state 1), here two held by one claim and
    // one whose lease has expired.
    q.pg_transaction(|tx| -> squeueha::Result<()> {
        tx.client().batch_execute(&format!(
            "DROP TABLE squeueha_leases; DROP TYPE squeueha_leased;
             UPDATE squeueha_schema SET version = 1 WHERE namespace = 'squeueha';
             INSERT INTO squeueha_jobs (id, queue, state, priority, due_at, lease_token, attempts,
                                        max_attempts, enqueued_at, payload)
             VALUES (1, 'v', 1, 0, {held}, 77, 1, 5, {now}, '\\x01'),
                    (2, 'v', 1, 0, {held}, 77, 1, 5, {now}, '\\x02'),
                    (3, 'v', 1, 0, {gone}, 78, 1, 5, {now}, '\\x03');
             SELECT setval('squeueha_jobs_id_seq', 3);",
            held = now + 60_000,
            gone = now - 1,
        ))?;
        Ok(())
    })
    .unwrap();
    drop(q);
    let q = db.open(Config::default());
    assert_eq!(q.stats("v").unwrap().in_flight, 3);
    let reclaimed = q.poll_batch("v", 10, VIS).unwrap();
    assert_eq!(
        reclaimed
            .iter()
            .map(|j| (j.id, j.attempts, j.payload.clone()))
            .collect::<Vec<_>>(),
        [(3, 2, vec![3])]
    );
    let held = |id| squeueha::Lease {
        job_id: id,
        token: 77,
    };
    q.ack(held(1)).unwrap();
    q.ack(held(2)).unwrap();
    q.ack(reclaimed[0].lease).unwrap();
    let stats = q.stats("v").unwrap();
    assert_eq!((stats.ready, stats.in_flight), (0, 0));
}

#[test]
fn a_small_jobs_lease_is_its_batchs() {
    let Some(db) = db("a_small_jobs_lease_is_its_batchs") else {
        return;
    };
    let q = db.open(Config::default());
    q.enqueue_batch("s", &[NewJob::new(vec![1]), NewJob::new(vec![2])])
        .unwrap();
    let batch = q.poll_batch("s", 2, Duration::from_millis(100)).unwrap();
    // Extending one job's lease extends its batch-mate's, and a shorter extension of the other
    // does not bring the batch's expiry forward.
    let until = q.extend(batch[0].lease, VIS).unwrap();
    assert_eq!(
        q.extend(batch[1].lease, Duration::from_millis(1)).unwrap(),
        until
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(q.poll_batch("s", 2, VIS).unwrap().is_empty());
    assert_eq!(q.stats("s").unwrap().in_flight, 2);
    q.ack_batch(&[batch[0].lease, batch[1].lease])
        .unwrap()
        .all_acked()
        .unwrap();
}

#[test]
fn a_timer_that_came_due_is_claimed_while_ready_jobs_still_fill_the_claims() {
    let Some(db) = db("a_timer_that_came_due_is_claimed_while_ready_jobs_still_fill_the_claims")
    else {
        return;
    };
    let q = db.open(Config::default());
    q.enqueue_batch("t", &vec![NewJob::new(vec![0]); 2_000])
        .unwrap();
    let delayed = q
        .enqueue(
            "t",
            NewJob::new(vec![1])
                .priority(10)
                .delay(Duration::from_millis(100)),
        )
        .unwrap()
        .id();
    // Claims of one job each, always filled by ready jobs: the claims that skip the timers must
    // still let the delayed job in soon after its time, not after the last ready job.
    let mut leases = Vec::new();
    let mut claimed_before = None;
    for i in 0..2_001 {
        let (report, jobs) = q.ack_and_poll(&leases, "t", 1, VIS).unwrap();
        assert_eq!(report.stale, Vec::<i64>::new());
        if jobs.iter().any(|j| j.id == delayed) {
            claimed_before = Some(i);
            break;
        }
        leases = jobs.iter().map(|j| j.lease).collect();
    }
    let at = claimed_before.expect("the delayed job was never claimed");
    assert!(
        q.stats("t").unwrap().ready > 0,
        "claimed only once the ready jobs ran out (claim {at})"
    );
}

#[test]
fn claims_keep_their_generic_plan_once_the_jobs_table_has_statistics() {
    let Some(db) = db("claims_keep_their_generic_plan_once_the_jobs_table_has_statistics") else {
        return;
    };
    // One connection: the prepared statements read below are that connection's.
    let q = db.open(Config {
        pool_size: 1,
        ..Config::default()
    });
    let jobs: Vec<NewJob> = (0..20_000).map(|_| NewJob::new(vec![7; 64])).collect();
    q.enqueue_batch("g", &jobs).unwrap();
    // As autovacuum does for any table that has held many jobs: with statistics, a claim's
    // generic plan (which reckons a `LIMIT $n` at a tenth of the table) looks far costlier than
    // one planned for its count.
    squeueha::pg::Client::connect(&db.target, squeueha::pg::NoTls)
        .unwrap()
        .batch_execute("VACUUM ANALYZE squeueha_jobs")
        .unwrap();
    let mut leases = Vec::new();
    for _ in 0..30 {
        let (report, claimed) = q.ack_and_poll(&leases, "g", 4, VIS).unwrap();
        assert!(report.stale.is_empty());
        assert_eq!(claimed.len(), 4);
        leases = claimed.iter().map(|j| j.lease).collect();
    }
    let (generic, custom): (i64, i64) = q
        .pg_transaction(|tx| -> squeueha::Result<(i64, i64)> {
            let row = tx.client().query_one(
                "SELECT coalesce(sum(generic_plans), 0)::bigint, coalesce(sum(custom_plans), 0)::bigint
                 FROM pg_prepared_statements
                 WHERE statement LIKE '%INSERT INTO squeueha_leases%'
                       AND statement LIKE '%FOR UPDATE SKIP LOCKED%'",
                &[],
            )?;
            Ok((row.get(0), row.get(1)))
        })
        .unwrap();
    // Planned once: by default PostgreSQL would plan every run for its parameters here (measured
    // on the 2-core VM with 20,000 jobs and 4 per claim: 99 µs of server time per job, against
    // 53 with the generic plan).
    assert_eq!(custom, 0, "{custom} custom plans, {generic} generic");
    assert!(generic >= 29, "{custom} custom plans, {generic} generic");
}

#[test]
fn a_callers_transaction_can_plan_its_statements_for_their_parameters() {
    let Some(db) = db("a_callers_transaction_can_plan_its_statements_for_their_parameters") else {
        return;
    };
    let q = db.open(Config {
        pool_size: 1,
        ..Config::default()
    });
    let mode = |tx: &mut squeueha::QueueTx<'_>| -> squeueha::Result<String> {
        tx.query_opt("SHOW plan_cache_mode", squeueha::params![])?
            .ok_or(Error::NotFound("no setting".into()))?
            .get(0)
    };
    // The README's way out of the connection's generic plans, for one transaction only.
    let inside = q
        .transaction(|tx| {
            tx.execute("SET LOCAL plan_cache_mode = auto", squeueha::params![])?;
            mode(tx)
        })
        .unwrap();
    assert_eq!(inside, "auto");
    assert_eq!(q.transaction(mode).unwrap(), "force_generic_plan");
}

#[test]
fn lease_rows_are_compressed_with_lz4_where_the_server_has_it() {
    let Some(db) = db("lease_rows_are_compressed_with_lz4_where_the_server_has_it") else {
        return;
    };
    let q = db.open(Config::default());
    let (method, lz4): (String, bool) = q
        .pg_transaction(|tx| -> squeueha::Result<(String, bool)> {
            let method: String = tx
                .client()
                .query_one(
                    "SELECT attcompression::text FROM pg_attribute
                     WHERE attrelid = 'squeueha_leases'::regclass AND attname = 'jobs'",
                    &[],
                )?
                .get(0);
            // A savepoint: a server built without LZ4 refuses the probe, and only it.
            let lz4 = tx
                .client()
                .transaction()
                .and_then(|mut probe| {
                    probe.batch_execute("CREATE TEMP TABLE lz4_probe (b BYTEA COMPRESSION lz4)")
                })
                .is_ok();
            Ok((method, lz4))
        })
        .unwrap();
    assert_eq!(method, if lz4 { "l" } else { "" });
    // Jobs go through a lease row and back unchanged either way.
    let payload: Vec<u8> = (0..900u32).map(|i| (i % 7) as u8).collect();
    q.enqueue("z", NewJob::new(payload.clone())).unwrap();
    let job = q.poll_batch("z", 1, VIS).unwrap().remove(0);
    assert_eq!(job.payload, payload);
    q.release(job.lease, Duration::ZERO).unwrap();
    assert_eq!(q.poll_batch("z", 1, VIS).unwrap()[0].payload, payload);
}
