//! GPU monitoring, VRAM lease ledger, model pool and a swap-cost-aware allocator for HOROS.
//!
//! One concept per module:
//! - [`monitor`]: the [`monitor::GpuMonitor`] trait, NVML (`monitor::nvml`, feature `nvml`) and a simulated
//!   fleet ([`monitor::sim_fleet`]), temperature alerts, a 1 s sampler (A1);
//! - [`catalogue`]: modes, their models, VRAM, swap-in costs and throughputs (A2);
//! - [`allocator`]: the allocator tick and the [`allocator::Policy`] trait (A3);
//! - [`thermal`]: pacing between batches (A4);
//! - [`ledger`]: the VRAM lease ledger in SQLite shared by processes (A5);
//! - [`pool`]: the model pool; its [`pool::Backend`] trait comes from `horos-server-control` (A6);
//! - [`estimate`]: the VRAM estimation chain (A7);
//! - [`split`]: multi-GPU split (A8);
//! - [`simulator`], [`traces`], [`baselines`]: the deterministic simulator (A9).

pub mod allocator;
pub mod baselines;
pub mod catalogue;
pub mod estimate;
pub mod ledger;
pub mod monitor;
pub mod pool;
pub mod simulator;
pub mod split;
pub mod thermal;
pub mod traces;

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
