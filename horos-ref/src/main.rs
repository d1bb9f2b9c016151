//! `horos-ref`: the HOROS reference binary. One TOML configuration file; one subcommand per file
//! under `commands/` (`run` serves until SIGINT/SIGTERM, finishing the batch in progress);
//! `--json` for machine-readable output. `main` → [`try_main`] → [`commands::dispatch`]: errors are
//! printed once, here.

mod admin;
mod alloc;
mod cli;
mod commands;
mod config;
mod demo;
mod error;
mod ingest;
mod lanes;
mod modes;
mod pool;
mod reload;
mod runlog;
mod servers;
mod system;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::error::AppError;

fn main() -> ExitCode {
    alloc::fix_mmap_threshold();
    let cli = Cli::parse();
    // A worker serves its pipes before anything else starts: no logs on its output, no
    // runtime's threads in its address space.
    if let cli::Command::Worker { kind } = cli.command {
        return commands::worker::worker(kind);
    }
    let json = cli.json;
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if json => {
            // Scripts read the error as they read the output: one JSON object.
            eprintln!("{}", serde_json::json!({"error": e.to_string()}));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("horos-ref: {e}");
            ExitCode::FAILURE
        }
    }
}

fn try_main(cli: Cli) -> Result<(), AppError> {
    init_logs(cli.log_json);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| AppError::Usage(format!("cannot start the runtime: {e}")))?;
    rt.block_on(commands::dispatch(cli))
}

fn init_logs(json: bool) {
    let level = std::env::var("HOROS_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let builder = tracing_subscriber::fmt()
        .with_writer(|| runlog::Tee)
        .with_max_level(level);
    // A second initialisation (tests calling main twice) is harmless: keep the first.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.with_ansi(false).try_init()
    };
}
