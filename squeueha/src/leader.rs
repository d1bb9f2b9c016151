//! Leader election on the same database: one row per election, N candidates, a lease renewed by the
//! leader, and a fencing token that grows every time leadership changes hands.

use crate::job::Millis;

/// Proof of leadership. Pass `fencing_token` along with every side effect the leader performs, and
/// have the receiver refuse tokens smaller than the largest it has seen: a deposed leader that still
/// believes it leads (a long GC pause, a frozen VM) is then harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The election's name.
    pub name: String,
    /// Who holds it.
    pub holder: String,
    /// Increases by at least one each time a different holder takes over.
    pub fencing_token: i64,
    /// When the leadership lapses unless renewed.
    pub expires_at: Millis,
}
