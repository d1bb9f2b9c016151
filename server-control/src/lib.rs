//! The seams between the HOROS crates that run inference servers and the crates that use them:
//! traits and their typed errors, nothing else (plus the one [`Backoff`] every owner of a
//! restart loop uses).
//!
//! - [`ServerControl`]: what a batch feeder needs from a lane's server — is it healthy, and
//!   "it went down: bring it back and tell me when it answers".
//! - [`ModeServer`]: what a mode executor needs when a GPU changes hands — stop this server,
//!   start that one.
//! - [`Gate`]: what a mode executor needs from a feeder's lane — no new batch, wait for the
//!   batch in progress, open again.
//! - [`Backend`] and [`BackendFactory`]: what a model pool needs to serve one model on given
//!   GPUs and a port.
//!
//! Every fallible method answers a [`ControlError`], whose variants say what a caller can do
//! about it ([`ControlError::is_retryable`]).
//!
//! `Arc<T>` and `Box<T>` implement each trait their `T` implements, so `Arc<dyn ServerControl>`
//! can be passed where an `impl ServerControl` is expected.

mod backend;
mod backoff;
mod control;
mod error;

pub use backend::{Backend, BackendFactory};
pub use backoff::Backoff;
pub use control::{Gate, ModeServer, ServerControl};
pub use error::{BackendError, ControlError};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
