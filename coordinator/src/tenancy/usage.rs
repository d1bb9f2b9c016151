//! Usage: requests and tokens (prompt, completion) per caller and model, read from the
//! upstreams' own `usage` objects as answers pass through (the last bytes of each answer are
//! kept, never the whole), counted in memory and added to the state file's `coord_usage` table
//! by day.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;

use crate::prom::esc;
use crate::tenancy::limits::Caller;

/// Callers counted one by one; beyond, usage is counted under `_other` (a label per client id
/// sent by anyone would grow `/metrics` without bound).
const MAX_CALLERS: usize = 1000;

/// Bytes of an answer's end kept to find its `usage`.
pub(crate) const TAIL_BYTES: usize = 4096;

/// Requests and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests answered 2xx.
    pub requests: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
    }
}

#[derive(Default)]
struct Book {
    total: BTreeMap<(String, String), Counts>,
    unsaved: BTreeMap<(String, String), Counts>,
    callers: std::collections::BTreeSet<String>,
}

/// Usage since start (for `/metrics` and the status page), and what is not saved yet.
#[derive(Default)]
pub struct UsageBook {
    book: Mutex<Book>,
}

impl std::fmt::Debug for UsageBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageBook").finish_non_exhaustive()
    }
}

/// `(prompt, completion)` tokens of the last `usage` object in `tail` (a JSON answer's end, or a
/// stream's last events).
pub(crate) fn parse_usage(tail: &[u8]) -> Option<(u64, u64)> {
    const KEY: &[u8] = b"\"usage\"";
    let at = tail.windows(KEY.len()).rposition(|w| w == KEY)?;
    let rest = tail.get(at + KEY.len()..)?;
    let start = rest.iter().position(|b| *b == b'{')?;
    // Only whitespace and the colon may sit between the key and its object.
    if !rest[..start]
        .iter()
        .all(|b| b.is_ascii_whitespace() || *b == b':')
    {
        return None;
    }
    let mut it = serde_json::Deserializer::from_slice(&rest[start..]).into_iter::<Value>();
    let v = it.next()?.ok()?;
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    match (n("prompt_tokens"), n("completion_tokens")) {
        (None, None) => None,
        (p, c) => Some((p.unwrap_or(0), c.unwrap_or(0))),
    }
}

/// The last [`TAIL_BYTES`] of an answer.
#[derive(Debug, Default)]
pub(crate) struct Tail(Vec<u8>);

