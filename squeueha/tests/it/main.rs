//! squeueha's integration tests, in one binary: one link instead of 5
//! (each module was a test binary of its own). The tests that run their own binary again as
//! a child process stay binaries of their own.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod batches;
mod clock;
mod group_commit;
mod operations;
mod sqlite;
mod transactions;
