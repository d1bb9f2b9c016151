//! The VRAM ledger in one process: acquire, release, renew, resize, expiry, multi-GPU, and
//! the check of the monitor's actual free memory.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use horos_gpu_alloc::ledger::{LeaseRequest, LedgerError, VramLedger, pid_alive};
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;

fn req(owner: &str, parts: &[(u32, u64)], ttl_ms: u64) -> LeaseRequest {
    LeaseRequest {
        owner: owner.into(),
        pid: None,
        parts: parts.to_vec(),
        ttl: Duration::from_millis(ttl_ms),
    }
}

fn ledger(dir: &tempfile::TempDir) -> VramLedger {
    let l = VramLedger::open(dir.path().join("vram.db")).unwrap();
    for g in 0..3 {
        l.set_capacity(g, 24_000).unwrap();
    }
    l
}

#[test]
fn acquire_release_and_refuse_over_commit() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let a = l.acquire(&req("a", &[(0, 20_000)], 60_000)).unwrap();
    assert_eq!(l.free_mb(0).unwrap(), 4000);
    let err = l.acquire(&req("b", &[(0, 5000)], 60_000)).unwrap_err();
    assert!(matches!(
        err,
        LedgerError::Insufficient {
            gpu: 0,
            requested_mb: 5000,
            available_mb: 4000,
            by: "ledger"
        }
    ));
    assert!(l.release(&a.id).unwrap());
    assert!(!l.release(&a.id).unwrap());
    l.acquire(&req("b", &[(0, 5000)], 60_000)).unwrap();
    assert!(matches!(
        l.acquire(&req("c", &[(7, 1)], 1000)),
        Err(LedgerError::UnknownGpu(7))
    ));
    assert!(matches!(
        l.acquire(&req("c", &[], 1000)),
        Err(LedgerError::Invalid(_))
    ));
    assert!(matches!(
        l.acquire(&req("c", &[(0, 1), (0, 1)], 1000)),
        Err(LedgerError::Invalid(_))
    ));
}

#[test]
fn multi_gpu_leases_are_all_or_nothing_in_index_order() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    l.acquire(&req("hog", &[(1, 20_000)], 60_000)).unwrap();
    // GPU 2 and 0 have room, GPU 1 does not: nothing is taken anywhere.
    let err = l
        .acquire(&req(
            "big",
            &[(2, 10_000), (1, 10_000), (0, 10_000)],
            60_000,
        ))
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::Insufficient { gpu: 1, .. }),
        "{err}"
    );
    assert_eq!(l.free_mb(0).unwrap(), 24_000);
    assert_eq!(l.free_mb(2).unwrap(), 24_000);
    let lease = l
        .acquire(&req("big", &[(2, 10_000), (0, 10_000)], 60_000))
        .unwrap();
    assert_eq!(lease.parts, vec![(0, 10_000), (2, 10_000)]);
    let rows: Vec<(u32, u64)> = l
        .leases()
        .unwrap()
        .iter()
        .filter(|r| r.id == lease.id)
        .map(|r| (r.gpu, r.mb))
        .collect();
    assert_eq!(rows, vec![(0, 10_000), (2, 10_000)]);
}

#[test]
fn leases_expire_unless_renewed() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let short = l.acquire(&req("short", &[(0, 1000)], 300)).unwrap();
    // Renewed for 1.5 s, past its first expiry, each time with three quarters of its TTL to
    // spare (a busy machine may be late).
    let renewed = l.acquire(&req("renewed", &[(0, 2000)], 1000)).unwrap();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(250));
        assert!(l.renew(&renewed.id, Duration::from_millis(1000)).unwrap());
    }
    assert!(
        !l.renew(&short.id, Duration::from_millis(300)).unwrap(),
        "an expired lease cannot be renewed"
    );
    assert!(l.expire().unwrap() >= 1);
    let rows = l.leases().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].owner, "renewed");
    assert_eq!(l.free_mb(0).unwrap(), 22_000);
}

#[test]
fn a_dead_pid_is_reclaimed_before_its_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    // A pid that surely does not exist (above the Linux pid_max limit of 2^22).
    let dead = 4_194_304 + 17;
    assert!(!pid_alive(dead));
    assert!(pid_alive(std::process::id()));
    l.acquire(&LeaseRequest {
        owner: "me".into(),
        pid: Some(std::process::id()),
        parts: vec![(0, 8000)],
        ttl: Duration::from_secs(3600),
    })
    .unwrap();
    l.acquire(&LeaseRequest {
        owner: "ghost".into(),
        pid: Some(dead),
        parts: vec![(0, 8000)],
        ttl: Duration::from_secs(3600),
    })
    .unwrap();
    assert_eq!(l.leases().unwrap().len(), 2);
    assert_eq!(l.expire().unwrap(), 1);
    assert_eq!(l.leases().unwrap().len(), 1);
    assert_eq!(l.free_mb(0).unwrap(), 16_000);
}

#[test]
fn resize_replaces_the_estimate_with_the_measurement() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let lease = l.acquire(&req("m", &[(0, 16_000)], 60_000)).unwrap();
    assert!(l.resize(&lease.id, 0, 9000).unwrap());
    assert_eq!(l.free_mb(0).unwrap(), 15_000);
    assert!(matches!(
        l.resize(&lease.id, 0, 30_000),
        Err(LedgerError::Insufficient { .. })
    ));
    assert!(!l.resize("nope", 0, 1).unwrap());
}

#[test]
fn acquire_checked_also_looks_at_actual_free_memory() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let fleet = SimFleet::new(3, 24_000);
    l.register_from(&fleet).unwrap();
    // A process outside the ledger uses 20 GB of GPU 0.
    fleet.load(0, "training-job", 20_000, Some(4242)).unwrap();
    let err = l
        .acquire_checked(&req("m", &[(0, 8000)], 60_000), &fleet)
        .unwrap_err();
    assert!(
        matches!(
            err,
            LedgerError::Insufficient {
                gpu: 0,
                by: "actual",
                ..
            }
        ),
        "{err}"
    );
    // The ledger alone would have said yes.
    assert_eq!(l.free_mb(0).unwrap(), 24_000);
    l.acquire_checked(&req("m", &[(1, 8000)], 60_000), &fleet)
        .unwrap();
}

#[test]
fn reopening_keeps_leases_and_a_newer_ledger_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    l.acquire(&req("a", &[(0, 1_000)], 60_000)).unwrap();
    drop(l);
    let again = VramLedger::open(dir.path().join("vram.db")).unwrap();
    assert_eq!(again.leases().unwrap().len(), 1);
    drop(again);
    let conn = rusqlite::Connection::open(dir.path().join("vram.db")).unwrap();
    conn.execute(
        "UPDATE squeueha_schema SET version = 9 WHERE namespace = 'horos_gpu_alloc'",
        [],
    )
    .unwrap();
    drop(conn);
    assert!(matches!(
        VramLedger::open(dir.path().join("vram.db")),
        Err(LedgerError::SchemaTooNew {
            found: 9,
            supported: 1
        })
    ));
}
