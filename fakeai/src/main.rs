//! `horos-fakeai`: the fault-injection OpenAI-compatible server as its own process.
//! Run `horos-fakeai --help` for the options.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match horos_fakeai::FakeConfig::from_args(&args) {
        Ok(Some(c)) => c,
        Ok(None) => {
            print!("{}", horos_fakeai::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("horos-fakeai: {e}\n\n{}", horos_fakeai::USAGE);
            return ExitCode::from(2);
        }
    };
    match horos_fakeai::serve_blocking(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("horos-fakeai: {e}");
            ExitCode::FAILURE
        }
    }
}
