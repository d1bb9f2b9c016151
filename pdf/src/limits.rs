//! The OS limits a child process that reads untrusted input runs under, set between `fork` and
//! `exec` so that they hold from its first instruction: its address space (`RLIMIT_AS`), its CPU
//! seconds (`RLIMIT_CPU`), no descriptor of its parent's but its standard three, and, where an
//! unprivileged process may have them, a user and network namespace of its own (no interface
//! but a down loopback: no network). Tesseract
//! ([`crate::vision`]) and the PDF workers ([`crate::worker`]) run under them.
//!
//! A leaf module: it imports none of the others.

use std::process::{Command, ExitStatus};

/// The limits of one child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildLimits {
    /// Its address space (`RLIMIT_AS`), bytes; `None`: none.
    pub memory_bytes: Option<u64>,
    /// Its CPU time (`RLIMIT_CPU`), seconds (at least 1); `None`: none.
    pub cpu_seconds: Option<u64>,
    /// Whether it is started in a user and network namespace of its own
    /// (`unshare(CLONE_NEWUSER | CLONE_NEWNET)`). Where the kernel refuses it to an unprivileged
    /// process the child runs with the network of its parent: what held is the child's to
    /// report ([`has_network`]).
    pub no_network: bool,
}

impl ChildLimits {
    /// Sets these limits on `cmd`: they apply to the process it spawns, which also inherits no
    /// descriptor but its standard input, output and error (Linux). Unix only; elsewhere nothing
    /// is set (a wall-clock timeout is then the only limit).
    pub fn apply(&self, cmd: &mut Command) {
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            let limits = *self;
            // SAFETY: the closure runs in the child between fork and exec, and calls only
            // setrlimit and unshare, which are async-signal-safe; it allocates nothing and
            // takes no lock.
            unsafe {
                cmd.pre_exec(move || limits.set_in_child());
            }
        }
        #[cfg(not(unix))]
        {
            let _ = cmd;
        }
    }

    #[cfg(unix)]
    fn set_in_child(&self) -> std::io::Result<()> {
        if let Some(bytes) = self.memory_bytes {
            set_rlimit(libc::RLIMIT_AS, bytes, bytes)?;
        }
        if let Some(seconds) = self.cpu_seconds {
            // The hard limit a second above the soft one: SIGXCPU comes first and says why
            // (at equal limits the kernel's SIGKILL could come first and say nothing).
            let soft = seconds.max(1);
            set_rlimit(libc::RLIMIT_CPU, soft, soft + 1)?;
        }
        // No descriptor of the parent's but the three standard ones passes exec: those the
        // parent opened without close-on-exec (or inherited so) are marked now (Linux 5.11;
        // refused on an older kernel, where the parent's own, opened close-on-exec, still
        // close).
        #[cfg(target_os = "linux")]
        {
            // SAFETY: close_range takes integers only; it marks descriptors, frees nothing.
            let _ = unsafe {
                libc::syscall(
                    libc::SYS_close_range,
                    3 as libc::c_uint,
                    libc::c_uint::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                )
            };
        }
        #[cfg(target_os = "linux")]
        if self.no_network {
            // Refused where unprivileged user namespaces are off: the child keeps the network,
            // and says so when asked ([`has_network`]).
            // SAFETY: unshare takes flags only.
            let _ = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) };
        }
        Ok(())
    }
}

/// Whether this process sees a network interface other than the loopback (Linux:
/// `/proc/self/net/dev`); `None` where it cannot tell. A child started with
/// [`ChildLimits::no_network`] in a namespace of its own sees none.
pub fn has_network() -> Option<bool> {
    let dev = std::fs::read_to_string("/proc/self/net/dev").ok()?;
    Some(
        dev.lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .any(|name| name.trim() != "lo"),
    )
}

/// The type of `setrlimit`'s resource argument (glibc names its own).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
#[cfg(all(unix, not(all(target_os = "linux", target_env = "gnu"))))]
type Resource = libc::c_int;

/// `setrlimit(resource, {soft, hard})`.
#[cfg(unix)]
fn set_rlimit(resource: Resource, soft: u64, hard: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: a valid resource and a pointer to a live rlimit.
    if unsafe { libc::setrlimit(resource, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `status` is the end of a child stopped by its CPU-time limit (SIGXCPU, which
/// [`ChildLimits`] makes come a second before the hard limit's SIGKILL).
pub fn killed_by_cpu_limit(status: &ExitStatus) -> bool {
    signal(status) == Some(SIGXCPU)
}

/// The signal that ended the child, if one did (Unix).
pub fn signal(status: &ExitStatus) -> Option<i32> {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        None
    }
}

/// `SIGXCPU`: the CPU-time limit's signal.
#[cfg(unix)]
pub const SIGXCPU: i32 = libc::SIGXCPU;
/// `SIGXCPU`: the CPU-time limit's signal (no such signal here).
#[cfg(not(unix))]
pub const SIGXCPU: i32 = -1;

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_limited_child_inherits_no_descriptor_but_its_three() {
        use std::os::fd::AsRawFd;
        // A descriptor this process holds without close-on-exec, as a parent may.
        let file = std::fs::File::open("/dev/null").expect("/dev/null");
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this test owns.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        let listed = |limited: bool| {
            let mut cmd = Command::new("ls");
            cmd.arg("/proc/self/fd");
            if limited {
                ChildLimits {
                    memory_bytes: None,
                    cpu_seconds: None,
                    no_network: false,
                }
                .apply(&mut cmd);
            }
            String::from_utf8(cmd.output().expect("ls runs").stdout).unwrap_or_default()
        };
        let fd = fd.to_string();
        assert!(listed(false).lines().any(|l| l == fd), "the leak is real");
        // ls's own: its three and the directory it reads.
        let held: Vec<String> = listed(true).lines().map(str::to_owned).collect();
        assert!(
            held.iter()
                .all(|l| ["0", "1", "2", "3"].contains(&l.as_str())),
            "{held:?}"
        );
        drop(file);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_limited_child_gets_its_rlimits() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -v; ulimit -St; ulimit -Ht"]);
        ChildLimits {
            memory_bytes: Some(256 << 20),
            cpu_seconds: Some(7),
            no_network: false,
        }
        .apply(&mut cmd);
        let out = cmd.output().expect("sh runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "262144\n7\n8\n");
    }
}
