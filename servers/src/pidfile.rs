//! The pidfile: which server process an earlier run left behind, so that the next start can end
//! it (after a SIGKILLed parent, its server keeps the port) instead of failing on a busy port.
//!
//! The file holds the pid and the exact argv. Before killing anything, `/proc/PID/cmdline` must
//! equal that argv: a pid reused by an unrelated process is never touched.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What the pidfile records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidRecord {
    /// The server's pid (also its process group id: it leads its own group).
    pub pid: i32,
    /// The argv it was started with.
    pub argv: Vec<String>,
}

/// Writes `record` to `path` atomically (a temporary file renamed over it).
pub fn write(path: &Path, record: &PidRecord) -> io::Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("pid.tmp");
    std::fs::write(&tmp, serde_json::to_vec(record).map_err(io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}

/// Reads `path`: `None` when absent or unreadable as a record (a torn or foreign file is
/// treated as no record, never as a pid to kill).
pub fn read(path: &Path) -> Option<PidRecord> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes `path`, ignoring a missing file.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// The argv of `pid` from `/proc/PID/cmdline`.
pub fn proc_cmdline(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let raw = raw.strip_suffix(&[0]).unwrap_or(&raw);
    Some(
        raw.split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

/// State letter and process group of `pid` from `/proc/PID/stat`.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses; cut at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether `pid` runs: it exists and neither it nor any of its threads is a zombie or dead (an
/// orphan whose new parent does not reap stays a zombie; it holds no port and no memory). The
/// threads count: a multi-threaded process's main thread turns zombie first, and its files
/// (the listening socket) are released only when the last thread is gone.
pub fn is_alive(pid: i32) -> bool {
    let running = |s: char| s != 'Z' && s != 'X';
    match proc_stat(pid) {
        None => false,
        Some((s, _)) if running(s) => true,
        Some(_) => std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.filter_map(Result::ok).any(|t| {
                    std::fs::read_to_string(t.path().join("stat"))
                        .ok()
                        .and_then(|stat| {
                            let rest = &stat[stat.rfind(')')? + 1..];
                            rest.split_whitespace().next()?.chars().next()
                        })
                        .is_some_and(running)
                })
            })
            .unwrap_or(false),
    }
}

/// Sends `signal` to the process group `pgid` when `pid` leads it, else to `pid` alone. Never
/// signals pid 0/1, this process or its group.
pub fn signal_group(pid: i32, signal: i32) {
    if pid <= 1 || pid == std::process::id() as i32 {
        return;
    }
    // SAFETY: kill(2) and getpgrp(2) have no memory-safety preconditions.
    unsafe {
        let leads = proc_stat(pid).is_some_and(|(_, g)| g == pid);
        if leads && pid != libc::getpgrp() {
            libc::kill(-pid, signal);
        } else {
            libc::kill(pid, signal);
        }
    }
}

/// Sends `signal` to the process group `pgid` (its leader may be gone already: the rest of the
/// group, e.g. an engine's worker processes, still gets it).
pub fn signal_pgid(pgid: i32, signal: i32) {
    if pgid <= 1 || pgid == std::process::id() as i32 {
        return;
    }
    // SAFETY: as above.
    unsafe {
        if pgid != libc::getpgrp() {
            libc::kill(-pgid, signal);
        }
    }
}

/// Waits up to `timeout` for `pid` to stop running.
pub fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !is_alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends the server an earlier run recorded in `path`, if it still runs with the recorded argv:
/// SIGTERM to its group, `grace` to exit, then SIGKILL. Removes the pidfile. Returns the pid it
/// ended. Blocking: call it from `spawn_blocking`.
pub fn kill_leftover(path: &Path, grace: Duration) -> Option<i32> {
    let record = read(path)?;
    // A process in the middle of its exec shows an empty argv for a moment (a parent killed
    // right after spawning it): give it a second to show the real one.
    let mut argv = proc_cmdline(record.pid);
    for _ in 0..100 {
        if argv.as_deref() != Some(&[String::new()][..]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        argv = proc_cmdline(record.pid);
    }
    let matches = is_alive(record.pid) && argv.as_ref() == Some(&record.argv);
    let ended = if matches {
        tracing::warn!(pid = record.pid, pidfile = %path.display(), "ending a server left by an earlier run");
        signal_group(record.pid, libc::SIGTERM);
        if !wait_gone(record.pid, grace) {
            signal_group(record.pid, libc::SIGKILL);
            wait_gone(record.pid, Duration::from_secs(5));
        }
        Some(record.pid)
    } else {
        None
    };
    remove(path);
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_garbage_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/s.pid");
        let r = PidRecord {
            pid: 42,
            argv: vec!["a b".into(), "--x".into()],
        };
        write(&p, &r).unwrap();
        assert_eq!(read(&p), Some(r));
        std::fs::write(&p, "12").unwrap();
        assert_eq!(read(&p), None);
        remove(&p);
        remove(&p);
    }

    #[test]
    fn own_cmdline_and_state() {
        let me = std::process::id() as i32;
        let argv = proc_cmdline(me).unwrap();
        assert_eq!(argv, std::env::args().collect::<Vec<_>>());
        assert!(is_alive(me));
        assert!(!is_alive(i32::MAX));
    }

    #[test]
    fn a_pid_with_another_cmdline_is_not_killed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.pid");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // spawn() returns as the child execs, a moment (longer on a loaded machine) before the
        // kernel shows its new argv.
        let argv = vec!["sleep".to_owned(), "30".to_owned()];
        let shown = (0..1000).any(|_| {
            let ok = proc_cmdline(pid).as_ref() == Some(&argv);
            if !ok {
                std::thread::sleep(Duration::from_millis(5));
            }
            ok
        });
        assert!(shown, "{:?}", proc_cmdline(pid));
        write(
            &p,
            &PidRecord {
                pid,
                argv: vec!["sleep".into(), "31".into()],
            },
        )
        .unwrap();
        assert_eq!(kill_leftover(&p, Duration::from_millis(100)), None);
        assert!(
            child.try_wait().unwrap().is_none(),
            "an unrelated process was killed"
        );
        assert!(!p.exists());
        write(
            &p,
            &PidRecord {
                pid,
                argv: vec!["sleep".into(), "30".into()],
            },
        )
        .unwrap();
        assert_eq!(kill_leftover(&p, Duration::from_secs(5)), Some(pid));
        assert!(child.wait().unwrap().code().is_none());
    }
}
