//! The process's resident memory as Linux reports it in `/proc/self/status`: a test bounds what
//! one step cost by [`reset_peak_rss`], the step, then [`peak_rss_bytes`] against the
//! [`rss_bytes`] before it. Peak memory, not time: it does not depend on the machine's speed.
//! Elsewhere than on Linux each reads `None` (and the reset `false`): the test then skips its
//! bound.

/// The process's resident memory now (`VmRSS`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|kib| kib * 1024)
}

/// The process's peak resident memory since it started or since the last [`reset_peak_rss`]
/// (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// Sets the peak ([`peak_rss_bytes`]) back to the memory resident now (writes `5` to
/// `/proc/self/clear_refs`); false where the kernel refuses it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
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
    }
}
