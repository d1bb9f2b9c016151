//! `horos-ref demo`: the whole system on a CPU-only machine with an embedded default
//! configuration (placeholder: the demo is being written).

use std::path::PathBuf;

/// Options of `horos-ref demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the demo keeps its database, page images and server logs.
    #[arg(long, default_value = "horos-demo")]
    pub dir: PathBuf,
    /// Exit after the demo's search and chat instead of serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
}

/// Runs the demo.
pub async fn run(args: DemoArgs, json: bool) -> Result<(), String> {
    let _ = (args, json);
    Err("the demo is not written yet".into())
}
