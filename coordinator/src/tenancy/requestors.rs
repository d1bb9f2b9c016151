//! The requestor registry: who calls, how often, when last, how often refused, and who is in a
//! cooldown — on `/metrics` and in `/api/v1/status` (`requestors`). Callers are counted one by
//! one up to a bound; beyond it they share `_other`, so a stream of new client ids cannot grow
//! the registry without end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

use crate::prom::esc;

/// The label of models unknown at start-up (on `/metrics`), and the one shared by the callers
/// beyond those counted one by one.
pub const OTHER_MODEL: &str = "_other";

/// Callers counted one by one.
const MAX_CALLERS: usize = 1000;

/// What is known of one caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Requestor {
    /// Requests received (admitted or not).
    pub requests: u64,
    /// Requests refused by its limits (429).
    pub refused: u64,
    /// When it last called, ms since the Unix epoch.
    pub last_seen_ms: u64,
    /// In a cooldown until then, ms since the Unix epoch (0: none so far).
    pub cooldown_until_ms: u64,
}

/// Every caller's [`Requestor`].
#[derive(Debug, Default)]
pub struct RequestorBook {
    map: Mutex<BTreeMap<String, Requestor>>,
}

impl RequestorBook {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Requestor>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with(&self, caller: &str, f: impl FnOnce(&mut Requestor)) {
        let mut m = self.lock();
        let key = if m.contains_key(caller) || m.len() < MAX_CALLERS {
            caller
        } else {
            OTHER_MODEL
        };
        f(m.entry(key.to_owned()).or_default());
    }

    /// A request of `caller` arrived at `now_ms`.
    pub fn seen(&self, caller: &str, now_ms: u64) {
        self.with(caller, |r| {
            r.requests += 1;
            r.last_seen_ms = now_ms;
        });
    }

    /// A request of `caller` was refused; `cooldown_until_ms`: it is cooling down until then.
    pub fn refused(&self, caller: &str, cooldown_until_ms: Option<u64>) {
        self.with(caller, |r| {
            r.refused += 1;
            if let Some(t) = cooldown_until_ms {
                r.cooldown_until_ms = r.cooldown_until_ms.max(t);
            }
        });
    }

    /// Every caller, by label.
    pub fn all(&self) -> BTreeMap<String, Requestor> {
        self.lock().clone()
    }

    /// The Prometheus series; `now_ms` decides who is cooling down.
    pub fn render(&self, o: &mut String, now_ms: u64) {
        let all = self.all();
        o.push_str(
            "# HELP horos_coordinator_caller_requests_total Requests received per caller \
             (key:NAME, client:ID, anonymous).\n# TYPE horos_coordinator_caller_requests_total counter\n",
        );
        for (c, r) in &all {
            let _ = writeln!(
                o,
                "horos_coordinator_caller_requests_total{{caller=\"{}\"}} {}",
                esc(c),
                r.requests
            );
        }
        o.push_str(
            "# HELP horos_coordinator_caller_cooldown_seconds Seconds left of a caller's cooldown \
             (callers cooling down only).\n# TYPE horos_coordinator_caller_cooldown_seconds gauge\n",
        );
        for (c, r) in all.iter().filter(|(_, r)| r.cooldown_until_ms > now_ms) {
            let _ = writeln!(
                o,
                "horos_coordinator_caller_cooldown_seconds{{caller=\"{}\"}} {:.3}",
                esc(c),
                (r.cooldown_until_ms - now_ms) as f64 / 1000.0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn counts_and_cooldowns() {
        let b = RequestorBook::default();
        b.seen("client:a", 10);
        b.seen("client:a", 20);
        b.refused("client:a", Some(5_000));
        let r = b.all()["client:a"];
        assert_eq!((r.requests, r.refused, r.last_seen_ms), (2, 1, 20));
        let mut o = String::new();
        b.render(&mut o, 1_000);
        assert!(
            o.contains("horos_coordinator_caller_requests_total{caller=\"client:a\"} 2"),
            "{o}"
        );
        assert!(
            o.contains("horos_coordinator_caller_cooldown_seconds{caller=\"client:a\"} 4.000"),
            "{o}"
        );
        let mut o = String::new();
        b.render(&mut o, 6_000);
        assert!(!o.contains("cooldown_seconds{"), "{o}");
        for i in 0..MAX_CALLERS + 5 {
            b.seen(&format!("client:{i}"), 1);
        }
        assert!(b.all().len() <= MAX_CALLERS + 1);
    }
}
