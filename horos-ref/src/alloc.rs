//! glibc's allocator, held to a fixed mmap threshold.
//!
//! By default glibc raises its mmap threshold to the size of the largest mmapped block freed
//! (up to 32 MiB) and its trim threshold to twice that. Once `run` freed one PDF read whole
//! (a 13 MB bomb), later buffers of that size come from the arena of the thread that asked
//! (a blocking-pool thread) and, freed, stay there as the arena's top chunk: a non-main
//! arena's top is given back only above the raised trim threshold, and `malloc_trim` never
//! trims it. Each of the up to 8 arenas a core kept ~13 MB a bomb (the soak's growth, 12.9 ->
//! 46 MB for 4 bombs). A fixed threshold turns the dynamic one off: blocks from 1 MiB are
//! mapped on their own and unmapped when freed.

/// The size from which a block is mapped on its own (and unmapped when freed).
pub const MMAP_THRESHOLD: usize = 1 << 20;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] for this process; nothing elsewhere.
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters; called before the threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horos_testkit::memory::Process;

    /// A 20 MB block freed, then a 13 MB one filled and freed on another thread: with the
    /// threshold fixed, the 13 MB are given back (before, they stayed in that thread's arena).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_large_buffer_freed_on_a_thread_is_given_back() {
        fix_mmap_threshold();
        let big = vec![1u8; 20 << 20];
        drop(std::hint::black_box(big));
        let Some(before) = Process::SELF.anon_bytes() else {
            eprintln!("SKIP: no RssAnon in /proc/self/status");
            return;
        };
        let freed = std::thread::spawn(|| {
            let doc = vec![7u8; 13 << 20];
            drop(std::hint::black_box(doc));
        })
        .join();
        assert!(freed.is_ok());
        let after = Process::SELF.anon_bytes().unwrap_or(u64::MAX);
        let grown = after.saturating_sub(before) / 1024;
        assert!(grown < 8 << 10, "RssAnon grew {grown} kB");
    }
}
