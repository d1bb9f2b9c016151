//! The seam between a server's lifecycle and the resources it holds while it runs:
//! [`Reservation`] (GPU memory booked in a ledger, say), taken before the server starts and given
//! back once it has stopped.

use async_trait::async_trait;

use crate::ControlError;

/// Something a server holds while it runs. `take` before the start (a no-op while held),
/// `give_back` after the stop (a no-op when nothing is held).
#[async_trait]
pub trait Reservation: Send + Sync {
    /// Takes the resource, or says why it cannot be had ([`ControlError::StartFailed`]).
    async fn take(&self) -> Result<(), ControlError>;

    /// Gives it back.
    async fn give_back(&self);
}
