//! The requestor registry: who calls, how often, when last, how often refused, and who is in a
//! cooldown — on `/metrics` and in `/api/v1/status` (`requestors`). Callers are counted one by
//! one up to a bound; beyond it the least recently seen is folded into `_other`, so a stream of
//! new client ids cannot grow the registry without end, and `/metrics` names only the busiest.

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

/// Callers named in `/metrics`' per-caller series (the busiest); the rest are summed under
/// [`OTHER_MODEL`], so the label set is bounded whatever the traffic.
pub const METRICS_TOP_CALLERS: usize = 50;

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
        if !m.contains_key(caller) && m.len() >= MAX_CALLERS {
            // Full: the least recently seen caller's counts go to `_other`, so the table stays
            // bounded whatever the traffic and a new caller is still counted by name.
            let oldest = m
                .iter()
                .filter(|(c, _)| c.as_str() != OTHER_MODEL)
                .min_by_key(|(_, r)| r.last_seen_ms)
                .map(|(c, _)| c.clone());
            if let Some(gone) = oldest.and_then(|c| m.remove(&c)) {
                let other = m.entry(OTHER_MODEL.to_owned()).or_default();
                other.requests += gone.requests;
                other.refused += gone.refused;
                other.last_seen_ms = other.last_seen_ms.max(gone.last_seen_ms);
            }
        }
        f(m.entry(caller.to_owned()).or_default());
    }

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
        // The label set stays bounded: the busiest callers by name, the others summed.
        let mut busiest: Vec<(&String, &Requestor)> = all.iter().collect();
        busiest.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then(a.0.cmp(b.0)));
        let (mut other, mut named) = (0, 0);
        for (c, r) in &busiest {
            if named >= METRICS_TOP_CALLERS || c.as_str() == OTHER_MODEL {
                other += r.requests;
                continue;
            }
            named += 1;
            let _ = writeln!(
                o,
                "horos_coordinator_caller_requests_total{{caller=\"{}\"}} {}",
                esc(c),
                r.requests
            );
        }
        if other > 0 {
            let _ = writeln!(
                o,
                "horos_coordinator_caller_requests_total{{caller=\"{OTHER_MODEL}\"}} {other}"
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
            b.seen(&format!("client:{i}"), 100 + i as u64);
        }
        let all = b.all();
        assert!(all.len() <= MAX_CALLERS + 1);
        // The least recently seen were evicted into `_other`, the newest kept by name.
        assert!(all.contains_key(&format!("client:{}", MAX_CALLERS + 4)));
        assert!(!all.contains_key("client:a") && !all.contains_key("client:0"));
        assert_eq!(
            all.values().map(|r| r.requests).sum::<u64>(),
            2 + MAX_CALLERS as u64 + 5
        );
        let mut o = String::new();
        b.render(&mut o, 0);
        let series = o
            .lines()
            .filter(|l| l.starts_with("horos_coordinator_caller_requests_total{"))
            .count();
        assert_eq!(series, METRICS_TOP_CALLERS + 1, "{o}");
    }
}
