//! Enqueues 20,000 jobs in batches of 100 and, with `drain`, drains them 32 at a time (squeueha, or
//! the raw ceiling with `raw`), for an instruction-level profile:
//! `valgrind --tool=callgrind target/release/enqueue-profile [raw] [drain]`.
#![allow(clippy::unwrap_used)]

use squeueha::{Config, NewJob, Queue};

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = std::env::args().collect();
    let drain = args.iter().any(|a| a == "drain");
    if args.iter().any(|a| a == "raw") {
        let mut c = horos_benches::raw_connection(&dir.path().join("raw.db")).unwrap();
        horos_benches::raw_insert(&mut c, 20_000, 100).unwrap();
        if drain {
            horos_benches::raw_claim_delete(&mut c, 32).unwrap();
        }
        return;
    }
    let cfg = Config {
        checkpoint_interval: Some(std::time::Duration::from_secs(3600)),
        ..Config::default()
    };
    let q = Queue::open_with(dir.path().join("q.db"), cfg).unwrap();
    let jobs: Vec<NewJob> = (0..20_000)
        .map(|_| NewJob::new(vec![7u8; horos_benches::PAYLOAD]))
        .collect();
    for chunk in jobs.chunks(100) {
        q.enqueue_batch("q", chunk).unwrap();
    }
    if drain {
        loop {
            let claimed = q
                .poll_batch("q", 32, std::time::Duration::from_secs(300))
                .unwrap();
            if claimed.is_empty() {
                break;
            }
            let leases: Vec<_> = claimed.iter().map(|j| j.lease).collect();
            q.ack_batch(&leases).unwrap();
        }
    }
}
