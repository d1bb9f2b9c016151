//! horos-gpu-alloc's integration tests, in one binary: one link instead of 6
//! (each module was a test binary of its own). The tests that run their own binary again as
//! a child process stay binaries of their own.

mod allocator;
mod estimate;
mod gpu_view;
mod ledger;
mod monitor;
mod pool;
mod pool_sleep;
mod simulator;
mod sleep;
