//! `horos-ref worker pdf`: the PDF worker that `run`'s ingest pipeline starts (its pool's
//! command), serving horos-pdf's worker protocol on its standard input and output. It starts no
//! runtime and writes no log to its output; what it prints on its error output is what the pool
//! reads to tell why it died.

use std::process::ExitCode;

use crate::cli::WorkerKind;

/// Serves the worker `kind` until its input closes (success) or the pipeline speaks out of
/// protocol (failure, with the reason on the error output).
pub fn worker(kind: WorkerKind) -> ExitCode {
    match kind {
        WorkerKind::Pdf => {
            match ingest_pipeline::worker::serve(std::io::stdin().lock(), std::io::stdout().lock())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("horos-ref worker pdf: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
