//! Enqueues 20,000 jobs in batches of 100 and, with `drain`, drains them 32 at a time (squeueha, or
//! the raw ceiling with `raw`), for an instruction-level profile:
//! `valgrind --tool=callgrind target/release/enqueue-profile [raw] [drain]`.

use squeueha::{Config, NewJob, Queue};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let args: Vec<String> = std::env::args().collect();
    let drain = args.iter().any(|a| a == "drain");
    if args.iter().any(|a| a == "raw") {
        let mut c = horos_benches::raw_connection(&dir.path().join("raw.db"))?;
        horos_benches::raw_insert(&mut c, 20_000, 100)?;
        if drain {
            horos_benches::raw_claim_delete(&mut c, 32)?;
        }
        return Ok(());
    }
    let cfg = Config {
        checkpoint_interval: Some(std::time::Duration::from_secs(3600)),
        ..Config::default()
    };
    let q = Queue::open_with(dir.path().join("q.db"), cfg)?;
    let jobs: Vec<NewJob> = (0..20_000)
        .map(|_| NewJob::new(vec![7u8; horos_benches::PAYLOAD]))
        .collect();
    for chunk in jobs.chunks(100) {
        q.enqueue_batch("q", chunk)?;
    }
    if drain {
        loop {
            let claimed = q.poll_batch("q", 32, std::time::Duration::from_secs(300))?;
            if claimed.is_empty() {
                break;
            }
            let leases: Vec<_> = claimed.iter().map(|j| j.lease).collect();
            q.ack_batch(&leases)?.all_acked()?;
        }
    }
    Ok(())
}
