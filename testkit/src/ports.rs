//! Loopback ports for the servers a test starts.

use std::net::TcpListener;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the well-known and most registered ones.
const LOWEST: u32 = 10_000;

/// A loopback port free right now, for a server started later ([`free_ports`] with `n = 1`).
///
/// Also a port where nothing listens (a "dead" URL): no other caller in this process gets it.
///
/// # Panics
///
/// When no port below the ephemeral range is free.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `n` consecutive loopback ports free right now (a server per GPU, say), for
/// servers started later.
///
/// Binding port 0 and dropping the listener is racy: the kernel hands that port out again to the
/// next outgoing connection (curl, a health probe, another test's client) before the server binds
/// it. These ports lie below the kernel's ephemeral range instead
/// (`/proc/sys/net/ipv4/ip_local_port_range`, 32768 where it cannot be read), so no outgoing
/// connection takes one meanwhile, and this process hands each out once, so tests running side by
/// side never share one. Each process starts at another point of the range, so that test binaries
/// run one after the other do not retry the ports of servers the last one may still be closing.
///
/// # Panics
///
/// When no `n` consecutive ports below the ephemeral range are free.
pub fn free_ports(n: u16) -> u16 {
    static TOP: OnceLock<u32> = OnceLock::new();
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let top = *TOP.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768)
            .max(LOWEST + 1_000)
    });
    let span = top - LOWEST;
    let next = NEXT.get_or_init(|| AtomicU32::new(std::process::id().wrapping_mul(7_919) % span));
    for _ in 0..span {
        let offset = next.fetch_add(u32::from(n), Ordering::SeqCst) % span;
        let Some(base) = u16::try_from(LOWEST + offset)
            .ok()
            .filter(|b| u32::from(*b) + u32::from(n) <= top)
        else {
            continue;
        };
        let held: Vec<_> = (0..n)
            .map_while(|k| TcpListener::bind(("127.0.0.1", base + k)).ok())
            .collect();
        if held.len() == usize::from(n) {
            return base;
        }
    }
    panic!("no {n} free consecutive loopback ports below {top}");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let a = free_port();
        let b = free_ports(3);
        let c = free_port();
        let taken = [a, b, b + 1, b + 2, c];
        let mut sorted = taken.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), taken.len(), "{taken:?}");
        for p in taken {
            assert!(u32::from(p) >= LOWEST, "{p}");
        }
    }

    /// A port something listens on is never handed out. (Binding a returned port again later
    /// is no test: another process on the machine may take it meanwhile, which is why callers
    /// start their server at once.)
    #[test]
    fn a_port_in_use_is_skipped() {
        let held: Vec<TcpListener> = (0..20)
            .map(|_| free_port())
            .filter_map(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        assert!(!held.is_empty());
        let ports: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        for _ in 0..200 {
            let p = free_port();
            assert!(!ports.contains(&p), "{p} is held by this test");
        }
    }
}
