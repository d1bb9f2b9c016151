//! The VRAM ledger shared by two processes. The test binary re-executes itself as the child
//! process (`HOROS_LEDGER_CHILD` set), which is then killed with SIGKILL.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use horos_gpu_alloc::ledger::{LeaseRequest, LedgerError, VramLedger};
use horos_testkit::wait_for;

const CHILD_ENV: &str = "HOROS_LEDGER_CHILD";
const DB_ENV: &str = "HOROS_LEDGER_DB";

fn req(owner: &str, pid: Option<u32>, parts: &[(u32, u64)], ttl_ms: u64) -> LeaseRequest {
    LeaseRequest {
        owner: owner.into(),
        pid,
        parts: parts.to_vec(),
        ttl: Duration::from_millis(ttl_ms),
    }
}

/// Child body: the mode says what to lease; prints `READY <lease ids>` and then sleeps
/// (renewing its leases) until killed.
#[test]
fn child_process() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let db = std::env::var(DB_ENV).unwrap();
    let ledger = VramLedger::open(&db).unwrap();
    let pid = std::process::id();
    let mut ids = Vec::new();
    match mode.as_str() {
        // One lease with our pid, one without pid (reclaimed only by expiry), both renewed.
        "hold" => {
            ids.push(
                ledger
                    .acquire(&req("child-pid", Some(pid), &[(0, 4000), (1, 4000)], 2000))
                    .unwrap()
                    .id,
            );
            ids.push(
                ledger
                    .acquire(&req("child-ttl", None, &[(1, 2000)], 1500))
                    .unwrap()
                    .id,
            );
        }
        // Grab 1000 MB leases on GPU 0 until refused.
        "grab" => loop {
            match ledger.acquire(&req("child-grab", Some(pid), &[(0, 1000)], 60_000)) {
                Ok(l) => ids.push(l.id),
                Err(LedgerError::Insufficient { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        },
        other => panic!("unknown mode {other}"),
    }
    println!("READY {}", ids.join(" "));
    loop {
        std::thread::sleep(Duration::from_millis(200));
        for id in &ids {
            let _ = ledger.renew(id, Duration::from_millis(1500));
        }
    }
}

fn spawn_child(mode: &str, db: &Path) -> (Child, Vec<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env(DB_ENV, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let ids = loop {
        let line = lines.next().expect("child exited before READY").unwrap();
        // libtest prints "test child_process ... " before the body's own output.
        if let Some((_, rest)) = line.split_once("READY") {
            break rest
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>();
        }
    };
    (child, ids)
}

fn kill9(child: &mut Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    child.wait().unwrap();
}

#[test]
fn killed_owner_leases_expire_and_the_survivor_keeps_its_own() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vram.db");
    let ledger = VramLedger::open(&db).unwrap();
    ledger.set_capacity(0, 24_000).unwrap();
    ledger.set_capacity(1, 24_000).unwrap();
    let mine = ledger
        .acquire(&req(
            "parent",
            Some(std::process::id()),
            &[(0, 10_000)],
            60_000,
        ))
        .unwrap();

    let (mut child, ids) = spawn_child("hold", &db);
    assert_eq!(ids.len(), 2);
    // Both processes' leases are visible to both.
    let rows = ledger.leases().unwrap();
    assert_eq!(
        rows.iter().filter(|r| r.owner == "child-pid").count(),
        2,
        "{rows:?}"
    );
    assert_eq!(ledger.free_mb(0).unwrap(), 24_000 - 10_000 - 4000);
    assert_eq!(ledger.free_mb(1).unwrap(), 24_000 - 4000 - 2000);
    // The child renews: after longer than its TTLs its leases are still there.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        ledger
            .leases()
            .unwrap()
            .iter()
            .filter(|r| r.owner.starts_with("child"))
            .count(),
        3
    );

    kill9(&mut child);
    // The lease carrying the dead pid is reclaimed at the next purge; the one without a pid
    // stays until its expiry.
    ledger.expire().unwrap();
    let rows = ledger.leases().unwrap();
    assert!(!rows.iter().any(|r| r.owner == "child-pid"), "{rows:?}");
    assert!(rows.iter().any(|r| r.owner == "child-ttl"), "{rows:?}");
    wait_for("the TTL lease to expire", Duration::from_secs(5), || {
        !ledger
            .leases()
            .unwrap()
            .iter()
            .any(|r| r.owner == "child-ttl")
    });
    ledger.expire().unwrap();
    // Ours is untouched.
    let rows = ledger.leases().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].id, mine.id);
    assert_eq!(ledger.free_mb(0).unwrap(), 14_000);
    assert_eq!(ledger.free_mb(1).unwrap(), 24_000);
}

#[test]
fn two_processes_never_over_commit_a_gpu() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vram.db");
    let ledger = VramLedger::open(&db).unwrap();
    ledger.set_capacity(0, 24_000).unwrap();
    // The child grabs while we grab, concurrently.
    let db2 = db.clone();
    let racer = std::thread::spawn(move || spawn_child("grab", &db2));
    let mut mine = 0u64;
    loop {
        match ledger.acquire(&req(
            "parent-grab",
            Some(std::process::id()),
            &[(0, 1000)],
            60_000,
        )) {
            Ok(_) => mine += 1,
            Err(LedgerError::Insufficient { .. }) => {
                if racer.is_finished() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let (mut child, theirs) = racer.join().unwrap();
    assert_eq!(
        mine + theirs.len() as u64,
        24,
        "parent {mine} + child {} leases of 1000 MB on 24000 MB",
        theirs.len()
    );
    assert_eq!(ledger.free_mb(0).unwrap(), 0);
    kill9(&mut child);
    ledger.expire().unwrap();
    assert_eq!(ledger.free_mb(0).unwrap(), 24_000 - 1000 * mine);
}
