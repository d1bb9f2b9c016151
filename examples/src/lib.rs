//! Runnable examples of the HOROS crates (see `src/bin`).
