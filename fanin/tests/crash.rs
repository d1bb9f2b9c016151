//! A worker process killed with SIGKILL between fragments: after restart and lease expiry the parent
//! still completes exactly once.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use fanin::{
    Completion, FanIn, FanInConfig, FragmentOutcome, FragmentResult, ParentSpec, ParentState,
    Recorded,
};
use squeueha::{NewJob, Queue};

const TEST: &str = "worker_killed_between_fragments_parent_completes_once";

#[test]
fn worker_killed_between_fragments_parent_completes_once() {
    if let Ok(db) = std::env::var("FANIN_CHILD_DB") {
        // The doomed worker: completes 7 fragments, claims 5 more, then waits to be killed.
        let fan = FanIn::open(Queue::open(&db).unwrap(), FanInConfig::default()).unwrap();
        for job in fan
            .queue()
            .poll_batch("frag", 7, Duration::from_secs(60))
            .unwrap()
        {
            let i = job.payload[0];
            fan.complete(&job, FragmentResult::Bytes(vec![i, i]))
                .unwrap();
        }
        let held = fan
            .queue()
            .poll_batch("frag", 5, Duration::from_millis(700))
            .unwrap();
        println!("\nHOLDING {}", held.len());
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let parent = {
        let fan = FanIn::open(Queue::open(&db).unwrap(), FanInConfig::default()).unwrap();
        fan.create_parent(
            ParentSpec::new("doc", "frag")
                .jobs((0..20u8).map(|i| NewJob::new(vec![i])))
                .then("next", serde_json::Value::Null),
        )
        .unwrap()
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture"])
        .env("FANIN_CHILD_DB", &db)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HOLDING") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
    }
    assert!(line.contains("HOLDING 5"));
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();

    // "Restart": a fresh handle on the same file, as a new process would have.
    let fan = FanIn::open(Queue::open(&db).unwrap(), FanInConfig::default()).unwrap();
    let p = fan.progress(parent).unwrap();
    assert_eq!((p.done, p.pending), (7, 13));
    let mut finished = 0;
    let mut redelivered = 0;
    while fan.progress(parent).unwrap().state == ParentState::Pending {
        for job in fan
            .queue()
            .poll_batch_wait("frag", 4, Duration::from_secs(60), Duration::from_secs(5))
            .unwrap()
        {
            if job.attempts > 1 {
                redelivered += 1;
            }
            let i = job.payload[0];
            if let Recorded::ParentFinished(_) = fan
                .complete(&job, FragmentResult::Bytes(vec![i, i]))
                .unwrap()
            {
                finished += 1;
            }
        }
    }
    assert_eq!(finished, 1);
    assert_eq!(
        redelivered, 5,
        "the killed worker's 5 leases expired and came back"
    );
    let results = fan.results(parent).unwrap();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(*r, FragmentOutcome::Done(vec![i as u8, i as u8]));
    }
    let next = fan
        .queue()
        .poll_batch("next", 10, Duration::from_secs(10))
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].json::<Completion>().unwrap().parent_id, parent);
}
