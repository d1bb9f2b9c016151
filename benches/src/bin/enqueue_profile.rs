//! Enqueues 20,000 jobs in batches of 100 (squeueha, or the raw ceiling with `raw`) for an
//! instruction-level profile: `valgrind --tool=callgrind target/release/enqueue-profile [raw]`.
#![allow(clippy::unwrap_used)]

use squeueha::{Config, NewJob, Queue};

fn main() {
    let dir = tempfile::tempdir().unwrap();
    if std::env::args().any(|a| a == "raw") {
        let mut c = horos_benches::raw_connection(&dir.path().join("raw.db")).unwrap();
        horos_benches::raw_insert(&mut c, 20_000, 100).unwrap();
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
}
