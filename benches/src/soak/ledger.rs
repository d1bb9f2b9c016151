//! The bench's own ledger of what it submitted and what came back: the exactly-once check.
//!
//! Every submission the system acknowledged with an id is written here with a nonce the
//! request carries (fakeai echoes the prompt, so the answer carries it back). At the end a job
//! is *lost* when it never reached a final state, *duplicated* when two submissions got the
//! same id, when one nonce came back under two ids, or when an answer carries another job's
//! nonce instead of its own.

use std::collections::HashMap;
use std::sync::Mutex;

/// What was submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An async job (`POST /v1/jobs`).
    Async,
    /// A lane job (`POST /api/v1/lanes/jobs`).
    Lane,
    /// A document (`POST /api/v1/documents`).
    Document,
}

impl Kind {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Async => "async",
            Kind::Lane => "lane",
            Kind::Document => "document",
        }
    }
}

/// How a submission ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered (a document: ingested).
    Done,
    /// Failed for good, with the reason the system gave.
    Dead(String),
}

/// One submission.
#[derive(Debug, Clone)]
pub struct Entry {
    /// What it was.
    pub kind: Kind,
    /// The id the system gave it.
    pub id: i64,
    /// The nonce it carried.
    pub nonce: String,
    /// A label (a document's class: `good`, `bomb`, ...; the batch it came in).
    pub label: String,
    /// Seconds since the soak's start when it was acknowledged.
    pub submitted_s: f64,
    /// Its end, once seen, and when (seconds since the start).
    pub outcome: Option<(Outcome, f64)>,
}

/// What the ledger found at the end.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Acknowledged submissions.
    pub submitted: u64,
    /// Answered.
    pub done: u64,
    /// Failed for good.
    pub dead: u64,
    /// Never final.
    pub lost: u64,
    /// Counted twice (see the module's doc).
    pub duplicated: u64,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    by_id: HashMap<(Kind, i64), usize>,
    duplicated: Vec<String>,
}

/// The ledger, shared by the drivers and the pollers.
#[derive(Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records an acknowledged submission.
    pub fn submitted(&self, kind: Kind, id: i64, nonce: &str, label: &str, at_s: f64) {
        let mut l = self.lock();
        if l.by_id.contains_key(&(kind, id)) {
            let why = format!("{} id {id} given to two submissions", kind.name());
            l.duplicated.push(why);
            return;
        }
        let n = l.entries.len();
        l.by_id.insert((kind, id), n);
        l.entries.push(Entry {
            kind,
            id,
            nonce: nonce.to_owned(),
            label: label.to_owned(),
            submitted_s: at_s,
            outcome: None,
        });
    }

    /// Records the end of `(kind, id)`, with its answer's text when done (checked for its own
    /// nonce). A second end of the same id is ignored (a re-read of a final state).
    pub fn finished(&self, kind: Kind, id: i64, outcome: Outcome, answer: Option<&str>, at_s: f64) {
        let mut l = self.lock();
        let Some(&i) = l.by_id.get(&(kind, id)) else {
            return;
        };
        if l.entries[i].outcome.is_some() {
            return;
        }
        let nonce = l.entries[i].nonce.clone();
        if let Some(text) = answer
            && !text.contains(&nonce)
        {
            let why = format!(
                "{} {id}: its answer lacks its nonce {nonce}: {text:.120}",
                kind.name()
            );
            l.duplicated.push(why);
        }
        l.entries[i].outcome = Some((outcome, at_s));
    }

    /// The submissions not final yet: `(kind, id)`.
    pub fn open(&self) -> Vec<(Kind, i64)> {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.outcome.is_none())
            .map(|e| (e.kind, e.id))
            .collect()
    }

    /// A copy of every entry.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().entries.clone()
    }

    /// The reasons of each duplicate found.
    pub fn duplicates(&self) -> Vec<String> {
        self.lock().duplicated.clone()
    }

    /// The tally of `kind` (all kinds when `None`) among entries acknowledged before `until_s`,
    /// their ends counted up to `until_s`; `lost` counts those still open (meaningful at the
    /// end).
    pub fn tally(&self, kind: Option<Kind>, until_s: f64) -> Tally {
        let l = self.lock();
        let mut t = Tally::default();
        for e in l
            .entries
            .iter()
            .filter(|e| kind.is_none_or(|k| e.kind == k))
        {
            if e.submitted_s > until_s {
                continue;
            }
            t.submitted += 1;
            match &e.outcome {
                Some((Outcome::Done, at)) if *at <= until_s => t.done += 1,
                Some((Outcome::Dead(_), at)) if *at <= until_s => t.dead += 1,
                _ => t.lost += 1,
            }
        }
        t.duplicated = if kind.is_none() {
            l.duplicated.len() as u64
        } else {
            0
        };
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crossed_answer_and_a_reused_id_are_duplicates() {
        let l = Ledger::default();
        l.submitted(Kind::Lane, 1, "n1", "", 0.0);
        l.submitted(Kind::Lane, 2, "n2", "", 0.0);
        l.submitted(Kind::Lane, 2, "n3", "", 0.0);
        l.finished(Kind::Lane, 1, Outcome::Done, Some("echo n1"), 1.0);
        l.finished(Kind::Lane, 2, Outcome::Done, Some("echo n1"), 1.0);
        let t = l.tally(None, 10.0);
        assert_eq!((t.submitted, t.done, t.lost), (2, 2, 0));
        assert_eq!(t.duplicated, 2, "{:?}", l.duplicates());
    }
}
