//! Real processes sharing one queue file: SIGKILL crash recovery, contention, leader election.
//!
//! The test binary re-executes itself as the child (`SQUEUEHA_CHILD=<role>`), so the children are
//! real OS processes with their own connections, killed with SIGKILL where the test says so.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use squeueha::{NewJob, Queue};

const CHILD_ENV: &str = "SQUEUEHA_CHILD";

fn spawn_child(test: &str, role: &str, db: &Path, extra: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role)
        .env("SQUEUEHA_DB", db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn child_role() -> Option<(String, PathBuf)> {
    let role = std::env::var(CHILD_ENV).ok()?;
    Some((role, PathBuf::from(std::env::var("SQUEUEHA_DB").unwrap())))
}

fn sigkill(child: &mut Child) {
    // SAFETY: kill(2) on a pid we spawned and have not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());
}

/// Waits for a line starting with `prefix` on the child's stdout.
fn read_line_with(reader: &mut impl BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "child closed stdout before printing {prefix}");
        // libtest prints "test name ... " without a newline before the test's own output.
        if let Some(at) = line.find(prefix) {
            return line[at..].trim().to_owned();
        }
    }
}

/// Completion log written in the same transaction as the ack: a job counted twice would be a
/// duplicate completion.
fn complete(q: &Queue, job: &squeueha::Job, worker: &str) -> squeueha::Result<bool> {
    let lease = job.lease;
    let payload = job.payload.clone();
    let worker = worker.to_owned();
    q.transaction(|tx| {
        match tx.ack(lease) {
            Ok(()) => {}
            Err(squeueha::Error::StaleLease { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        tx.connection()?.execute(
            "INSERT INTO done_log (payload, worker) VALUES (?1, ?2)",
            (payload.clone(), worker.clone()),
        )?;
        Ok(true)
    })
}

fn create_log(q: &Queue) {
    q.transaction(|tx| -> squeueha::Result<()> {
        tx.connection()?.execute_batch(
            "CREATE TABLE IF NOT EXISTS done_log (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL, worker TEXT)",
        )?;
        Ok(())
    })
    .unwrap();
}

fn assert_exactly_once(db: &Path, expected: impl Iterator<Item = u64>) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT payload FROM done_log").unwrap();
    let mut seen: Vec<u64> = stmt
        .query_map([], |r| r.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(|p| u64::from_le_bytes(p.unwrap().try_into().unwrap()))
        .collect();
    seen.sort_unstable();
    let mut want: Vec<u64> = expected.collect();
    want.sort_unstable();
    assert_eq!(seen.len(), want.len(), "completion count");
    assert_eq!(seen, want, "every job completed exactly once");
}

#[test]
fn sigkilled_consumer_jobs_reappear_and_complete_exactly_once() {
    if let Some((role, db)) = child_role() {
        if role == "claimer" {
            let q = Queue::open(&db).unwrap();
            let jobs = q.poll_batch("work", 50, Duration::from_secs(1)).unwrap();
            println!("CLAIMED {}", jobs.len());
            std::thread::sleep(Duration::from_secs(600));
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let q = Queue::open(&db).unwrap();
    create_log(&q);
    let jobs: Vec<NewJob> = (0..200u64)
        .map(|i| NewJob::new(i.to_le_bytes().to_vec()))
        .collect();
    q.enqueue_batch("work", &jobs).unwrap();

    let mut child = spawn_child(
        "sigkilled_consumer_jobs_reappear_and_complete_exactly_once",
        "claimer",
        &db,
        &[],
    );
    let mut out = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line_with(&mut out, "CLAIMED"), "CLAIMED 50");
    sigkill(&mut child);
    assert_eq!(q.stats("work").unwrap().in_flight, 50);

    // Survivors: three threads drain until every job is done.
    let start = Instant::now();
    let handles: Vec<_> = (0..3)
        .map(|w| {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut retried = 0u32;
                while q.stats("work").unwrap().pending() > 0 {
                    assert!(start.elapsed() < Duration::from_secs(60));
                    for job in q
                        .poll_batch_wait(
                            "work",
                            8,
                            Duration::from_secs(30),
                            Duration::from_millis(300),
                        )
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
    // Exactly the killed consumer's 50 jobs came back for a second attempt.
    assert_eq!(retried, 50);
    assert_exactly_once(&db, 0..200u64);
}

#[test]
fn eight_processes_contend_without_busy_errors() {
    const PROCS: u64 = 8;
    const THREADS: u64 = 3;
    const PER_THREAD: u64 = 150;
    if let Some((role, db)) = child_role() {
        if role == "contender" {
            let p: u64 = std::env::var("SQUEUEHA_PROC").unwrap().parse().unwrap();
            let q = Queue::open(&db).unwrap();
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        let base = (p * THREADS + t) * PER_THREAD;
                        // Half enqueued one by one, half in batches of 25.
                        for i in 0..PER_THREAD / 2 {
                            q.enqueue("work", NewJob::new((base + i).to_le_bytes().to_vec()))
                                .unwrap();
                        }
                        let rest: Vec<NewJob> = (PER_THREAD / 2..PER_THREAD)
                            .map(|i| NewJob::new((base + i).to_le_bytes().to_vec()))
                            .collect();
                        for chunk in rest.chunks(25) {
                            q.enqueue_batch("work", chunk).unwrap();
                        }
                        // Then drain whatever is there, from every process.
                        let mut idle = 0;
                        while idle < 5 {
                            let jobs = q.poll_batch("work", 16, Duration::from_secs(60)).unwrap();
                            if jobs.is_empty() {
                                idle += 1;
                                std::thread::sleep(Duration::from_millis(50));
                                continue;
                            }
                            idle = 0;
                            for job in &jobs {
                                assert!(complete(&q, job, &format!("p{p}t{t}")).unwrap());
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            println!("DONE");
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let q = Queue::open(&db).unwrap();
    create_log(&q);
    let children: Vec<Child> = (0..PROCS)
        .map(|p| {
            spawn_child(
                "eight_processes_contend_without_busy_errors",
                "contender",
                &db,
                &[("SQUEUEHA_PROC", p.to_string())],
            )
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a contender failed (a BUSY error reached it?)"
        );
    }
    // Drain stragglers (a process may have finished before the last enqueues of another).
    while let Ok(jobs) = q.poll_batch("work", 64, Duration::from_secs(60)) {
        if jobs.is_empty() {
            break;
        }
        for job in &jobs {
            complete(&q, job, "parent").unwrap();
        }
    }
    assert_exactly_once(&db, 0..PROCS * THREADS * PER_THREAD);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let checksum: i64 = conn
        .query_row("SELECT count(DISTINCT worker) FROM done_log", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(checksum > 1, "work was distributed");
}

#[test]
fn leader_killed_and_successor_takes_over_with_higher_fencing_token() {
    if let Some((role, db)) = child_role() {
        if role == "candidate" {
            let me = std::env::var("SQUEUEHA_NAME").unwrap();
            let q = Queue::open(&db).unwrap();
            println!("STARTED {me}");
            let mut leading = false;
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until {
                let lead = q
                    // Renewed every 100 ms: a stall of almost 3 s would be needed to lose it.
                    .try_lead("allocator", &me, Duration::from_secs(3))
                    .unwrap();
                match (&lead, leading) {
                    (Some(l), false) => {
                        println!("LEADER {} {}", me, l.fencing_token);
                        leading = true;
                    }
                    (None, true) => leading = false,
                    _ => {}
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        return;
    }
    let test = "leader_killed_and_successor_takes_over_with_higher_fencing_token";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let q = Queue::open(&db).unwrap();
    let mut a = spawn_child(test, "candidate", &db, &[("SQUEUEHA_NAME", "a".into())]);
    let mut a_out = BufReader::new(a.stdout.take().unwrap());
    let a_line = read_line_with(&mut a_out, "LEADER");
    let a_token: i64 = a_line.rsplit(' ').next().unwrap().parse().unwrap();
    let mut b = spawn_child(test, "candidate", &db, &[("SQUEUEHA_NAME", "b".into())]);
    let mut b_out = BufReader::new(b.stdout.take().unwrap());
    read_line_with(&mut b_out, "STARTED");
    // While a renews, b stays a follower.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(q.leader("allocator").unwrap().unwrap().holder, "a");
    let killed_at = Instant::now();
    sigkill(&mut a);
    let b_line = read_line_with(&mut b_out, "LEADER");
    let took = killed_at.elapsed();
    let b_token: i64 = b_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(b_line.starts_with("LEADER b"));
    assert!(
        b_token > a_token,
        "fencing token must increase: {a_token} -> {b_token}"
    );
    assert!(took < Duration::from_secs(15), "takeover took {took:?}");
    assert_eq!(q.leader("allocator").unwrap().unwrap().holder, "b");
    sigkill(&mut b);
}

/// A consumer in another process waits for work with an idle poll of ten minutes: only the
/// cross-process wake-up can end its wait when this process enqueues. It claims each of three
/// jobs (each enqueued after it said it was waiting) and prints its payload.
#[test]
fn a_consumer_in_another_process_is_woken_by_an_enqueue() {
    const TEST: &str = "a_consumer_in_another_process_is_woken_by_an_enqueue";
    let config = || squeueha::Config {
        idle_poll: Duration::from_secs(600),
        ..squeueha::Config::default()
    };
    if let Some((role, db)) = child_role() {
        assert_eq!(role, "waiter");
        let q = Queue::open_with(&db, config()).unwrap();
        for _ in 0..3 {
            println!("waiting");
            let jobs = q
                .poll_batch_wait("wake", 1, Duration::from_secs(60), Duration::from_secs(600))
                .unwrap();
            for j in jobs {
                q.ack(j.lease).unwrap();
                println!("claimed {}", String::from_utf8_lossy(&j.payload));
            }
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wake.db");
    let q = Queue::open_with(&db, config()).unwrap();
    let mut child = spawn_child(TEST, "waiter", &db, &[]);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let started = Instant::now();
    for i in 0..3 {
        read_line_with(&mut out, "waiting");
        // The waiter noted its generation and polled before printing; give its poll time to
        // end and its wait to begin (a wake-up lost to this race would cost the 10-minute poll).
        std::thread::sleep(Duration::from_millis(200));
        q.enqueue("wake", NewJob::new(format!("job-{i}").into_bytes()))
            .unwrap();
        assert_eq!(
            read_line_with(&mut out, "claimed"),
            format!("claimed job-{i}")
        );
    }
    assert!(child.wait().unwrap().success());
    // Woken, not polled: three idle polls would have taken half an hour.
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "{:?}",
        started.elapsed()
    );
    // The child's socket is gone with it: removed when its handle dropped, or, where the
    // process ended before that (a background clone of the handle still held it), by the next
    // announcement, which finds nobody reading it.
    q.enqueue("wake", NewJob::new(b"after".to_vec())).unwrap();
    assert!(
        !squeueha_wake_dir_has_sockets(&db),
        "the child's socket is gone with it"
    );
}

fn squeueha_wake_dir_has_sockets(db: &Path) -> bool {
    let mut dir = db.as_os_str().to_owned();
    dir.push(".wake");
    std::fs::read_dir(PathBuf::from(dir))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
                .count()
                > 1 // this process's own handle is still open
        })
        .unwrap_or(false)
}
