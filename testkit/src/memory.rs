//! The process's resident memory as Linux reports it in `/proc/self/status`: a test bounds what
//! one step cost by [`reset_peak_rss`], the step, then [`peak_rss_bytes`] against the
//! [`rss_bytes`] before it. Peak memory, not time: it does not depend on the machine's speed.
//! Elsewhere than on Linux each reads `None` (and the reset `false`): the test then skips its
//! bound. The same readings of another process (a binary under test): [`Process`].

/// The process's resident memory now (`VmRSS`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    Process::SELF.rss_bytes()
}

/// The process's peak resident memory since it started or since the last [`reset_peak_rss`]
/// (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    Process::SELF.peak_rss_bytes()
}

/// Sets the peak ([`peak_rss_bytes`]) back to the memory resident now (writes `5` to
/// `/proc/self/clear_refs`); false where the kernel refuses it.
pub fn reset_peak_rss() -> bool {
    Process::SELF.reset_peak_rss()
}

/// A process whose memory `/proc` reports: this one ([`Process::SELF`]) or another by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process(Option<u32>);

impl Process {
    /// This process.
    pub const SELF: Process = Process(None);

    /// The process `pid` (a child the test started, say).
    pub fn of(pid: u32) -> Process {
        Process(Some(pid))
    }

    /// Its resident memory now (`VmRSS`), in bytes.
    pub fn rss_bytes(self) -> Option<u64> {
        self.status_kib("VmRSS:").map(|kib| kib * 1024)
    }

    /// Its anonymous resident memory now (`RssAnon`: the heap and stacks, not the binary's
    /// pages), in bytes.
    pub fn anon_bytes(self) -> Option<u64> {
        self.status_kib("RssAnon:").map(|kib| kib * 1024)
    }

    /// Its peak resident memory since it started or since the last reset (`VmHWM`), in bytes.
    pub fn peak_rss_bytes(self) -> Option<u64> {
        self.status_kib("VmHWM:").map(|kib| kib * 1024)
    }

    /// Sets its peak back to the memory resident now (writes `5` to its `clear_refs`); false
    /// where the kernel refuses it.
    pub fn reset_peak_rss(self) -> bool {
        std::fs::write(self.file("clear_refs"), "5").is_ok()
    }

    fn file(self, name: &str) -> String {
        match self.0 {
            Some(pid) => format!("/proc/{pid}/{name}"),
            None => format!("/proc/self/{name}"),
        }
    }

    fn status_kib(self, field: &str) -> Option<u64> {
        status_kib(&self.file("status"), field)
    }
}

fn status_kib(file: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(file).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_at_least_what_is_resident_and_follows_a_reset() {
        let (Some(now), Some(peak)) = (rss_bytes(), peak_rss_bytes()) else {
            return;
        };
        assert!(now > 0 && peak >= now, "{now} {peak}");
        let held = vec![1u8; 64 << 20];
        let after = peak_rss_bytes().unwrap_or_default();
        assert!(after >= now + (60 << 20), "{now} -> {after}");
        drop(held);
        if reset_peak_rss() {
            let reset = peak_rss_bytes().unwrap_or(u64::MAX);
            assert!(reset < after, "{after} -> {reset}");
        }
        // This process read by its id reads the same.
        let me = Process::of(std::process::id());
        assert!(me.rss_bytes().is_some_and(|b| b > 0));
        assert!(me.peak_rss_bytes() >= me.rss_bytes());
    }
}
