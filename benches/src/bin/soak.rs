//! Bench binary: the soak and chaos bench of issue 48 (see `docs/soak.md`).
//!
//! `cargo run --release -p horos-benches --bin soak -- --minutes 60 [--out DIR] [--skip DRIVER|CLASS,...]`
//! `[--keep-documents]`
//!
//! Starts `horos-ref run` (the sibling binary of the same profile: build `-p horos-ref` and
//! `-p horos-fakeai` first) on a configuration it writes, drives it for `--minutes` with
//! mixed, hostile load and injected faults, prints a row a minute and writes
//! `soak-minutes.csv`, `soak-minutes.jsonl` and `soak-summary.json` in `--out` (default
//! `target/soak`). Exits 1 when a target is missed, 2 on a usage or start-up error.

use std::path::PathBuf;
use std::process::ExitCode;

use horos_benches::soak::{self, Args};

fn main() -> ExitCode {
    let mut args = Args {
        minutes: 60.0,
        out: PathBuf::from("target/soak"),
        skip: Vec::new(),
        keep_documents: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--keep-documents" {
            args.keep_documents = true;
            continue;
        }
        match (a.as_str(), it.next()) {
            ("--minutes", Some(m)) if m.parse::<f64>().is_ok_and(|m| m > 0.0) => {
                args.minutes = m.parse().unwrap_or(60.0);
            }
            ("--out", Some(dir)) => args.out = PathBuf::from(dir),
            ("--skip", Some(names))
                if names.split(',').all(|n| {
                    soak::DRIVERS.contains(&n) || soak::corpus::Class::from_name(n).is_some()
                }) =>
            {
                args.skip = names.split(',').map(str::to_owned).collect();
            }
            _ => {
                eprintln!(
                    "usage: soak [--minutes N] [--out DIR] [--skip DRIVER|CLASS,...] [--keep-documents] \
                     (drivers: {}; document classes: good, scan, malformed, encrypted, bomb)",
                    soak::DRIVERS.join(", ")
                );
                return ExitCode::from(2);
            }
        }
    }
    match soak::run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}
