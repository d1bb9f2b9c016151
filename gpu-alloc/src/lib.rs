//! GPU monitoring, VRAM lease ledger, model pool and a swap-cost-aware allocator for HOROS.
//!
//! Priorities (the model pool's) are ranks: smaller is more important; see the
//! [workspace's convention](https://github.com/horos-rs/horos-rs/blob/main/docs/architecture.md#priorities).
//!
//! One concept per module:
//! - [`monitor`]: the [`monitor::GpuMonitor`] trait, NVML (`monitor::nvml`, feature `nvml`) and a
//!   simulated fleet ([`monitor::sim_fleet`]), temperature alerts, a 1 s sampler;
//! - [`catalogue`]: modes, their models, VRAM, swap-in costs and throughputs;
//! - [`allocator`]: the allocator tick and the [`allocator::Policy`] trait;
//! - [`thermal`]: pacing between batches;
//! - [`ledger`]: the VRAM lease ledger in SQLite shared by processes;
//! - [`cost_store`]: the measured swap costs kept across restarts (SQLite);
//! - [`host_ram`]: host RAM as a budget shared by everyone whose servers sleep at level 1;
//! - [`pool`]: the model pool; its [`pool::Backend`] trait comes from `horos-server-control`;
//! - [`estimate`]: the VRAM estimation chain ([`gguf`] and [`safetensors`] read a model's own
//!   account of its size);
//! - [`discover`]: models found in a directory, each with its estimate (`horos-ref init`);
//! - [`plan`]: whether a configuration's VRAM plan fits its GPUs (`horos-ref check`);
//! - [`split`]: multi-GPU split;
//! - [`simulator`], [`traces`], [`baselines`]: the deterministic simulator;
//! - [`view`]: the invariants the plan, the ledger and the GPUs' capacity hold together
//!   ([`view::audit`]) and the [`view::Auditor`] that checks them in a running system.

pub mod allocator;
pub mod baselines;
pub mod booking;
pub mod catalogue;
pub mod cost_store;
pub mod discover;
pub mod estimate;
pub mod gguf;
pub mod host_ram;
pub mod lease_api;
pub mod ledger;
pub mod monitor;
pub mod plan;
pub mod pool;
pub mod safetensors;
pub mod simulator;
pub mod split;
pub mod thermal;
pub mod traces;
pub mod view;

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