impl Tail {
    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= TAIL_BYTES {
            self.0.clear();
            self.0.extend_from_slice(&data[data.len() - TAIL_BYTES..]);
            return;
        }
        let excess = (self.0.len() + data.len()).saturating_sub(TAIL_BYTES);
        if excess > 0 {
            self.0.drain(..excess);
        }
        self.0.extend_from_slice(data);
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl UsageBook {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one answered request of `caller` on `model`.
    pub fn record(&self, caller: &Caller, model: &str, prompt: u64, completion: u64) {
        let mut b = self.lock();
        let mut label = caller.label();
        if !b.callers.contains(&label) {
            if b.callers.len() >= MAX_CALLERS {
                label = "_other".to_owned();
            } else {
                b.callers.insert(label.clone());
            }
        }
        let c = Counts {
            requests: 1,
            prompt_tokens: prompt,
            completion_tokens: completion,
        };
        let key = (label, model.to_owned());
        b.total.entry(key.clone()).or_default().add(c);
        b.unsaved.entry(key).or_default().add(c);
    }

    /// Usage since start: `((caller, model), counts)`.
    pub fn totals(&self) -> Vec<((String, String), Counts)> {
        self.lock()
            .total
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Takes what is not saved yet (given back with [`unsave`](Self::unsave) if saving fails).
    pub(crate) fn take_unsaved(&self) -> BTreeMap<(String, String), Counts> {
        std::mem::take(&mut self.lock().unsaved)
    }

    /// Puts back counts whose saving failed.
    pub(crate) fn unsave(&self, back: BTreeMap<(String, String), Counts>) {
        let mut b = self.lock();
        for (k, c) in back {
            b.unsaved.entry(k).or_default().add(c);
        }
    }

    /// The Prometheus series.
    pub(crate) fn render(&self, o: &mut String) {
        let totals = self.totals();
        o.push_str("# HELP horos_coordinator_usage_requests_total Requests answered, by caller and model.\n# TYPE horos_coordinator_usage_requests_total counter\n");
        for ((caller, model), c) in &totals {
            let _ = writeln!(
                o,
                "horos_coordinator_usage_requests_total{{caller=\"{}\",model=\"{}\"}} {}",
                esc(caller),
                esc(model),
                c.requests
            );
        }
        o.push_str("# HELP horos_coordinator_usage_tokens_total Tokens the upstreams reported, by caller, model and kind (prompt, completion).\n# TYPE horos_coordinator_usage_tokens_total counter\n");
        for ((caller, model), c) in &totals {
            for (kind, n) in [
                ("prompt", c.prompt_tokens),
                ("completion", c.completion_tokens),
            ] {
                let _ = writeln!(
                    o,
                    "horos_coordinator_usage_tokens_total{{caller=\"{}\",model=\"{}\",kind=\"{kind}\"}} {n}",
                    esc(caller),
                    esc(model)
                );
            }
        }
    }
}

/// Adds `counts` to the day's rows of `coord_usage`, in the caller's transaction.
pub(crate) fn save(
    tx: &mut squeueha::QueueTx<'_>,
    day: i64,
    counts: &BTreeMap<(String, String), Counts>,
) -> squeueha::Result<()> {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for ((caller, model), c) in counts {
        tx.execute(
            "INSERT INTO coord_usage (day, caller, model, requests, prompt_tokens, completion_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (day, caller, model) DO UPDATE SET
               requests = coord_usage.requests + excluded.requests,
               prompt_tokens = coord_usage.prompt_tokens + excluded.prompt_tokens,
               completion_tokens = coord_usage.completion_tokens + excluded.completion_tokens",
            squeueha::params![
                day,
                caller,
                model,
                n(c.requests),
                n(c.prompt_tokens),
                n(c.completion_tokens)
            ],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_found_at_the_end_of_a_body_or_a_stream() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"a \"usage\": 1"}}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#;
        assert_eq!(parse_usage(body), Some((12, 5)));
        let stream = b"data: {\"choices\":[]}\n\ndata: {\"choices\":[],\"usage\": {\"prompt_tokens\":3,\"completion_tokens\":9}}\n\ndata: [DONE]\n\n";
        assert_eq!(parse_usage(stream), Some((3, 9)));
        assert_eq!(parse_usage(b"{\"data\":[1,2]}"), None);
        assert_eq!(parse_usage(b"\"usage\": {\"prompt_to"), None);
        assert_eq!(
            parse_usage(b"\"usage\":{\"prompt_tokens\":4}"),
            Some((4, 0))
        );
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_only() {
        let mut t = Tail::default();
        t.push(&[b'a'; 3000]);
        t.push(&[b'b'; 3000]);
        assert_eq!(t.bytes().len(), TAIL_BYTES);
        assert_eq!(t.bytes()[TAIL_BYTES - 1], b'b');
        assert_eq!(t.bytes()[0], b'a');
        t.push(&[b'c'; 5000]);
        assert!(t.bytes().iter().all(|b| *b == b'c'));
    }

    #[test]
    fn callers_beyond_the_cap_share_one_label() {
        let b = UsageBook::default();
        for i in 0..MAX_CALLERS + 5 {
            b.record(&Caller::Client(format!("c{i}")), "m", 1, 1);
        }
        let t = b.totals();
        assert_eq!(t.len(), MAX_CALLERS + 1);
        let other = t.iter().find(|((c, _), _)| c == "_other").unwrap();
        assert_eq!(other.1.requests, 5);
        assert_eq!(b.take_unsaved().len(), MAX_CALLERS + 1);
        assert!(b.take_unsaved().is_empty());
    }
}
