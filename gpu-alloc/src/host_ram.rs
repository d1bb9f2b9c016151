//! Host RAM as a budget, like VRAM in the ledger: what servers asleep at level 1 hold there
//! (their weights), shared by everyone on the machine who puts servers to sleep (the mode
//! executor's lanes and the model pool), so that together they never hold more than
//! `[gpus] host_memory_mb`.
//!
//! Each holder is an owner (`lanes`, `pool`) with one figure: it decides within
//! [`HostRam::room_for`] and sets what it holds with [`HostRam::set_held`]; it evicts only its
//! own sleepers to make room, never another holder's.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// The host RAM budget for level-1 sleepers, and what each owner holds of it. Share it in an
/// `Arc`.
#[derive(Debug, Default)]
pub struct HostRam {
    budget_mb: u64,
    held: Mutex<BTreeMap<String, u64>>,
}

impl HostRam {
    /// A budget of `budget_mb`, nothing held.
    pub fn new(budget_mb: u64) -> Self {
        Self {
            budget_mb,
            held: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, u64>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The budget, MB.
    pub fn budget_mb(&self) -> u64 {
        self.budget_mb
    }

    /// MB held by everyone.
    pub fn used_mb(&self) -> u64 {
        self.lock().values().sum()
    }

    /// MB `owner` holds.
    pub fn held_by(&self, owner: &str) -> u64 {
        self.lock().get(owner).copied().unwrap_or(0)
    }

    /// MB `owner` may hold in all: the budget less what the others hold.
    pub fn room_for(&self, owner: &str) -> u64 {
        let others: u64 = self
            .lock()
            .iter()
            .filter(|(k, _)| k.as_str() != owner)
            .map(|(_, v)| *v)
            .sum();
        self.budget_mb.saturating_sub(others)
    }

    /// Sets what `owner` holds (0 forgets it), decided within [`HostRam::room_for`].
    pub fn set_held(&self, owner: &str, mb: u64) {
        let mut held = self.lock();
        if mb == 0 {
            held.remove(owner);
        } else {
            held.insert(owner.to_owned(), mb);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_share_one_budget() {
        let ram = HostRam::new(10_000);
        ram.set_held("pool", 6_000);
        assert_eq!(ram.room_for("lanes"), 4_000);
        assert_eq!(ram.room_for("pool"), 10_000);
        ram.set_held("lanes", 4_000);
        assert_eq!(ram.used_mb(), 10_000);
        assert_eq!(
            ram.room_for("pool"),
            6_000,
            "the lanes' share is not the pool's"
        );
        ram.set_held("pool", 0);
        assert_eq!(ram.held_by("pool"), 0);
        assert_eq!(ram.used_mb(), 4_000);
    }
}
