//! The gateway's record part: its counters, its decisions with their reasons, and the numbers
//! its requests are known by.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::clock::now_ms;
use crate::data::decision::{Decision, DecisionAction};
use crate::data::metrics::Metrics;

/// What the data plane records on its way; the control plane reads it.
pub(crate) struct Record {
    metrics: Arc<Metrics>,
    decisions: mpsc::Sender<Decision>,
    next_request: AtomicU64,
}

impl Record {
    /// Counters, and the channel the decision log is fed from.
    pub(crate) fn new(metrics: Arc<Metrics>, decisions: mpsc::Sender<Decision>) -> Self {
        Self {
            metrics,
            decisions,
            next_request: AtomicU64::new(0),
        }
    }

    /// The counters and histograms.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A new request's number (from 1, per process).
    pub(crate) fn next_request(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Logs a decision and sends it to the decision log; never waits (a full channel drops
    /// the entry: the status page is best effort).
    pub(crate) fn decide(
        &self,
        request: u64,
        client: Option<&str>,
        model: &str,
        action: DecisionAction,
        reason: String,
    ) {
        tracing::info!(request, client, model, action = action.as_str(), %reason, "decision");
        let _ = self.decisions.try_send(Decision {
            at_ms: now_ms(),
            request,
            client: client.map(str::to_owned),
            model: model.to_owned(),
            action,
            reason,
        });
    }
}
