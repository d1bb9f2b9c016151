//! Shared helpers for the HOROS benchmarks.
