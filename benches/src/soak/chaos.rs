//! The faults the soak injects: SIGKILL of an upstream server (a fakeai child of run: the
//! lane's or a pooled model's), and a disk-full phase (the data directory's tmpfs filled by a
//! ballast file, then emptied).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::load::{Fault, Shared};
use super::system::tree;

/// SIGKILLs the `n`-th upstream in turn among run's fakeai children (lane first, then the
/// pooled models loaded); records the fault. `false` when none runs.
pub fn kill_upstream(s: &Shared, run: u32, n: usize) -> bool {
    let mut upstreams: Vec<_> = tree(run)
        .into_iter()
        .filter(|p| p.name.starts_with("horos-fakeai"))
        .collect();
    upstreams.sort_by(|a, b| a.name.cmp(&b.name));
    if upstreams.is_empty() {
        return false;
    }
    let victim = &upstreams[n % upstreams.len()];
    // SAFETY: a signal to a pid read from /proc a moment ago, a descendant of our child.
    unsafe { libc::kill(victim.pid as i32, libc::SIGKILL) };
    let at = s.now_s();
    push(
        s,
        Fault {
            what: format!("SIGKILL {} (pid {})", victim.name, victim.pid),
            start_s: at,
            end_s: Some(at),
        },
    );
    true
}

/// Fills the filesystem of `dir` for `hold` (a ballast file written until the disk refuses),
/// then deletes it; records the fault. `None` when it was not done (no tmpfs of our own: never
/// the machine's real disk), with the reason.
pub fn disk_full(s: &Shared, dir: &Path, hold: Duration) -> Result<(), String> {
    let ballast = dir.join("soak-ballast");
    let mut f = std::fs::File::create(&ballast).map_err(|e| e.to_string())?;
    let block = vec![0u8; 1 << 20];
    let start = s.now_s();
    let index = push(
        s,
        Fault {
            what: "disk full".to_owned(),
            start_s: start,
            end_s: None,
        },
    );
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
    s.nap(hold);
    drop(f);
    let removed = std::fs::remove_file(&ballast).map_err(|e| e.to_string());
    let mut faults = s
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(fault) = faults.get_mut(index) {
        fault.end_s = Some(s.now_s());
    }
    removed
}

fn push(s: &Shared, fault: Fault) -> usize {
    let mut faults = s
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    faults.push(fault);
    faults.len() - 1
}
